"""Kernels that call kernels: a kernel's body calls gpufuncs elementwise kernels and ``@njit``
helpers, inlined on every target (issue 30, item 4).

A composed kernel must be the hand-written body bit for bit: the callee is inlined with the
target's own treatment (vector math on the CPU, a device function on the GPU), as if its body
had been written out in the caller. The cuda cases run on the simulator in CI (this module runs
again there: see ``test_cuda_sim.py``) and on a GPU with ``pytest -m cuda``.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpufuncs as gf
from gpufuncs import clamp
from gpufuncs.targets.cpu import cache, kernel_key
from gpufuncs.testing import check_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/ lives beside gpufuncs
from benchmarks import bench_compose

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
# parallel compiles the threaded loops as well (about 10 s a kernel on 2 cores): slow suite.
TARGETS = ["cpu", pytest.param("parallel", marks=pytest.mark.slow), CUDA]
DTYPES = [np.float32, np.float64]
as_type = gf.as_type
F32_EPS, F64_EPS = float(np.finfo(np.float32).eps), float(np.finfo(np.float64).eps)


def _clipped_density(x, w):
    from scipy.stats import norm

    return np.clip(norm.pdf(x) * w, 0.0, 1.0)


# The example, through the module and as bare globals. Its constants are written in
# the loop's dtype, so that a float32 loop computes in float32 (a Python 0.0 is float64).
@gf.ufunc(signatures=gf.float_signatures(2), reference=_clipped_density, replace=True,
          # gaussian's tolerances, and one rounding more for the product with w (up to 4).
          tolerances={np.float32: gf.Tolerance(rtol=201 * F32_EPS, atol=4 * float(np.finfo(np.float32).tiny)),
                      np.float64: gf.Tolerance(rtol=5 * F64_EPS, ulps=5,
                                               atol=4 * float(np.finfo(np.float64).tiny))},
          domains={"w": (0.0, 4.0)})
def clipped_density(x, w):
    zero, one = as_type(0, x), as_type(1, x)
    return gf.clamp(gf.gaussian(x, zero, one) * w, zero, one)


# The same with bare globals (``clamp(gaussian(...))``), and both bodies written out by hand: the
# benchmark's pair (benchmarks/bench_compose.py), declared here under names of their own.
_declare = functools.partial(gf.ufunc, signatures=gf.float_signatures(2), reference=None, replace=True)
clipped_density_globals = _declare(name="clipped_density_globals")(bench_compose.composed)
clipped_density_by_hand = _declare(name="clipped_density_by_hand")(bench_compose.by_hand)


def sample(n: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """``x`` normal with spread 3 and the edges (NaN, infinities, zeros, huge and tiny values), and
    weights in [0, 4) with a NaN and an infinity: every branch of both callees."""
    rng = np.random.default_rng(n)
    edges = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, 40.0, -40.0]
    x = np.concatenate([rng.normal(scale=3.0, size=n - len(edges)), edges]).astype(dtype)
    w = rng.uniform(0.0, 4.0, n).astype(dtype)
    w[[1, 5]] = [np.nan, np.inf]
    return x, w


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kernel", [clipped_density, clipped_density_globals], ids=["gf.name", "global"])
def test_a_composed_kernel_is_the_hand_written_body_bit_for_bit(kernel, target, dtype):
    x, w = sample(1037, dtype)  # vector loops and their remainder
    with np.errstate(all="ignore"):
        assert_same_bits(kernel(x, w, target=target), clipped_density_by_hand(x, w, target=target))
        # Strided and broadcast: Numba's ufunc object on the CPU, the strided kernels on cuda.
        assert_same_bits(kernel(x[::3], w[:1], target=target),
                         clipped_density_by_hand(x[::3], w[:1], target=target))


if not SIMULATED:  # Numba's CUDA ufunc objects do not run on the simulator

    @pytest.mark.cuda
    def test_numbas_own_cuda_ufunc_of_a_composed_kernel():
        """``gf.get(name, "cuda")``: Numba's ``@vectorize(target="cuda")`` of the same copy."""
        x, w = sample(1037, np.float64)
        with np.errstate(all="ignore"):
            ours = clipped_density(x, w, target="cuda")
        np.testing.assert_allclose(gf.get("clipped_density", "cuda")(x, w), ours, rtol=4 * F64_EPS)


