"""``gaussian(x, x0, sigma)``: the normal probability density."""

import math

import numpy as np

from ..registry import float_signatures, ufunc
from ..scalar import as_type
from ..spec import Benchmark, CupyFormula, Tolerance

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _reference(x, x0, sigma):
    """``scipy.stats.norm.pdf``, except where its ``exp(-z*z/2)`` underflows to 0 before a tiny
    ``sigma`` would lift the density back into range (``x=0, x0=1.8e-148, sigma=4.5e-150``:
    1.2e-189, which the kernel gives). There, SciPy's formula on the same float64 ``z * z`` in
    NumPy's ``longdouble`` (x87's 80 bits on x86-64; where it is float64, SciPy's 0 stays)."""
    from scipy.stats import norm

    density = np.asarray(norm.pdf(x, loc=x0, scale=sigma), dtype=np.float64)
    with np.errstate(all="ignore"):
        z = (np.asarray(x, np.float64) - x0) / sigma  # SciPy's z, rounded as SciPy rounds it
        lost = (density == 0) & np.isfinite(z) & (np.asarray(sigma) > 0)
        if lost.any():
            zz = np.broadcast_to(z * z, density.shape)
            wide = np.exp(-np.longdouble(0.5) * zz) / (np.longdouble(math.sqrt(2 * math.pi)) *
                                                      np.broadcast_to(sigma, density.shape))
            density = np.where(lost, wide.astype(np.float64), density)
    return density[()] if density.ndim == 0 else density


def _numpy_expression(x, x0, sigma):
    """The density as a NumPy user writes it (the CPU benchmark's anchor)."""
    return np.exp(-0.5 * ((x - x0) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))


# The CUDA C a CuPy user would write, NaN rule for sigma included (the GPU benchmark's anchor).
_CUPY = CupyFormula(
    "T x, T x0, T s", "T y",
    "if (s != s || s <= (T)0) { y = (T)(0.0 / 0.0); } else { T z = (x - x0) / s; "
    f"y = exp(-(z * z) / (T)2) / (T){math.sqrt(2 * math.pi)!r} / s; }}")


@ufunc(
    signatures=float_signatures(3),
    reference=_reference,
    # float32 arithmetic: z = (x - x0) / sigma carries one rounding, which exp(-z*z/2) turns
    # into a relative error of about z**2 * eps; the largest z before float32 underflow is ~14.
    tolerances={
        np.float32: Tolerance(rtol=200 * float(np.finfo(np.float32).eps),
                              atol=float(np.finfo(np.float32).tiny)),
        np.float64: Tolerance(rtol=4 * float(np.finfo(np.float64).eps), ulps=4,
                              atol=float(np.finfo(np.float64).tiny)),
    },
    domains={"sigma": (0.0, np.inf)},
    benchmark=Benchmark({"numpy": _numpy_expression, "scipy": _reference}, scalars=(0.5, 1.5),
                        cupy=_CUPY),
)
def gaussian(x, x0, sigma):
    """Normal probability density with mean ``x0`` and standard deviation ``sigma``.

    Equal to ``scipy.stats.norm.pdf(x, loc=x0, scale=sigma)``, edge cases included:
    ``sigma <= 0`` or NaN in any argument gives NaN, infinite ``x`` gives 0.
    """
    if sigma != sigma or sigma <= as_type(0, sigma):  # quiet NaN test first: no FP warning
        return as_type(math.nan, x)
    # Written without branches on the data (each choice a select between values computed
    # either way) and with one exp, so that a loop of this kernel vectorizes.
    one = as_type(1, x)
    # z = (x - x0) / sigma; where x - x0 overflows, ((x/2 - x0/2) / sigma) * 2 (halves cannot
    # overflow, and the scaling by powers of two is exact). With an infinite x or x0 both give
    # the same z: an infinite one, or NaN for inf - inf.
    overflowed = math.isinf(x - x0)
    half = as_type(0.5, x) if overflowed else one
    z = ((x * half - x0 * half) / sigma) * (as_type(2, x) if overflowed else one)
    zz = z * z
    # exp(-z*z/2) * (1/sqrt(2 pi) / sigma): divisions are the costliest operations here on
    # the CPU and the GPU, and the factor depends on sigma alone, so that a loop with a scalar
    # sigma computes it once (LLVM hoists it); the rounding is that of dividing twice. For a
    # sigma so small that the factor would overflow, it is made from sigma * 2**53 and the
    # product scaled back (both exact). Where exp(-z*z/2) alone would be subnormal (float32)
    # before a small sigma lifts it back into range, e * (e * factor) with e = exp(-z*z/4).
    split = (zz > as_type(170, zz)) & (sigma < as_type(1, sigma))
    e = math.exp(-zz * (as_type(0.25, zz) if split else as_type(0.5, zz)))
    scale = as_type(2.0**53, sigma) if sigma < as_type(2.0**-60, sigma) else one
    u = (e * (as_type(_INV_SQRT_2PI, z) / (sigma * scale))) * scale
    return u * e if split else u
