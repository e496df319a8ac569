"""``hermite_norm(x, n)``: normalized probabilists' Hermite functions ``He_k(x) / sqrt(k!)``."""

import math

import numpy as np

from ..registry import gufunc
from ..scalar import as_type
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

    Probabilists' Hermite polynomials (``He_0 = 1``, ``He_1 = x``), computed with the normalized
    recurrence ``h_k = (x*h_{k-1} - sqrt(k-1)*h_{k-2}) / sqrt(k)``, which never forms ``k!``. When
    a value outgrows ``2**64`` the recurrence is run again with the pair rescaled by powers of
    two, so every value that fits the dtype is finite (``n`` in the hundreds, ``|x|`` up to 30)
    and larger ones are ``±inf``. NaN input gives NaN throughout. Called as ``hermite_norm(x,
    n)``: the result has shape ``x.shape + (n,)``.
    """
    n = out.shape[0]
    if n == 0:
        return
    one = as_type(1, x)
    first = x * as_type(0, x) + one  # He_0 = 1, and NaN for NaN or inf like hermevander
    out[0] = first
    if n == 1:
        return
    # The plain recurrence first: it is all that runs for moderate x. The two loops below are
    # separate on purpose: with the rescaling inside this one, the GPU kernel took 40% longer in
    # float32. Any overflow passes through a value above 2**64 (inf included) first, and only
    # then is the result computed again, rescaled.
    big = as_type(2.0**64, x)
    grew = abs(x) > big
    prev, cur = first, x
    out[1] = cur
    k = one  # a float counter: converting the loop index costs more on the GPU
    root_prev = one  # sqrt(k - 1), carried: one square root per order
    for i in range(2, n):
        k += one
        root = math.sqrt(k)
        prev, cur = cur, (x * cur - root_prev * prev) / root
        root_prev = root
        if abs(cur) > big:
            grew = True
        out[i] = cur
    if not grew:
        return
    # Rescaling by 2**-64 whenever a value outgrows 2**64 keeps x*h_{k-1} from overflowing
    # before the division; the scale is applied again on the way out, so a result that does
    # not fit the dtype becomes inf with the right sign, never inf - inf = NaN.
    small = as_type(2.0**-64, x)
    scale = 0
    prev, cur = first, x
    k = root_prev = one
    for i in range(2, n):
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