@pytest.mark.parametrize("target", TARGETS[:2])
def test_a_composed_kernel_computes_in_its_loops_dtype(target):
    x, w = np.linspace(-3, 3, 100, dtype=np.float32), np.full(100, 2, np.float32)
    assert clipped_density(x, w, target=target).dtype == np.float32
    assert clipped_density(x, 2.0, target=target).dtype == np.float32  # NEP 50: a weak Python float
    assert clipped_density(x.astype(np.float64), w, target=target).dtype == np.float64


@pytest.mark.parametrize("targets", [pytest.param(["cpu", "parallel"], marks=pytest.mark.slow),
                                     pytest.param(["cuda"], marks=pytest.mark.cuda)])
def test_a_composed_kernel_agrees_with_numpy(targets):
    """Hypothesis against ``np.clip(norm.pdf(x) * w, 0, 1)`` (many call signatures: slow)."""
    check_kernel(clipped_density, targets=targets)


if not SIMULATED:

    @pytest.mark.slow
    def test_the_cuda_cases_on_the_simulator():
        """This module's ``cuda`` cases, run again in a process on Numba's CUDA simulator."""
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda",
                               __file__], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-3000:]


# -- user kernels calling user kernels, through a closure and an @njit helper -------------------------
@gf.ufunc(signatures=gf.float_signatures(1), reference=None, replace=True)
def softplus(x):
    """``log(1 + exp(x))`` without overflow."""
    return max(x, as_type(0, x)) + math.log1p(math.exp(-abs(x)))


@numba.njit
def squared_distance(a, b):
    d = a - b
    return d * d


def make_scorers():
    """A kernel reaching a user kernel and an @njit helper through a closure, and the same body by
    hand (a kernel made in a function, as a factory or a notebook cell's function makes one)."""
    local_softplus, local_helper = softplus, squared_distance

    @gf.ufunc(signatures=gf.float_signatures(2), reference=None, replace=True)
    def score(x, y):
        return local_softplus(local_helper(x, y)) - local_softplus(-x)

    @gf.ufunc(signatures=gf.float_signatures(2), reference=None, replace=True)
    def score_by_hand(x, y):
        d = x - y
        s = d * d
        mx = -x
        return (max(s, as_type(0, s)) + math.log1p(math.exp(-abs(s)))) - \
            (max(mx, as_type(0, mx)) + math.log1p(math.exp(-abs(mx))))

    return score, score_by_hand


score, score_by_hand = make_scorers()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_user_kernel_calls_a_user_kernel_and_a_helper_through_a_closure(target, dtype):
    x, y = sample(300, dtype)
    with np.errstate(all="ignore"):
        assert_same_bits(score(x, y, target=target), score_by_hand(x, y, target=target))
        reference = np.logaddexp(dtype(0), (x - y) ** 2) - np.logaddexp(dtype(0), -x)
        np.testing.assert_allclose(score(x, y, target=target), reference,
                                   rtol=8 * np.finfo(dtype).eps, atol=8 * np.finfo(dtype).eps)


@gf.ufunc(signatures=gf.float_signatures(1), reference=None, replace=True)
def through_two_levels(x):
    return softplus(clamp(x, as_type(-2, x), as_type(2, x)))  # a kernel's result into another


@pytest.mark.parametrize("target", TARGETS)
def test_calls_nest(target):
    x = np.linspace(-5, 5, 41)
    np.testing.assert_allclose(through_two_levels(x, target=target), np.logaddexp(0.0, np.clip(x, -2, 2)),
                               rtol=8 * F64_EPS)


