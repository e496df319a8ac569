"""Reduction kernels (``gf.reduction``) and reductions by a binary function in fused functions
(``np.hypot.reduce``, ``kernel.reduce``): against NumPy's and SciPy's own, on every target."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import check_reduction

TARGETS = ["cpu", pytest.param("parallel", marks=pytest.mark.slow),
           pytest.param("cuda", marks=pytest.mark.cuda)]


@gf.reduction(combine=np.add, identity=0.0, finish=math.sqrt)
def l2norm(x):
    """The Euclidean norm."""
    return x * x


def _logaddexp(a, b):
    first = a > b or a != a  # (NaN propagates, whichever side it is on)
    hi, lo = (a, b) if first else (b, a)
    base = hi if hi > -math.inf else 0.0  # (-inf - -inf would be NaN, and raise invalid)
    return hi + math.log1p(math.exp(lo - base))


logsumexp = gf.reduction(lambda x: x, combine=_logaddexp, identity=-math.inf, name="logsumexp")


@gf.reduction(combine=np.maximum)
def max_distance(a, b):
    return abs(a - b)


@gf.reduction(combine=np.bitwise_xor)
def xor_of_flips(a):
    return a ^ 6  # (int16 ^ int64 is int64; the CUDA simulator's NumPy scalars would wrap a * 3 in int16)


@gf.ufunc(signatures=gf.float_signatures(2), identity=0.0, reference=np.hypot, replace=True)
def hypot_kernel(a, b):
    return math.sqrt(a * a + b * b)


norm_by_hypot = gf.reduction(lambda x: x, combine=hypot_kernel, name="norm_by_hypot")

CASES = [(l2norm, (np.zeros(1),), 0), (l2norm, (np.zeros(1, np.float32),), 0),
         (logsumexp, (np.zeros(1),), 8), (max_distance, (np.zeros(1), np.zeros(1)), 0),
         (xor_of_flips, (np.zeros(1, np.int16),), 0), (norm_by_hypot, (np.zeros(1),), 32)]
IDS = ["l2norm-float64", "l2norm-float32", "logsumexp", "max_distance", "xor-int16", "hypot-kernel"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kernel, like, ulps", CASES, ids=IDS)
def test_declared_reductions_agree_with_their_parts_run_eagerly(kernel, like, ulps, target):
    check_reduction(kernel, *like, targets=[target], ulps=ulps,
                    max_examples=8 if target == "cuda" else None)


@pytest.mark.parametrize("target", TARGETS)
def test_norm_and_log_sum_exp_match_numpy_and_scipy(target):
    from scipy.special import logsumexp as scipy_logsumexp

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 7)) * 10
    np.testing.assert_allclose(l2norm(x, target=target), np.linalg.norm(x), rtol=1e-15)
    np.testing.assert_allclose(l2norm(x, axis=0, target=target), np.linalg.norm(x, axis=0), rtol=1e-15)
    assert l2norm(x, axis=1, keepdims=True, target=target).shape == (300, 1)
    np.testing.assert_allclose(logsumexp(x, target=target), scipy_logsumexp(x), rtol=1e-14)
    np.testing.assert_allclose(logsumexp(x, axis=(0, 1), target=target), scipy_logsumexp(x), rtol=1e-14)
    np.testing.assert_allclose(logsumexp(x, axis=1, target=target), scipy_logsumexp(x, axis=1), rtol=1e-14)
    assert l2norm(x.astype(np.float32), target=target).dtype == np.float32
    with np.errstate(invalid="raise"):  # no -inf - -inf (exp(-inf): underflow, docs/semantics.md)
        assert logsumexp(np.full(300, -np.inf), target=target) == -np.inf
    assert logsumexp(np.empty(0), target=target) == -np.inf  # the identity, for no values
    assert float(max_distance(x[:, 0], x[:, 1], target=target)) == np.max(abs(x[:, 0] - x[:, 1]))
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        max_distance(np.empty(0), np.empty(0), target=target)


def test_a_combine_given_as_python_adds_pairwise_as_numpy_sums():
    """A reduction by a scalar function combines in NumPy's pairwise order: adversarial values
    (a large one, then many that a running sum would drop) lose no more than NumPy's sum."""
    n = 1 << 18
    eps = np.finfo(np.float64).eps
    x = np.full(n, eps / 4)
    x[0] = 1.0
    exact = math.fsum(x)
    plain_sum = gf.reduction(lambda v: v, combine=lambda a, b: a + b, identity=0.0, name="plain_sum")
    assert abs(functools_fold(x) - exact) > 1000 * eps  # a running sum in order loses them all
    for target in ("cpu", "parallel"):
        got = plain_sum(x, target=target)
        assert abs(got - exact) <= max(abs(np.sum(x) - exact), 64 * eps), (target, got, exact)
    assert plain_sum(x, target="cpu") == plain_sum(x, target="parallel")  # the same bits


