"""Registry-wide property tests, through the public ``gpufuncs.testing`` helpers.

Every kernel the library registers, for every dtype and every available target, is checked
against its declared reference with its declared tolerance (one code path: users test their own
kernels with the same :func:`gpufuncs.testing.check_kernel`). A known disagreement is listed in
``KNOWN_DISAGREEMENTS`` with the inputs it excludes, never as a wider tolerance, and pinned by a
test in ``test_kernels.py`` that asserts both the kernel's and the reference's value there.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings

import gpufuncs as gf
from gpufuncs.testing import _without_excluded, check_kernel, edge_grid, edge_values, inputs

DTYPES = [np.float32, np.float64]

#: Kernels registered by the library itself (test modules register their own kernels too,
#: which are tested where they are defined).
LIBRARY_KERNELS = [name for name in gf.names() if gf.registry[name].__module__.startswith("gpufuncs.")]

def _float64_difference_overflows(args, dtype) -> bool:
    """float64 inputs whose ``x - x0`` overflows: SciPy's ``norm.pdf`` then divides inf by the
    scale and returns NaN (or 0 for a finite scale), while the kernel scales before subtracting
    and returns the true density (0 for an infinite sigma)."""
    if dtype != np.float64:
        return False
    x, x0 = (np.asarray(a, np.float64) for a in args[:2])
    with np.errstate(all="ignore"):
        diff = x - x0
    return bool((np.isinf(diff) & np.isfinite(x) & np.isfinite(x0)).any())


#: kernel -> (extra check_kernel options that leave out disagreeing inputs, why, pinned by).
KNOWN_DISAGREEMENTS: dict[str, tuple[dict, str]] = {
    "gaussian": (
        {"exclude": _float64_difference_overflows},
        "reference artefact: norm.pdf(-1.8e308, 1.8e308, inf) is nan because its float64 x - loc "
        "overflows; the density is 0; pinned by test_kernels.py::"
        "test_gaussian_float64_overflowing_difference_where_scipy_gives_nan",
    ),
}


def known_options(name: str) -> dict:
    """The ``check_kernel`` options that leave out a kernel's known disagreements (every target)."""
    return KNOWN_DISAGREEMENTS.get(name, ({}, ""))[0]


def test_library_registers_the_builtins():
    assert {"clamp", "exp", "gaussian", "hermite_norm"} <= set(LIBRARY_KERNELS)


def test_every_library_kernel_has_a_reference():
    # (test modules also register kernels without one: ones that raise, hang off their domain
    # or exist to show a refusal; they are checked where they are defined)
    assert LIBRARY_KERNELS
    missing = [name for name in LIBRARY_KERNELS if gf.registry[name].spec.reference is None]
    assert not missing, f"library kernels without a reference (cannot be tested): {missing}"


@pytest.mark.parametrize("target", gf.available_targets())
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", LIBRARY_KERNELS)
def test_kernel_matches_reference(name, dtype, target):
    check_kernel(name, targets=[target], dtypes=[dtype], **known_options(name))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", LIBRARY_KERNELS)
def test_cpu_and_parallel_agree(name, dtype):
    check_kernel(name, targets=["cpu", "parallel"], dtypes=[dtype], **known_options(name))


@pytest.mark.parametrize("name", sorted(KNOWN_DISAGREEMENTS))
def test_known_disagreements_name_real_kernels(name):
    assert name in LIBRARY_KERNELS


def test_gaussian_exclusion_covers_only_overflowing_float64_differences():
    exclude = _float64_difference_overflows
    big = np.finfo(np.float64).max
    assert exclude((np.array([-big]), big, np.inf), np.float64)
    assert not exclude((np.array([-big]), big, np.inf), np.float32)
    assert not exclude((np.array([np.inf, 1e300]), 0.0, 1.0), np.float64)


_SCALE = 2.0


def test_kernel_without_reference_is_checked_against_itself_run_in_python(restore_registry):
    @gf.ufunc(signatures=["int64(int64)", "float64(float64)"], name="props_no_reference")
    def props_no_reference(x):
        return x * 2 + 1

    check_kernel(props_no_reference, targets=["cpu"], max_examples=20)

    @gf.ufunc(signatures=["float64(float64)"], name="props_frozen_global")
    def props_frozen_global(x):
        return x * _SCALE  # Numba freezes the global's value when it compiles

    global _SCALE
    props_frozen_global(np.ones(2), target="cpu")
    _SCALE = 3.0  # Python now reads 3.0: the compiled kernel disagrees, and the check says so
    try:
        with pytest.raises(AssertionError, match=r"props_frozen_global \(d->d loop, target 'cpu'\)"):
            check_kernel(props_frozen_global, targets=["cpu"], max_examples=20)
    finally:
        _SCALE = 2.0


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


# -- the edge grid: every combination of the inputs' edge values, before any draw ----------------
def test_edge_grid_runs_through_every_combination_of_edge_values():
    grid = edge_grid(gf.gaussian, np.float32)
    edges = [edge_values(np.float32, gf.gaussian.spec.domains.get(n)) for n in ("x", "x0", "sigma")]
    points = {tuple(np.float32(a[i]).tobytes() for a in grid) for i in range(grid[0].size)}
    expected = {tuple(np.float32(v).tobytes() for v in combo) for combo in itertools.product(*edges)}
    assert all(a.dtype == np.float32 and a.shape == (math.prod(map(len, edges)),) for a in grid)
    assert points == expected  # bytes: -0.0 and 0.0 are both there, NaN once


def test_edge_grid_of_gufuncs_adds_output_only_sizes_or_is_none_for_core_inputs(restore_registry):
    x, n = edge_grid(gf.hermite_norm, np.float64, max_side=5)
    assert n == 5 and np.array_equal(x, edge_values(np.float64, (-30.0, 30.0)), equal_nan=True)

    @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)",
               reference=lambda a: a, name="props_core_input")
    def props_core_input(a, out):
        for i in range(a.shape[0]):
            out[i] = a[i]

    assert edge_grid(props_core_input) is None


def test_check_kernel_fails_at_an_edge_on_every_run_whatever_is_drawn(restore_registry):
    @gf.ufunc(signatures=gf.float_signatures(2), reference=np.hypot, name="props_naive_hypot")
    def props_naive_hypot(a, b):
        return math.sqrt(a * a + b * b)

    for _ in range(2):  # the edge grid is an explicit example: it runs first, every time
        with pytest.raises(AssertionError, match=r"props_naive_hypot .*points disagree") as info:
            check_kernel(props_naive_hypot, dtypes=[np.float32], targets=["cpu"], max_examples=1)
        assert "args=edge_grid('props_naive_hypot', 'float32')" in "".join(info.value.__notes__)


def test_exclude_removes_edge_grid_points_one_by_one():
    grid = edge_grid(gf.gaussian, np.float64)
    kept = _without_excluded(grid, 3, np.dtype(np.float64), _float64_difference_overflows)
    x, x0 = (np.asarray(a, np.float64) for a in grid[:2])
    with np.errstate(over="ignore", invalid="ignore"):
        overflowing = np.isinf(x - x0) & np.isfinite(x) & np.isfinite(x0)
    assert overflowing.sum() > 0 and kept[0].size == grid[0].size - overflowing.sum()
    check_kernel(gf.gaussian, dtypes=[np.float64], targets=["cpu"], max_examples=1,
                 exclude=_float64_difference_overflows)
