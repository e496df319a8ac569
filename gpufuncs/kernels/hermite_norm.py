"""``hermite_norm(x, n)``: normalized probabilists' Hermite functions ``He_k(x) / sqrt(k!)``."""

import math
from fractions import Fraction

import numpy as np

from ..registry import gufunc
from ..scalar import as_type, by_precision, muladd
from ..spec import Benchmark, CupyFormula, Tolerance


def _sqrt_factorials(n):
    """``sqrt(k!)`` for ``k < n`` from exact integer factorials, correctly rounded (inf past
    float64's range): the reference must be far more accurate than the kernel it checks."""
    values = []
    for k in range(n):
        f = math.factorial(k)
        shift = max(0, (f.bit_length() - 1000) // 2)  # keep 1000 bits, exact scaling by 2**shift
        values.append(np.ldexp(math.sqrt(f >> (2 * shift)), shift))
    return np.array(values, dtype=np.float64)


def _reference(x, n):
    from numpy.polynomial.hermite_e import hermevander

    x = np.asarray(x, dtype=np.float64)
    if n == 0:
        return np.empty((*x.shape, 0))
    with np.errstate(over="ignore", invalid="ignore"):
        values = hermevander(x.reshape(-1), n - 1) / _sqrt_factorials(n)
    return values.reshape((*x.shape, n))


def _numpy_expression(x, n):
    """The functions as a NumPy user writes them, in ``x``'s dtype (the CPU benchmark's anchor)."""
    from numpy.polynomial.hermite_e import hermevander

    return hermevander(x, n - 1) * (1 / _sqrt_factorials(n)).astype(x.dtype)


# The plain normalized recurrence in CUDA C, order-major like the cuda target's output
# (out[k * N + i]): the GPU benchmark's anchor.
_CUPY = CupyFormula(
    "T x, int32 n, int64 N", "raw T out",
    "T prev = 1; out[i] = prev; if (n > 1) { T cur = x; out[N + i] = cur; "
    "for (int k = 2; k < n; ++k) { T nxt = (x * cur - sqrt((T)(k - 1)) * prev) / sqrt((T)k); "
    "out[(long long)k * N + i] = nxt; prev = cur; cur = nxt; } }")


def _sqrt_ratio(num, den):
    """``sqrt(num / den)`` correctly rounded to float64, from exact integers."""
    bits = 128  # floor(sqrt(num/den) * 2**bits) is exact; both ends of that interval must round
    low = math.isqrt((num << (2 * bits)) // den)  # the same way for the result to be certain
    value = float(Fraction(low, 1 << bits))
    if low * low * den != num << (2 * bits):
        assert value == float(Fraction(low + 1, 1 << bits)), (num, den)
    return value


def _scaled_recurrence(orders):
    """The tables of the kernel's recurrence for ``k < orders``: ``(t, b, p)``.

    The kernel computes ``u_k = He_k(x) / 2**e_k`` with ``e_k = bit_length(k!) // 2``, so that
    ``2**e_k`` is within a factor sqrt(2) of ``sqrt(k!)`` and ``u_k`` stays as small as
    ``h_k``. He's recurrence ``He_k = x*He_{k-1} - (k-1)*He_{k-2}`` becomes
    ``u_k = (x*t_k)*u_{k-1} - b_k*u_{k-2}`` with ``t_k = 2**(e_{k-1} - e_k)`` and ``b_k = (k-1) *
    2**(e_{k-2} - e_k)``: powers of two times small integers, exact in float32, so ``x*t_k`` is
    exact too and each order rounds three times (a product, a product, a difference), or
    twice where the second product and the difference fuse into one multiply-add. The
    result is ``h_k = u_k * p_k`` with ``p_k = 2**e_k / sqrt(k!)`` (correctly rounded, in
    [0.7, 1.5)), a rounding that stays out of the recurrence.
    """
    e, factorial = [], 1
    p = np.empty(orders)
    for k in range(orders):
        factorial *= max(k, 1)
        e.append(factorial.bit_length() // 2)
        p[k] = _sqrt_ratio(1 << (2 * e[k]), factorial)
    t, b = np.zeros(orders), np.zeros(orders)  # t_0, b_0 and b_1 are never read
    for k in range(1, orders):
        t[k] = 2.0 ** (e[k - 1] - e[k])
        b[k] = (k - 1) * 2.0 ** (e[k - 2] - e[k]) if k > 1 else 0.0
    return t, b, p


#: Orders with tabulated coefficients: the documented range (``n`` in the hundreds) with room.
#: Past them the kernel goes on with the normalized recurrence, as for large ``|x|``. A float64
#: loop's tables take 24 KB (a float32 loop's 12 KB), well within a GPU's 64 KB of constant
#: memory.
_TABLE_ORDERS = 1024
# Numba compiles global arrays into the code as constants, on the CPU and on the GPU. float32
# loops read float32 copies (t and b are exact in float32, p is rounded once more): converting
# at every use cost 12% of the float32 time on one CPU core.
_T, _B, _P = _scaled_recurrence(_TABLE_ORDERS)
_T32, _B32, _P32 = _T.astype(np.float32), _B.astype(np.float32), _P.astype(np.float32)
# Cramer's inequality, |He_k(x)| <= 1.0865 * sqrt(k!) * exp(x**2 / 4) for every k, bounds
# |h_k(12)| (and |u_k(12)|, at most sqrt(2) times larger) by 7e15: far below float32's range.
_NO_OVERFLOW_X = 12.0


@gufunc(
    signatures=["void(float32, float32[:])", "void(float64, float64[:])"],
    layout="()->(n)",
    reference=_reference,
    # Norm-wise (see Tolerance): the recurrence's error grows slowly with k.
    tolerances={np.float32: Tolerance(rtol=64 * float(np.finfo(np.float32).eps)),
                np.float64: Tolerance(rtol=64 * float(np.finfo(np.float64).eps))},
    domains={"x": (-30.0, 30.0)},
    benchmark=Benchmark({"numpy": _numpy_expression}, sizes=(32,), cupy=_CUPY),
)
def hermite_norm(x, out):
    """Normalized Hermite functions ``out[k] = He_k(x) / sqrt(k!)`` for ``k < n``.

    Probabilists' Hermite polynomials (``He_0 = 1``, ``He_1 = x``), never forming ``k!``. For
    ``|x| <= 12`` and ``k < 1024``, ``h_k = u_k * p_k`` with ``u_k = (x*t_k)*u_{k-1} -
    b_k*u_{k-2}`` (``u_k`` is ``He_k`` scaled by a power of two near ``1/sqrt(k!)``, ``t_k``,
    ``b_k`` exact, ``p_k`` tabulated: see ``_scaled_recurrence``); elsewhere the normalized
    recurrence ``h_k = (x*h_{k-1} - sqrt(k-1)*h_{k-2}) / sqrt(k)``, with the pair rescaled by
    powers of two whenever a value outgrows ``2**64``. So every value that fits the dtype is
    finite (``n`` in the hundreds, ``|x|`` up to 30) and larger ones are ``±inf``. NaN input
    gives NaN throughout. Called as ``hermite_norm(x, n)``: the result has shape ``x.shape +
    (n,)``.
    """
    n = out.shape[0]
    if n == 0:
        return
    one = as_type(1, x)
    first = x * as_type(0, x) + one  # He_0 = 1, and NaN for NaN or inf like hermevander
    out[0] = first
    if n == 1:
        return
    prev, cur = first, x
    out[1] = cur
    start = 2
    if abs(x) <= as_type(_NO_OVERFLOW_X, x):  # False for NaN
        # All that runs for moderate x: no overflow test, no division, no square root, and
        # x*t_k is off the chain of dependent operations from one order to the next (a product
        # and a difference), so a CPU core overlaps consecutive samples. Kept apart from the
        # loop below: with the rescaling inside it, the GPU kernel took 40% longer in float32.
        t, b, p = by_precision(x, _T32, _T), by_precision(x, _B32, _B), by_precision(x, _P32, _P)
        start = min(n, _TABLE_ORDERS)
        # An unsigned index: Numba then leaves out the test for a negative index at each table
        # read and store (13% of the time on a CPU core).
        # One multiply-add (muladd) where there is one: a third less time on a CPU core.
        for i in range(np.uint64(2), np.uint64(start)):
            prev, cur = cur, muladd(x * t[i], cur, -(b[i] * prev))
            out[i] = cur * p[i]
        # The pair as h_{k-2}, h_{k-1} for the loop below (p_0 = p_1 = 1 if it never ran).
        prev, cur = prev * p[start - 2], cur * p[start - 1]
    # Large |x| (or NaN) from order 2, and orders past the tables. Rescaling by 2**-64 whenever
    # a value outgrows 2**64 keeps x*h_{k-1} from overflowing before the division; the scale is
    # applied again on the way out, so a result that does not fit the dtype becomes inf with
    # the right sign, never inf - inf = NaN.
    big = as_type(2.0**64, x)
    small = as_type(2.0**-64, x)
    scale = 0
    k = as_type(start - 1, x)  # a float counter: converting the loop index costs more on the GPU
    root_prev = math.sqrt(k)  # sqrt(k - 1), carried: one square root per order
    for i in range(start, n):
        k += one
        root = math.sqrt(k)
        prev, cur = cur, (x * cur - root_prev * prev) / root
        root_prev = root
        if abs(cur) > big:
            prev *= small
            cur *= small
            scale += 1
        value = cur
        for _ in range(scale):
            value *= big
        out[i] = value