def functools_fold(x):
    total = 0.0
    for v in x.tolist():
        total += v
    return total


@pytest.mark.parametrize("finished", [True, False])
def test_out_is_checked_before_anything_is_written(finished):
    kernel = l2norm if finished else max_distance
    args = (np.arange(12.0).reshape(3, 4),) * (1 if finished else 2)
    buffer = np.arange(20.0)
    before = buffer.copy()
    with pytest.raises(ValueError, match="out= has shape"):
        kernel(*args, axis=0, out=buffer[:3])
    np.testing.assert_array_equal(buffer, before)
    out = buffer[1:9:2]  # a strided view: the rest of the buffer stays as it was
    assert kernel(*args, axis=0, out=out) is out
    np.testing.assert_array_equal(out, kernel(*args, axis=0))
    untouched = np.ones(20, bool)
    untouched[1:9:2] = False
    np.testing.assert_array_equal(buffer[untouched], before[untouched])


def test_declarations_are_refused_with_the_reason():
    with pytest.raises(gf.KernelDefinitionError, match=r"'bad'.*np\.subtract is not an associative"):
        gf.reduction(lambda x: x, combine=np.subtract, name="bad")
    with pytest.raises(gf.KernelDefinitionError, match="give identity="):
        gf.reduction(lambda x: x, combine=lambda a, b: a + b, name="bad")
    with pytest.raises(gf.KernelDefinitionError, match=r"identity=1\.0, but its combine's identity is 0"):
        gf.reduction(lambda x: x, combine=np.add, identity=1.0, name="bad")
    with pytest.raises(gf.KernelDefinitionError, match="its finish takes 1 input"):
        gf.reduction(lambda x: x, combine=np.add, finish=lambda a, b: a, name="bad")
    with pytest.raises(gf.KernelDefinitionError, match=r"np\.sqrt is not an associative"):
        gf.reduction(lambda x: x, combine=np.sqrt, name="bad")
    with pytest.raises(gf.KernelDefinitionError, match="its combine takes 2 input"):
        gf.reduction(lambda x: x, combine=lambda a: a, identity=0, name="bad")
    with pytest.raises(gf.KernelDefinitionError, match="must be a scalar function"):
        gf.reduction(lambda x: x, combine=np.add, finish="sqrt", name="bad")


def test_a_combine_kernel_without_an_identity_is_refused(restore_registry):
    @gf.ufunc(signatures=["float64(float64, float64)"], replace=True)
    def no_identity(a, b):
        return a + b

    with pytest.raises(gf.KernelDefinitionError, match="'no_identity' has no identity"):
        gf.reduction(lambda x: x, combine=no_identity, name="bad")


# -- reductions by a binary function in fused functions ------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_ufunc_and_kernel_reduce_in_fused_functions_as_numpys(target):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 6))
    i = rng.integers(-50, 50, (40, 6)).astype(np.int8)
    cases = [
        (gf.fuse(lambda a: np.add.reduce(a * 2)), x, 2),  # axis 0, ufunc.reduce's default
        (gf.fuse(lambda a: np.add.reduce(a * 2, axis=None, keepdims=True)), i, 0),  # int8 -> int64
        (gf.fuse(lambda a: np.maximum.reduce(a - 1, axis=1)), x, 0),
        (gf.fuse(lambda a: np.bitwise_or.reduce(a * 3, axis=(0, 1))), i, 0),
        (gf.fuse(lambda a: np.logical_xor.reduce(a > 0, axis=0)), x, 0),
        (gf.fuse(lambda a: np.hypot.reduce(a * 2, axis=1)), x, 4),
        (gf.fuse(lambda a: hypot_kernel.reduce(a + 1, axis=None)), x, 16),
    ]
    for fused, a, ulps in cases:
        want = fused.func(a)
        got = fused(a, target=target)
        got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
        assert got.dtype == np.asarray(want).dtype and got.shape == np.shape(want)
        if ulps:
            np.testing.assert_array_max_ulp(got, want, maxulp=ulps)
        else:
            np.testing.assert_array_equal(got, want)


