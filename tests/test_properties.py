"""Registry-wide property tests, through the public ``gpufuncs.testing`` helpers.

Every kernel the library registers, for every dtype and every available target, is checked
against its declared reference with its declared tolerance (one code path: users test their own
kernels with the same :func:`gpufuncs.testing.check_kernel`). Known disagreements are listed in
``KNOWN_DISAGREEMENTS`` with the inputs they exclude, never as a wider tolerance; each is pinned
by a strict ``xfail`` test in ``test_kernels.py``, so fixing the kernel turns that test red until
the entry is removed here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings

import gpufuncs as gf
from gpufuncs.testing import check_kernel, inputs

DTYPES = [np.float32, np.float64]

#: Kernels registered by the library itself (test modules register their own kernels too,
#: which are tested where they are defined).
LIBRARY_KERNELS = [name for name in gf.names() if gf.registry[name].__module__.startswith("gpufuncs.")]

def _gaussian_float32_intermediate_out_of_range(args, dtype) -> bool:
    """float32: ``x - x0`` overflows, or ``exp(-z*z/2)`` is subnormal or 0 while the density
    itself is above the declared ``atol`` (tiny ``sigma``)."""
    if dtype != np.float32:
        return False
    x, x0, sigma = np.broadcast_arrays(*(np.asarray(a, np.float32).astype(np.float64) for a in args))
    tiny, big = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
    with np.errstate(all="ignore"):
        diff = x - x0
        bump = np.exp(-(diff / sigma) ** 2 / 2)
        underflow = (bump < tiny) & (bump / np.sqrt(2 * np.pi) / sigma > tiny)
    return bool(((np.abs(diff) > big) & np.isfinite(diff) | underflow).any())


#: kernel -> (extra check_kernel options that leave out the disagreeing inputs, why, pinned by)
KNOWN_DISAGREEMENTS: dict[str, tuple[dict, str]] = {
    "gaussian": (
        {"exclude": _gaussian_float32_intermediate_out_of_range},
        "float32 intermediates leave float32's range: x - x0 overflows (nan where norm.pdf is 0), "
        "exp(-z*z/2) underflows for tiny sigma (0 or 1e4 ULP off); pinned by test_kernels.py::"
        "test_gaussian_float32_tiny_sigma_keeps_precision and "
        "test_gaussian_float32_overflowing_difference_with_infinite_sigma",
    ),
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


def test_gaussian_exclusion_covers_exactly_the_pinned_points():
    exclude = _gaussian_float32_intermediate_out_of_range
    f = np.float32
    assert exclude((np.array([3e38], f), f(-3e38), f(np.inf)), np.float32)
    assert exclude((np.array([13.9e-30], f), f(0), f(1e-30)), np.float32)
    assert not exclude((np.array([13.9e-30], f), f(0), f(1e-30)), np.float64)
    assert not exclude((np.linspace(-40, 40, 81, dtype=f), f(0.5), np.array([[1e-3], [1.0], [1e30]], f)),
                       np.float32)
    assert not exclude((np.array([np.inf, np.nan, 0.0], f), f(0), f(0)), np.float32)


def test_kernel_without_reference_fails_check(restore_registry):
    @gf.ufunc(signatures=gf.float_signatures(1), reference=None, name="props_no_reference")
    def props_no_reference(x):
        return x

    with pytest.raises(AssertionError, match=r"props_no_reference.*declares no reference"):
        check_kernel(props_no_reference, max_examples=5)
    with pytest.raises(AssertionError, match="props_no_reference"):
        test_every_registered_kernel_has_a_reference()


# -- the strategy reaches what it promises -------------------------------------------------------
def _values(args, spec):
    return np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in args[: spec.nin]])


_F32 = np.finfo(np.float32)
REACHES = {
    "subnormal": lambda v, a: bool(((v != 0) & (np.abs(v) < _F32.tiny)).any()),
    "nan": lambda v, a: bool(np.isnan(v).any()),
    "+inf": lambda v, a: bool((v == np.inf).any()),
    "-inf": lambda v, a: bool((v == -np.inf).any()),
    "-0.0": lambda v, a: bool(((v == 0) & np.signbit(v)).any()),
    "tail": lambda v, a: bool((np.isfinite(v) & (np.abs(v) > 1e30)).any()),
    "empty array": lambda v, a: any(isinstance(x, np.ndarray) and x.size == 0 for x in a),
    "python float": lambda v, a: any(type(x) is float for x in a),
    "numpy scalar": lambda v, a: any(isinstance(x, np.generic) for x in a),
    "strided view": lambda v, a: any(isinstance(x, np.ndarray) and x.ndim and not x.flags.contiguous
                                     for x in a),
    "sigma <= 0": lambda v, a: bool((np.asarray(a[2]) <= 0).any()),
    "sigma nan": lambda v, a: bool(np.isnan(np.asarray(a[2])).any()),
}


@pytest.mark.parametrize("what", list(REACHES))
def test_inputs_reach(what):
    spec = gf.gaussian.spec
    found = find(inputs(gf.gaussian, np.float32), lambda a: REACHES[what](_values(a, spec), a),
                 settings=settings(max_examples=5000, database=None, phases=[Phase.generate]))
    assert REACHES[what](_values(found, spec), found)


def test_inputs_draw_output_only_sizes_including_zero():
    found = find(inputs(gf.hermite_norm), lambda a: a[1] == 0 and np.size(a[0]) > 0,
                 settings=settings(max_examples=2000, database=None, phases=[Phase.generate]))
    assert gf.hermite_norm(*found).shape == (*np.shape(found[0]), 0)


@given(inputs(gf.hermite_norm, np.float64))
def test_inputs_respect_a_bounded_domain(args):
    x = np.asarray(args[0], np.float64)
    assert (np.isnan(x) | (np.abs(x) <= 61)).all()  # |x| <= 30, its edges, and 30 + 31 outside
    assert isinstance(args[1], int) and 0 <= args[1] <= 8