def test_the_called_kernels_body_gets_the_vector_math():
    """On the CPU a called kernel is inlined with its math replaced (what makes the loop
    vectorize); the same function run as plain Python, with libm's exp, may differ in the last
    bit, and the vector-math result is what the loop computes."""
    from gpufuncs.targets.cpu import vecmath

    copy = vecmath.with_vector_math(clipped_density.spec.pyfunc)
    inlined = copy.__globals__["gf"].gaussian
    assert inlined.targetoptions["inline"] == "always"
    assert inlined.py_func.__globals__["math"] is vecmath.namespace()
    assert copy.__globals__["gf"] is not gf and gf.gaussian is gf.registry["gaussian"]  # gf untouched


# -- gufunc bodies calling ufunc kernels ------------------------------------------------------------
@gf.gufunc(signatures=["void(float32[:], float32, float32[:])", "void(float64[:], float64, float64[:])"],
           layout="(n),()->(n)", reference=None, replace=True)
def clipped_cumsum(a, limit, out):
    total = as_type(0, limit)
    for i in range(a.shape[0]):
        total = clamp(total + a[i], -limit, limit)
        out[i] = total


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_gufunc_body_calls_a_ufunc_kernel(target, dtype):
    a = np.random.default_rng(3).normal(size=(5, 17)).astype(dtype)
    expected = np.empty_like(a)
    total = np.zeros(5, dtype)
    for i in range(a.shape[1]):
        total = np.clip(total + a[:, i], dtype(-1.5), dtype(1.5))
        expected[:, i] = total
    np.testing.assert_array_equal(clipped_cumsum(a, dtype(1.5), target=target), expected)


# -- what cannot be composed --------------------------------------------------------------------------
def calls_a_gufunc(x):
    return gf.hermite_norm(x, 3)[0]


def test_calling_a_gufunc_kernel_is_refused_at_definition():
    with pytest.raises(gf.KernelDefinitionError) as info:
        gf.ufunc(signatures=gf.float_signatures(1), reference=None, replace=True)(calls_a_gufunc)
    message = str(info.value)
    assert "'calls_a_gufunc' calls 'hermite_norm'" in message and "elementwise kernels only" in message
    assert "\x1b[" not in message and "Traceback" not in message  # not Numba's coloured traceback
    assert "calls_a_gufunc" not in gf.names()


# -- the disk caches' keys --------------------------------------------------------------------------
def _callee_v1(x):
    return x * 2.0


def _callee_v2(x):
    return x * 3.0


def test_the_cache_key_follows_the_called_kernels_source(monkeypatch):
    """A composed kernel is cached (its key digests the callee), and its key changes with the
    callee's code, whether the callee is a global or an attribute of a module."""
    import types

    def composed(x):
        return callee(x) + lib.callee(x)  # noqa: F821 (set below)

    lib = types.ModuleType("lib")
    keys = []
    for first, second in ((_callee_v1, _callee_v1), (_callee_v2, _callee_v1), (_callee_v1, _callee_v2)):
        monkeypatch.setitem(globals(), "callee", gf.Kernel(_spec_of(first)))
        lib.callee = gf.Kernel(_spec_of(second))
        keys.append(cache.dependency_digest(composed))
    assert None not in keys
    assert len(set(keys)) == 3
    assert kernel_key(clipped_density.spec) is not None  # cached on disk, as a kernel of its own


def _spec_of(pyfunc):
    """A declaration of ``pyfunc`` that is not registered (see gf.ufunc)."""
    from dataclasses import replace

    return replace(gf.registry["exp"].spec, name=pyfunc.__name__, pyfunc=pyfunc, reference=None)


@given(st.floats(-50, 50), st.floats(0, 4))
def test_scalars_from_python_agree_with_the_array_call(x, w):
    # A composed kernel is a kernel like any other: 0-d calls give NumPy scalars.
    got = clipped_density(x, w)
    assert isinstance(got, np.float64)
    assert_same_bits(np.array([got]), clipped_density_by_hand(np.array([x]), np.array([w])))
