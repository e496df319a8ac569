"""Registry-wide property tests, through the public ``gpufuncs.testing`` helpers.

Every kernel the library registers, for every dtype and every available target, is checked
against its declared reference with its declared tolerance (one code path: users test their own
kernels with the same :func:`gpufuncs.testing.check_kernel`). Known disagreements are listed in
``KNOWN_DISAGREEMENTS`` with the input class they exclude, never as a wider tolerance; each is
pinned by a strict ``xfail`` test elsewhere, so fixing the kernel turns that test red until the
entry is removed here.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import check_kernel

DTYPES = [np.float32, np.float64]

#: Kernels registered by the library itself (test modules register their own kernels too,
#: which are tested where they are defined).
LIBRARY_KERNELS = [name for name in gf.names() if gf.registry[name].__module__.startswith("gpufuncs.")]

#: kernel -> (options for ``inputs`` that leave out the disagreeing input class, why, pinned by)
KNOWN_DISAGREEMENTS: dict[str, tuple[dict, str]] = {
    "hermite_norm": (
        {"allow_nan": False},
        "hermite_norm(nan, n)[0] is 1.0, the reference (hermevander, eval_hermitenorm) gives nan; "
        "pinned by test_kernels.py::test_hermite_nan_input_gives_nan",
    ),
}


def _options(name: str) -> dict:
    return KNOWN_DISAGREEMENTS.get(name, ({}, ""))[0]


def test_library_registers_the_builtins():
    assert {"clamp", "exp", "gaussian", "hermite_norm"} <= set(LIBRARY_KERNELS)


def test_every_registered_kernel_has_a_reference():
    missing = [name for name in gf.names() if gf.registry[name].spec.reference is None]
    assert not missing, f"registered kernels without a reference (cannot be tested): {missing}"


@pytest.mark.parametrize("target", gf.available_targets())
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", LIBRARY_KERNELS)
def test_kernel_matches_reference(name, dtype, target):
    check_kernel(name, targets=[target], dtypes=[dtype], **_options(name))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", LIBRARY_KERNELS)
def test_cpu_and_parallel_agree(name, dtype):
    check_kernel(name, targets=["cpu", "parallel"], dtypes=[dtype], **_options(name))


@pytest.mark.parametrize("name", sorted(KNOWN_DISAGREEMENTS))
def test_known_disagreements_name_real_kernels(name):
    assert name in LIBRARY_KERNELS


def test_kernel_without_reference_fails_check(restore_registry):
    @gf.ufunc(signatures=gf.float_signatures(1), reference=None, name="props_no_reference")
    def props_no_reference(x):
        return x

    with pytest.raises(AssertionError, match=r"props_no_reference.*declares no reference"):
        check_kernel(props_no_reference, max_examples=5)
    with pytest.raises(AssertionError, match="props_no_reference"):
        test_every_registered_kernel_has_a_reference()