def test_reductions_fusion_cannot_compute_are_refused_naming_the_line(restore_registry):
    @gf.ufunc(signatures=["float64(float64, float64)"], replace=True)
    def no_identity(a, b):
        return a + b

    def difference(a):
        return np.subtract.reduce(a)

    def combined(a):
        return no_identity.reduce(a * 2)

    for func, reason in ((difference, "np.subtract.reduce is not fused"),
                         (combined, "needs a kernel with an identity")):
        with pytest.raises(gf.FusionError, match=f"{func.__name__}.*line.*{reason}"):
            gf.fuse(func)(np.ones(3))


def test_a_lazy_kernel_reduces_and_fuses_before_any_call(restore_registry):
    @gf.ufunc(identity=0.0, replace=True)
    def lazy_add(a, b):
        return a + b

    assert lazy_add.reduce(np.arange(5.0)) == 10.0

    @gf.ufunc(replace=True)
    def lazy_twice(a):
        return 2 * a

    assert gf.fuse(lambda a: lazy_twice(a) + 1)(np.arange(3.0)).tolist() == [1.0, 3.0, 5.0]


@pytest.mark.cuda
def test_reduction_kernels_keep_device_arrays_on_the_device():
    cp = pytest.importorskip("cupy")
    x = np.random.default_rng(2).standard_normal((1000, 3))
    d = cp.asarray(x)
    for kernel in (l2norm, logsumexp, norm_by_hypot):
        for axis in (None, 0, 1):
            got = kernel(d, axis=axis)
            assert isinstance(got, cp.ndarray), (kernel, axis, type(got))
            np.testing.assert_allclose(got.get(), kernel(x, axis=axis, target="cpu"), rtol=1e-13)
    out = cp.empty(3)
    assert l2norm(d, axis=0, out=out) is out
    np.testing.assert_allclose(out.get(), np.linalg.norm(x, axis=0), rtol=1e-14)


@gf.reduction(combine=np.add, identity=0, finish=np.sqrt)
def rms_like(x):
    return x * x


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("kernel", [l2norm, rms_like], ids=["math.sqrt", "np.sqrt"])
def test_a_finish_in_the_one_launch_is_the_finish_applied_after(kernel, dtype):
    """On a whole CuPy array the finish runs in the reduction's own launch: the same bits and
    dtype as the finish applied to the unfinished result, as a host call gives them."""
    cp = pytest.importorskip("cupy")
    x = (np.random.default_rng(3).standard_normal(100_003) * 40).astype(dtype)
    d = cp.asarray(x)
    got = kernel(d)
    expected = kernel.finished(kernel.reduced(d))
    assert isinstance(got, cp.ndarray) and got.shape == () and got.dtype == expected.dtype
    assert got.dtype == np.asarray(kernel(x, target="cpu")).dtype
    assert got.tobytes() == expected.tobytes()
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got.get(), kernel(x, target="cpu"), rtol=rtol)
    assert kernel(d, keepdims=True).shape == (1,)


@pytest.mark.parametrize("shape", [(5, 1), (5, 2), (3, 1), (5,)], ids=str)
def test_a_float64_sum_that_overflows_is_inf_as_numpys(shape):
    """Finite values whose sum overflows: inf, with NumPy's overflow flag alone, whatever the
    layout. The compensated lanes once computed inf - inf (NaN, and the invalid flag) where a
    ``(5, 1)`` array added its values into one lane (found by a random example of
    ``test_declared_reductions_agree_with_their_parts_run_eagerly``)."""
    x = np.full(shape, 8e153)  # (its square 6.4e307: three of them overflow)
    with np.errstate(over="ignore", invalid="raise"):
        expected = np.sum(x * x)
        assert expected == np.inf
        assert l2norm.reduced(x, axis=None, target="cpu") == expected
        assert l2norm(x, target="cpu") == np.sqrt(expected)
