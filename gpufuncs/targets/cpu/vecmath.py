"""Vectorizable replacements for ``math.exp``, ``math.log`` and friends in Numba CPU loops.

The pip builds of llvmlite have no SVML, so ``math.exp`` inside an ``@njit`` loop stays one
scalar libm call per element (LLVM writes ``llvm.exp.v8f64`` and the backend splits it back into
eight calls) and the loop around it runs several times slower than NumPy's SIMD ``np.exp``. The
functions here are range reductions, polynomials and exponent-bit arithmetic, compiled once
per process into ``alwaysinline`` LLVM functions that LLVM inlines into the calling loop
(each public function typed and lowered as an intrinsic on the CPU: a call of the
implementation, no function compiled of its own) before it vectorizes the loop.
They add 15-20 ms of compile time per call site.

Kernel authors keep writing ``math.exp(x)``: on the ``cpu`` target the library compiles
:func:`with_vector_math` of the kernel, a copy whose ``math`` is :func:`namespace`.

Replaced functions
------------------
``exp``, ``exp2``, ``expm1``, ``log``, ``log1p``, ``pow`` and ``sqrt`` (``sqrt`` is
``llvm.sqrt``, as Numba's own, which already vectorizes). Everything else in the namespace *is*
``math``'s own object (``floor``, ``fabs``, ``copysign``, ``isnan``, ``sin``, ``tanh``,
``log2``, ``log10``, ``pi``, ``inf``, ...) and compiles exactly as before: LLVM instructions
where Numba has them, libm calls otherwise. ``math`` inside the ``@njit`` helpers a kernel
calls is replaced too, in copies of them (see :func:`with_vector_math`); ``numpy`` functions
called on scalars (``np.exp(x)``) and functions made with ``register_jitable`` or ``overload``
are not.

Each function has a float32 implementation that computes in float32 (16 lanes per AVX-512
register, 8 per AVX2 one; ``pow`` alone computes in float64 and rounds once) and a float64 one.
Integer and mixed arguments compute in float64, as ``math.*`` does in Numba. Results follow
NumPy: inf on overflow (from the same threshold), 0 or a subnormal on underflow, NaN outside
the domain, C99's special values for ``pow``. No function uses lookup tables.

Accuracy
--------
Maximum error against the correctly rounded result (mpmath at 256 bits), and the share of
results that are not the correctly rounded one, over 2**20 arguments per function and dtype
(2**22 for float64 ``pow``) spread over every binade of the domain, a quarter of them on the
overflow, underflow and subnormal edges; ``pow``'s exponents put ``x**y`` anywhere from the
subnormals to the overflow threshold, with bases near 1 among them. Special values are exact.
``VECMATH_SAMPLES=1048576 pytest tests/test_vecmath.py -k accuracy`` repeats the measurement:

=========  =================  =================
function   float32            float64
=========  =================  =================
exp        1 ULP (0.90 %)     1 ULP (0.43 %)
exp2       1 ULP (0.88 %)     1 ULP (0.43 %)
expm1      1 ULP (1.65 %)     1 ULP (1.40 %)
log        1 ULP (2.40 %)     1 ULP (1.99 %)
log1p      1 ULP (1.63 %)     1 ULP (1.38 %)
pow        1 ULP (< 0.01 %)   1 ULP (0.19 %)
sqrt       0 ULP              0 ULP
=========  =================  =================

``exp`` uses Cody-Waite reduction with a compensated last step; ``log``, ``log1p`` and
``expm1`` are fdlibm's algorithms (musl's reductions) with every branch computed and the right
one selected. The float64 ``pow`` is ``exp(y * log(x))`` in double-double arithmetic (fused
multiply-adds): the logarithm, after a second table-free reduction by ``2**(j/3)``, within
2**-68, the product, and the exponential's reduced argument and ``r**2 / 2``. The float32
``pow`` is a shorter float64 ``exp(y * log(x))`` rounded once.

Cost
----
``python benchmarks/bench_vecmath.py`` times an ``@njit`` loop ``out[i] = f(x[i])`` over 10**6
contiguous elements on one core, against the same loop calling ``math.f`` (libm) and NumPy's
ufunc with ``out=``, and saves the table with the machine in ``benchmarks/results/vecmath.txt``.
The loop asks for 512-bit vectors as the cpu target's loops do (``loops.wide_vectors``: LLVM's
tuning for AVX-512 Xeons otherwise keeps to 256 bits). The functions are several times faster
than libm in a loop; where NumPy has AVX-512 code of its own (float64 ``exp``, ``log``, ``pow``)
it can stay ahead on one core (the table says where). With AVX-512, ``exp``, ``exp2`` and
float64 ``pow`` scale their result by ``2**k`` with one ``vscalef`` per vector (a vector
``llvm.ldexp``) instead of two exponent-field products; without it LLVM would call libm's
``ldexp`` per element, so the products stay. Both round once: the same bits.

Notes
-----
A caller compiled with ``fastmath=True`` gets the same results: the functions' instructions
live outside its module and carry no fast-math flags. Without FMA hardware
(``NUMBA_CPU_NAME=generic``) the float64 ``pow`` and ``exp2`` call libm's ``fma`` per lane:
still correct, much slower.
"""

from __future__ import annotations

import functools
import math
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, SupportsFloat

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils
from numba.core import types as nbtypes
from numba.core.registry import CPUDispatcher

from ...scalar import cpu_intrinsic
from ...spec import kernel_spec
from ..compose import Copies, rebind
from ..numpy_complex import numpy_arithmetic
from ..numpy_complex import swapped as numpy_cmath

__all__ = ["exp", "exp2", "expm1", "isfinite", "log", "log1p", "namespace", "pow", "sqrt", "with_vector_math"]

_REPLACED = ("exp", "exp2", "expm1", "log", "log1p", "pow", "sqrt")
#: What :func:`namespace` swaps: the replaced functions, and ``isfinite`` (see it).
_SWAPPED = (*_REPLACED, "isfinite")

# --------------------------------------------------------------------------------------------
# The implementations are written as LLVM IR (see "Numba glue" below for how they reach the
# caller): that costs Numba no typing or IR-inlining passes (15-20 ms per call site; Numba-level
# code inlined with inline="always" took 0.5 to 4 s, pow the most), and every choice is an
# explicit ``select``. ``_V`` lets them read as ordinary arithmetic: each operator emits one
# instruction, a Python number becomes a constant of the operand's type (rounded to float32 in
# float32 code).
# --------------------------------------------------------------------------------------------


class _V:
    """A float LLVM value whose Python operators emit instructions."""

    __slots__ = ("b", "v")
    __hash__ = None  # comparisons return IR values, not bools

    def __init__(self, b: ir.IRBuilder, v: ir.Value) -> None:
        self.b, self.v = b, v

    def _ir(self, other: _V | float) -> ir.Value:
        return other.v if isinstance(other, _V) else ir.Constant(self.v.type, float(other))

    def _new(self, v: ir.Value) -> _V:
        return _V(self.b, v)

    def __add__(self, o: _V | float) -> _V:
        return self._new(self.b.fadd(self.v, self._ir(o)))

    def __radd__(self, o: float) -> _V:
        return self._new(self.b.fadd(self._ir(o), self.v))

    def __sub__(self, o: _V | float) -> _V:
        return self._new(self.b.fsub(self.v, self._ir(o)))

    def __rsub__(self, o: float) -> _V:
        return self._new(self.b.fsub(self._ir(o), self.v))

    def __mul__(self, o: _V | float) -> _V:
        return self._new(self.b.fmul(self.v, self._ir(o)))

    def __rmul__(self, o: float) -> _V:
        return self._new(self.b.fmul(self._ir(o), self.v))

    def __truediv__(self, o: _V | float) -> _V:  # no ZeroDivisionError branch, unlike Numba's
        return self._new(self.b.fdiv(self.v, self._ir(o)))

    def __neg__(self) -> _V:
        return self._new(self.b.fneg(self.v))

    # Comparisons are false with a NaN operand, except !=, as in Python.
    def __lt__(self, o: _V | float) -> _B:
        return _B(self.b, self.b.fcmp_ordered("<", self.v, self._ir(o)))

    def __le__(self, o: _V | float) -> _B:
        return _B(self.b, self.b.fcmp_ordered("<=", self.v, self._ir(o)))

    def __gt__(self, o: _V | float) -> _B:
        return _B(self.b, self.b.fcmp_ordered(">", self.v, self._ir(o)))

    def __ge__(self, o: _V | float) -> _B:
        return _B(self.b, self.b.fcmp_ordered(">=", self.v, self._ir(o)))

    def __eq__(self, o: _V | float) -> _B:  # type: ignore[override]
        return _B(self.b, self.b.fcmp_ordered("==", self.v, self._ir(o)))

    def __ne__(self, o: _V | float) -> _B:  # type: ignore[override]
        return _B(self.b, self.b.fcmp_unordered("!=", self.v, self._ir(o)))

    def call(self, name: str, *others: _V | float) -> _V:
        """``llvm.<name>`` on this value and ``others`` (all of this value's type)."""
        fty = self.v.type
        fnty = ir.FunctionType(fty, [fty] * (1 + len(others)))
        fn = self.b.module.declare_intrinsic(f"llvm.{name}", [fty], fnty)
        return self._new(self.b.call(fn, [self.v, *(self._ir(o) for o in others)]))


class _B:
    """An i1 LLVM value with ``&``, ``|`` and ``~``."""

    __slots__ = ("b", "v")

    def __init__(self, b: ir.IRBuilder, v: ir.Value) -> None:
        self.b, self.v = b, v

    def __and__(self, o: _B) -> _B:
        return _B(self.b, self.b.and_(self.v, o.v))

    def __or__(self, o: _B) -> _B:
        return _B(self.b, self.b.or_(self.v, o.v))

    def __xor__(self, o: _B) -> _B:
        return _B(self.b, self.b.xor(self.v, o.v))

    def __invert__(self) -> _B:
        return _B(self.b, self.b.not_(self.v))


def _where(cond: _B, a: _V | float, b: _V | float) -> _V:
    """``a if cond else b`` as a ``select`` (both sides are computed: no branch in the loop)."""
    like = a if isinstance(a, _V) else b
    if not isinstance(like, _V):
        raise TypeError("_where needs an IR value on one side to know the float type")
    return like._new(cond.b.select(cond.v, like._ir(a), like._ir(b)))


def _const(like: _V, value: float) -> _V:
    """``value`` as a constant of ``like``'s float type."""
    return like._new(like._ir(value))


def _fma(a: _V, b: _V | float, c: _V | float) -> _V:
    """``a * b + c`` rounded once: the exact error terms of double-double products."""
    return a.call("fma", b, c)


def _poly(x: _V, coeffs: Sequence[float]) -> _V:
    """``c[0] + x*(c[1] + x*(...))`` by Horner's rule; ``llvm.fmuladd`` fuses where it is fast."""
    acc = x._new(x._ir(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        acc = acc.call("fmuladd", x, c)
    return acc


# --------------------------------------------------------------------------------------------
# Constants per dtype. Polynomial coefficients run from the constant term up.
# --------------------------------------------------------------------------------------------

_LN2 = 0.6931471805599453
_LN2_TAIL = 2.319046813846299558e-17  # ln 2 - _LN2


@dataclass(frozen=True)
class _Format:
    bits: int
    mant: int  # explicit mantissa bits
    # Cody-Waite split of ln 2: k * ln2_hi is exact for every exponent k these functions see.
    ln2_hi: float
    ln2_lo: float
    # (exp(r) - 1 - r) / r**2 on |r| <= 1.002 * ln2 / 2 (mpmath Chebyshev fits: r**2 times the
    # fit is within 2**-61.7 (float64) and 2**-26.9 (float32) of expm1(r) - r).
    exp_poly: tuple[float, ...]
    exp_range: tuple[float, float]  # exp's argument clamp: inf or 0 beyond, 2**k stays normal
    # fdlibm's log polynomial in s = f / (2 + f), the odd and even powers of s**2 apart.
    lg_odd: tuple[float, ...]
    lg_even: tuple[float, ...]
    # fdlibm's expm1 rational approximation (in r*r/2), its argument clamp (-1 rounded below)
    # and the k below which 1 - 2**-k is formed directly.
    expm1_q: tuple[float, ...]
    expm1_range: tuple[float, float]
    expm1_k_mid: float
    # Scale results by 2**k with llvm.ldexp: one AVX-512 vscalef per vector, where the target
    # has it (elsewhere LLVM turns a vector ldexp into a libm call per element).
    ldexp: bool = False

    @property
    def bias(self) -> int:
        return (1 << (self.bits - self.mant - 2)) - 1

    @property
    def shift(self) -> float:  # x + shift - shift rounds |x| < 2**(mant-1) to an integer
        return 1.5 * 2.0**self.mant

    @property
    def tiny(self) -> float:  # smallest normal number
        return 2.0 ** (2 - 2 ** (self.bits - self.mant - 2))

    @property
    def itype(self) -> ir.IntType:
        return ir.IntType(self.bits)

    def bits_of(self, value: float) -> int:
        """The IEEE bit pattern of ``value`` rounded to this format."""
        n = self.bits // 8
        return int(np.array(value, dtype=f"f{n}").view(f"i{n}"))


_F32 = _Format(
    bits=32, mant=23, ln2_hi=0.693145751953125, ln2_lo=1.428606765330187e-06,
    exp_poly=(0.5, 0.16666576266288757, 0.04166655242443085, 0.008363292552530766,
              0.0013926326064392924),
    exp_range=(-104.0, 89.0),
    lg_odd=(0.6666666269302368, 0.2849878668785095),
    lg_even=(0.40000972151756287, 0.24279078841209412),
    expm1_q=(1.0, -0.03333321213722229, 0.0015807170420885086),
    expm1_range=(-20.0, 89.0), expm1_k_mid=23.0,
)
_F64 = _Format(
    bits=64, mant=52, ln2_hi=6.93147180369123816490e-01, ln2_lo=1.90821492927058770002e-10,
    exp_poly=(0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333326025,
              0.001388888888888367, 0.00019841269875205077, 2.4801587325822283e-05,
              2.75572549134867e-06, 2.7557273295539724e-07, 2.5105419192016337e-08,
              2.091483135138041e-09),
    exp_range=(-746.0, 710.0),
    lg_odd=(6.666666666666735130e-01, 2.857142874366239149e-01, 1.818357216161805012e-01,
            1.479819860511658591e-01),
    lg_even=(3.999999999940941908e-01, 2.222219843214978396e-01, 1.531383769920937332e-01),
    expm1_q=(1.0, -3.33333333333331316428e-02, 1.58730158725481460165e-03,
             -7.93650757867487942473e-05, 4.00821782732936239552e-06,
             -2.01099218183624371326e-07),
    expm1_range=(-45.0, 710.0), expm1_k_mid=20.0,
)
_FORMATS = {32: _F32, 64: _F64}

# float64 pow's logarithm: m is reduced further to m * 2**(-j/3) in [2**(-1/6), 2**(1/6));
# the rounded factors 2**(-j/3), the error eps_j = log(factor) + j ln2/3 they leave, ln2/3 split
# so that K * hi is exact for |K| < 2**12, and (2 atanh(s) - 2s - 2s**3/3) / s**5 in z = s**2
# for |s| <= 0.0579 (what the fit leaves is below 2**-70 of log(m)).
_CBRT2_SPLIT = (0.8908987181403393, 1.122462048309373)  # 2**(-1/6), 2**(1/6)
_CBRT2_FACTOR = {1: 0.7937005259840998, -1: 1.2599210498948732}
_CBRT2_EPS = {1: 6.84704610767485e-17, -1: 2.055631482239787e-17}
_LN2_3 = (0.23104906018647853, 1.6990886035784928e-13)
_ATANH_TAIL = (0.40000000000000013, 0.2857142857126487, 0.2222222261391924, 0.18181490273623585,
               0.15496564863700724)
_TWO_THIRDS = (0.6666666666666666, 3.700743415417188e-17)  # double-double 2/3
# float32 pow, in float64: (2 atanh(s) - 2s) / s**3 in z = s**2 (within 2**-43 of log(m)), and
# (exp(r) - 1 - r) / r**2 (r**2 times it within 2**-38 of expm1(r) - r).
_POW32_LOG = (0.666666666673823, 0.3999999878752578, 0.28571756537234566, 0.2219127389362563,
              0.1936511759489153)
_POW32_EXP = (0.5, 0.1666666671962903, 0.041666666719612104, 0.008333298203871147,
              0.0013888853769855418, 0.00019899506525511751, 2.485981068352248e-05)


# --------------------------------------------------------------------------------------------
# Exponent bits, handled on the float's own integer width (Numba would widen int32 to int64
# and halve the float32 lanes) and without int<->float conversions (AVX2 has none for 64 bits).
# --------------------------------------------------------------------------------------------


def _pow2(F: _Format, k: _V) -> _V:
    """``2.0**k`` for an integer-valued ``k`` in the normal exponent range."""
    b, ity = k.b, F.itype
    # Adding 1.5 * 2**mant leaves k in the low mantissa bits (two's complement); the bias moves
    # it into the exponent field and the shift drops everything above.
    bits = b.bitcast((k + F.shift).v, ity)
    bits = b.shl(b.add(bits, ir.Constant(ity, F.bias)), ir.Constant(ity, F.mant))
    return k._new(b.bitcast(bits, k.v.type))


def _scale(F: _Format, y: _V, kf: _V) -> _V:
    """``y * 2.0**kf``, rounded once, for an integer-valued ``|kf| <= 1100`` and ``y`` near 1:
    inf beyond the largest value, a subnormal or 0 below the smallest normal one."""
    if F.ldexp:
        b, i32 = y.b, ir.IntType(32)
        name = f"llvm.ldexp.f{F.bits}.i32"
        ldexp = b.module.globals.get(name) or ir.Function(
            b.module, ir.FunctionType(y.v.type, [y.v.type, i32]), name=name)
        return y._new(b.call(ldexp, [y.v, b.fptosi(kf.v, i32)]))
    # 2**kf in two halves, each a normal number (kf reaches 1024 and -1075): the first
    # product is exact, the second rounds.
    k1 = _round(F, kf * 0.5)
    return (y * _pow2(F, k1)) * _pow2(F, kf - k1)


def _split(F: _Format, x: _V) -> tuple[_V, _V]:
    """``(k, m)`` with ``x == m * 2**k`` and ``m`` in ``[sqrt(1/2), sqrt(2))``, for normal ``x > 0``.

    Other inputs give finite garbage, which the callers replace by their special values.
    """
    b, ity = x.b, F.itype
    sqrt_half = F.bits_of(math.sqrt(0.5))
    # Offsetting by 1.0 - sqrt(1/2) carries into the exponent exactly when the mantissa is at
    # least sqrt(2) (musl's log reduction, done on the whole word).
    t = b.add(b.bitcast(x.v, ity), ir.Constant(ity, (F.bias << F.mant) - sqrt_half))
    # k = exponent field - bias, made a float by the inverse of _pow2's shift.
    k = b.add(b.ashr(t, ir.Constant(ity, F.mant)), ir.Constant(ity, F.bits_of(F.shift) - F.bias))
    m = b.add(b.and_(t, ir.Constant(ity, (1 << F.mant) - 1)), ir.Constant(ity, sqrt_half))
    return x._new(b.bitcast(k, x.v.type)) - F.shift, x._new(b.bitcast(m, x.v.type))


def _round(F: _Format, x: _V) -> _V:
    """``x`` rounded to the nearest integer (ties to even), for ``|x| < 2**(mant - 1)``."""
    return (x + F.shift) - F.shift


# --------------------------------------------------------------------------------------------
# The functions, generic over the format. Every branch is computed and the right one selected.
# --------------------------------------------------------------------------------------------


def _exp_core(F: _Format, zh: _V, zl: _V | None = None, precise: bool = False) -> _V:
    """``exp(zh + zl)`` for a correction ``|zl| <~ ulp(zh)``.

    ``precise`` (for pow) adds ``r**2 / 2`` exactly, which leaves the result within 0.53 ULP
    instead of 0.7 before the large ``y * log(x)`` errors are counted.
    """
    z = _where(zh > F.exp_range[1], F.exp_range[1], zh)
    z = _where(z < F.exp_range[0], F.exp_range[0], z)  # NaN passes both and propagates
    # One fused multiply-add each where the CPU has FMA: k = round(z / ln2) (a near-tie may go
    # the other way, which the polynomial's range allows) and the exact hi = z - k ln2_hi.
    kf = z.call("fmuladd", 1 / _LN2, F.shift) - F.shift
    hi = kf.call("fmuladd", -F.ln2_hi, z)
    lo = kf * F.ln2_lo if zl is None else kf * F.ln2_lo - zl
    r = hi - lo
    rc = (hi - r) - lo  # r + rc == hi - lo to far below an ulp
    h = 1.0 + r
    t = (1.0 - h) + r  # h + t == 1 + r exactly
    # exp(r + rc) = h + t + (expm1(r) - r) + rc * exp(r), rounded once at the end
    if precise:
        sq = r * r
        g = h + 0.5 * sq  # g + gl == h + r**2 / 2 exactly
        gl = (h - g) + 0.5 * sq
        rest = 0.5 * _fma(r, r, -sq) + (r * sq * _poly(r, F.exp_poly[1:]) + rc * h)
        y = g + (gl + (t + rest))
    else:
        y = h + (t + (r * r * _poly(r, F.exp_poly) + rc * h))
    return _scale(F, y, kf)  # kf reaches 1024 (overflow to inf) and -1075 (subnormal results)


def _exp(F: _Format, x: _V) -> _V:
    return _exp_core(F, x)


def _exp2(F: _Format, x: _V) -> _V:
    # clamped so that the fma stays finite; beyond, the result is inf or 0 anyway
    x = _where(x > 1.5 * F.exp_range[1], 1.5 * F.exp_range[1], x)
    x = _where(x < 1.5 * F.exp_range[0], 1.5 * F.exp_range[0], x)
    ln2 = float(np.float32(_LN2)) if F.bits == 32 else _LN2
    zh = x * ln2
    return _exp_core(F, zh, _fma(x, ln2, -zh) + x * (_LN2 - ln2 + _LN2_TAIL))


def _log_kernel(F: _Format, f: _V, k: _V, c: _V | None = None) -> _V:
    """``k ln2 + log1p(f) + c`` for ``1 + f`` in ``[sqrt(1/2), sqrt(2))`` (fdlibm's scheme)."""
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * _poly(w, F.lg_odd) + w * _poly(w, F.lg_even)
    k_lo = k * F.ln2_lo if c is None else k * F.ln2_lo + c
    return s * (hfsq + r) + k_lo - hfsq + f + k * F.ln2_hi


def _log(F: _Format, x: _V) -> _V:
    sub = x < F.tiny
    k, m = _split(F, _where(sub, x * 2.0 ** (F.mant + 2), x))  # subnormals scaled up first
    y = _log_kernel(F, m - 1.0, _where(sub, k - (F.mant + 2), k))
    y = _where(x == 0.0, -math.inf, y)
    y = _where(x < 0.0, math.nan, y)
    return _where(x < math.inf, y, x)  # inf stays inf, NaN stays NaN


def _log1p(F: _Format, x: _V) -> _V:
    u = 1.0 + x
    k, m = _split(F, u)
    # musl's correction for the rounding of 1 + x: log(1 + x) ~ log(u) + c
    c = _where(k >= 2.0, 1.0 - (u - x), x - (u - 1.0))
    c = _where(k < F.mant + 2, c / u, 0.0)
    # for -0.2928932 <= x < 0.4142135, 1 + x needs no reduction and x is exact
    near = (x >= -0.292893230915069580078125) & (x < 0.41421353816986084)
    y = _log_kernel(F, _where(near, x, m - 1.0), _where(near, 0.0, k), _where(near, 0.0, c))
    y = _where(x.call("fabs") < 2.0 ** -(F.mant + 1), x, y)  # log1p(x) rounds to x; keeps -0
    y = _where(x == -1.0, -math.inf, y)
    y = _where(x < -1.0, math.nan, y)
    return _where(x < math.inf, y, x)


def _expm1(F: _Format, x: _V) -> _V:
    """fdlibm's expm1 with all its argument ranges computed and the right one selected."""
    lo_lim, hi_lim = F.expm1_range
    x = _where(x > hi_lim, hi_lim, x)
    x = _where(x < lo_lim, lo_lim, x)  # expm1 rounds to -1 below, overflows above
    kf = _round(F, x * (1 / _LN2))
    hi = x - kf * F.ln2_hi
    lo = kf * F.ln2_lo
    r = hi - lo
    c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = _poly(hxs, F.expm1_q)
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    y0 = r - (r * e - hxs)  # k == 0
    e = (r * (e - c) - c) - hxs
    k1 = _round(F, kf * 0.5)
    s1, s2 = _pow2(F, k1), _pow2(F, kf - k1)
    big = ((1.0 - (e - r)) * s1) * s2 - 1.0  # k <= -2 or k > 56
    tk = _pow2(F, -kf)
    mid = _where(kf < F.expm1_k_mid, (1.0 - tk) - (e - r), (r - (e + tk)) + 1.0)
    y = _where((kf >= 2.0) & (kf <= 56.0), (mid * s1) * s2, big)
    y = _where(kf == 1.0, _where(r < -0.25, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e)), y)
    y = _where(kf == -1.0, 0.5 * (r - e) - 0.5, y)
    return _where(kf == 0.0, y0, y)


def _pow_core64(x: _V, y: _V) -> _V:
    """``x ** y`` for finite ``x > 0`` and finite ``y``: double-double log, product and exp.

    ``y * log(x)`` reaches 745, so the logarithm needs a relative error near 2**-68 for the
    result to stay within 1 ULP.
    """
    F = _F64
    sub = x < F.tiny
    # subnormals scaled up first, the others by a 1 that LLVM cannot fold (x is finite here:
    # a product with the scale computed for every element overflows for the largest ones)
    k, m = _split(F, x * _where(sub, 2.0**54, _one_like(x)))
    k = _where(sub, k - 54.0, k)
    # m' = m * 2**(-j/3) = p + e (exact, by the fma) in [2**(-1/6), 2**(1/6)): |s| <= 0.058
    up, down = m > _CBRT2_SPLIT[1], m < _CBRT2_SPLIT[0]
    zero = _const(m, 0.0)
    j = _where(up, 1.0, _where(down, -1.0, zero))
    c = _where(up, _CBRT2_FACTOR[1], _where(down, _CBRT2_FACTOR[-1], _const(m, 1.0)))
    p = m * c
    e = _fma(m, c, -p)
    # s = (m' - 1) / (m' + 1) as sh + sl; log(m') = 2 atanh(s)
    f = p - 1.0  # exact
    d = 1.0 + p
    dl = (p - (d - 1.0)) + e  # d + dl == m' + 1
    sh = (f + e) / d
    sl = ((_fma(-sh, d, f) + e) - sh * dl) / d
    zh = sh * sh
    ch = zh * sh  # sh**3 == ch + cl
    cl = _fma(zh, sh, -ch) + _fma(sh, sh, -zh) * sh
    th = ch * _TWO_THIRDS[0]  # 2/3 sh**3 == th + tl
    tl = _fma(ch, _TWO_THIRDS[0], -th) + (cl * _TWO_THIRDS[0] + ch * _TWO_THIRDS[1])
    small = tl + (2.0 * sl + 2.0 * zh * sl) + ch * zh * _poly(zh, _ATANH_TAIL)
    lh = 2.0 * sh + th
    ll = ((2.0 * sh - lh) + th) + small
    # log(x) = K ln2/3 + log(m') - eps_j, K = 3k + j; K * hi is exact and |K * hi| >= |lh|
    kk = 3.0 * k + j
    a = kk * _LN2_3[0]
    eps = _where(up, _CBRT2_EPS[1], _where(down, _CBRT2_EPS[-1], zero))
    log_h = a + lh
    log_l = ((a - log_h) + lh) + (ll + (kk * _LN2_3[1] - eps))
    # y * log(x) as zh + zl
    zh = y * log_h
    zl = _fma(y, log_h, -zh) + y * log_l
    zl = _where(zh.call("fabs") < 1e4, zl, 0.0)  # NaN beside an infinite zh
    return _exp_core(F, zh, zl, precise=True)


def _pow_core32(x: _V, y: _V) -> _V:
    """``x ** y`` for float32 ``x > 0`` and ``y`` (finite) in float64, rounded once to float32.

    Lean float64 log and exp (relative error about 2**-36: ample for one rounding to float32,
    and a third of the work of the float64 functions).
    """
    b, F = x.b, _F64
    x64, y64 = x._new(b.fpext(x.v, ir.DoubleType())), y._new(b.fpext(y.v, ir.DoubleType()))
    k, m = _split(F, x64)  # every positive float32 is a normal float64
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    t = y64 * (k * _LN2 + (2.0 * s + s * z * _poly(z, _POW32_LOG)))
    t = _where(t > 100.0, 100.0, t)  # float32 results are inf or 0 beyond; 2**kf stays normal
    t = _where(t < -110.0, -110.0, t)
    kf = _round(F, t * (1 / _LN2))
    r = t - kf * _LN2
    p = 1.0 + (r + r * r * _poly(r, _POW32_EXP))
    return x._new(b.fptrunc((p * _pow2(F, kf)).v, x.v.type))


def _pow(F: _Format, x: _V, y: _V, core_args: tuple[_V, _V] | None = None) -> _V:
    """C99 (and NumPy) ``pow``: special operands selected around the finite core (computed on
    ``core_args``, ``(|x|, y)`` by default)."""
    ax = x.call("fabs")
    mag = (_pow_core32 if F.bits == 32 else _pow_core64)(*(core_args or (ax, y)))
    inf = _const(x, math.inf)
    special = (ax == 0.0) | (ax == inf)
    mag = _where(special, _where((y > 0.0) ^ (ax == inf), 0.0, inf), mag)  # 0 or inf
    y_int = y.call("trunc") == y  # true for +-inf as well; that case is replaced below
    half = y * 0.5
    y_odd = y_int & (half.call("trunc") != half)
    mag = _where((x < 0.0) & ~y_int & ~special, math.nan, mag)
    res = _where(y_odd, mag.call("copysign", x), mag)  # negative bases, -0 and -inf
    y_inf = _where(ax == 1.0, 1.0, _where((ax > 1.0) ^ (y > 0.0), 0.0, inf))
    res = _where(y.call("fabs") == inf, y_inf, res)
    res = _where((x != x) | (y != y), _where(x != x, x, y), res)  # the NaN, without arithmetic
    return _where((y == 0.0) | (x == 1.0), 1.0, res)


def _sqrt(F: _Format, x: _V) -> _V:
    return x.call("sqrt")  # correctly rounded, vectorizes


# --------------------------------------------------------------------------------------------
# Floating-point flags. The cpu loops report the flags the hardware raised (see cpu.fpflags), so
# these functions raise what NumPy's do for the same arguments, and nothing else: NaN and
# infinite arguments, and those outside the domain, never reach the computations above (they
# get an ordinary stand-in, chosen by integer tests of the bits, which raise nothing) and their
# results are selected after; where NumPy raises divide or invalid, a division that raises it
# on exactly those elements (1 / 0, 0 / 0) makes the result.
# Overflow and underflow come from the final scaling, as before.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Class:
    """Integer tests of a float's bits (they raise no flag, NaN or not)."""

    nan: _B
    inf: _B  # +-inf
    neg: _B  # sign bit set (-0.0 and negative NaNs too)
    zero: _B  # +-0.0
    below_one: _B  # |x| < 1 (finite)


def _classify(F: _Format, x: _V) -> _Class:
    b, ity = x.b, F.itype
    bits = b.bitcast(x.v, ity)
    mag = b.and_(bits, ir.Constant(ity, (1 << (F.bits - 1)) - 1))
    inf_bits = ir.Constant(ity, F.bits_of(math.inf))
    return _Class(nan=_B(b, b.icmp_unsigned(">", mag, inf_bits)),
                  inf=_B(b, b.icmp_unsigned("==", mag, inf_bits)),
                  neg=_B(b, b.icmp_signed("<", bits, ir.Constant(ity, 0))),
                  zero=_B(b, b.icmp_unsigned("==", mag, ir.Constant(ity, 0))),
                  below_one=_B(b, b.icmp_unsigned("<", mag, ir.Constant(ity, F.bits_of(1.0)))))


def _one_like(safe: _V) -> _V:
    """1.0, computed from the finite ``safe`` (``safe * 0 + 1`` is exactly 1 and raises nothing),
    so that LLVM cannot fold the operations that raise flags on purpose into constants."""
    return safe * 0.0 + 1.0


def _raise(safe: _V, pole: _V, divide: _B, invalid: _B) -> _V:
    """One division that raises divide-by-zero on the elements ``divide`` (where ``pole`` is
    zero: the result is +-inf there) and invalid on the elements ``invalid`` (0 / 0: NaN), and
    gives 1 elsewhere. ``safe`` is finite on every element. (One division for both: with a
    division and a square root LLVM stopped vectorizing ``log``'s loop.)"""
    one = _one_like(safe)
    zero = safe - safe  # exactly 0 for a finite value
    num = _where(invalid, zero, one)
    return num / _where(divide, pole, num)


def _tiny(F: _Format, x: _V, c: _Class) -> _B:
    """Subnormal ``x`` (from the bits): arguments whose intermediate steps would underflow."""
    b = x.b
    mag = b.and_(b.bitcast(x.v, F.itype), ir.Constant(F.itype, (1 << (F.bits - 1)) - 1))
    return _B(b, b.icmp_unsigned("<", mag, ir.Constant(F.itype, F.bits_of(F.tiny)))) & ~c.zero


def _flagged_log1p(F: _Format, x: _V) -> _V:
    """log1p: -inf and divide-by-zero at -1, NaN and invalid below, NaN and +inf as they are."""
    c = _classify(F, x)
    b = x.b
    minus_one = _B(b, b.icmp_unsigned("==", b.bitcast(x.v, F.itype), ir.Constant(F.itype, F.bits_of(-1.0))))
    below = c.neg & ~c.below_one & ~minus_one & ~c.nan
    tiny = _tiny(F, x, c)  # log1p(x) is x, without the underflow of the steps
    special = c.nan | c.inf | minus_one | below | tiny
    safe = _where(special, 0.0, x)
    y = _log1p(F, safe)
    flagged = _raise(safe, x + 1.0, minus_one, below)
    y = _where(minus_one, -flagged.call("fabs"), _where(below, flagged, y))
    return _where(c.nan | (c.inf & ~c.neg) | tiny, x, y)


def _flagged_pow(F: _Format, x: _V, y: _V) -> _V:
    """pow: the finite core computes on ordinary stand-ins for special operands (their results
    are selected by :func:`_pow`, as before); divide-by-zero for ``0 ** negative`` and invalid
    for a finite negative base and a finite non-integer exponent, as NumPy raises them."""
    cx, cy = _classify(F, x), _classify(F, y)
    stand_in = cx.nan | cx.inf | cx.zero | cy.nan | cy.inf
    xs, ys = _where(stand_in, 1.0, x), _where(stand_in, 1.0, y)
    res = _pow(F, x, y, core_args=(xs.call("fabs"), ys))
    y_frac = ys.call("trunc") != ys  # a stand-in 1.0 where y is special
    pole = cx.zero & cy.neg & ~cy.zero & ~cy.nan
    domain = cx.neg & ~cx.zero & ~cx.nan & ~cx.inf & ~cy.nan & ~cy.inf & y_frac
    flagged = _raise(xs, x, pole, domain)
    return _where(pole, flagged.call("copysign", res), _where(domain, flagged, res))


# --------------------------------------------------------------------------------------------
# Numba glue. Each function is compiled once per process and float width into a small library
# of ``alwaysinline`` LLVM functions; a call site links that library in and calls the function,
# and LLVM inlines it into the loop before vectorizing. Kept out of the caller's module, the
# code is also out of reach of Numba's fastmath rewrite, which would flag every instruction
# ``fast`` and let LLVM fold away the rounding steps (exp(1.0) became 4.0).
# --------------------------------------------------------------------------------------------

_EMITTERS: dict[str, Callable[..., _V]] = {
    "exp": _exp, "exp2": _exp2, "expm1": _expm1, "log": _log, "log1p": _log1p, "pow": _pow,
    "sqrt": _sqrt,
}
#: What a call site runs: the emitters with NumPy's floating-point flags (see _classify).
#: exp, exp2 and expm1 raise overflow for +inf and underflow for -inf from their final scaling,
#: which the cpu loops drop afterwards (cpu.fpflags.refine); the selects that would avoid it
#: cost exp 20% of its time.
_FLAGGED: dict[str, Callable[..., _V]] = {
    "exp": _exp, "exp2": _exp2, "expm1": _expm1,
    # log's and float32 pow's loops stop vectorizing with the flags' selects and division
    # (LLVM 20's cost model): they keep the plain selects, and give -inf and NaN without
    # raising divide or invalid (docs/semantics.md).
    "log": _log, "log1p": _flagged_log1p, "sqrt": _sqrt,
    "pow": lambda F, x, y: (_flagged_pow if F.bits == 64 else _pow)(F, x, y),
}
_LIBRARIES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _library(codegen: Any, symbol: str, name: str, bits: int, fnty: ir.FunctionType) -> Any:
    """The library defining ``symbol``, ``name``'s implementation, built once per codegen."""
    libraries = _LIBRARIES.setdefault(codegen, {})
    if symbol not in libraries:  # Numba's compiler lock serializes code generation
        library = codegen.create_library(symbol)
        module = library.create_ir_module(symbol)
        fn = ir.Function(module, fnty, name=symbol)
        fn.attributes.add("alwaysinline")
        body = ir.IRBuilder(fn.append_basic_block())
        F = replace(_FORMATS[bits], ldexp=has_avx512(codegen))
        body.ret(_FLAGGED[name](F, *(_V(body, a) for a in fn.args)).v)
        library.add_ir_module(module)
        library.finalize()
        libraries[symbol] = library
    return libraries[symbol]


def has_avx512(codegen: Any) -> bool:
    """Whether a Numba CPU codegen compiles for x86 with AVX-512 (where ``llvm.ldexp`` is
    ``vscalef``).

    Parameters
    ----------
    codegen : numba.core.codegen.CPUCodegen
        The codegen of Numba's CPU target (``target_context.codegen()``).

    Returns
    -------
    bool
        From the CPU features Numba compiles for, which Numba's and gpufuncs' disk caches key
        their entries by: code built with AVX-512 is never loaded on a machine without it.
    """
    try:
        triple, _, features = codegen.magic_tuple()
    except AttributeError:  # pragma: no cover - a codegen without Numba's cache key
        return False
    return triple.startswith("x86_64") and "+avx512f" in features.split(",")


def _function(context: Any, builder: ir.IRBuilder, name: str, fty: ir.Type, nargs: int) -> ir.Function:
    """Declare ``name``'s implementation for ``fty`` in the caller, and link its library."""
    bits = 32 if isinstance(fty, ir.FloatType) else 64
    symbol = f"gpufuncs_vecmath_{name}_f{bits}"
    fnty = ir.FunctionType(fty, [fty] * nargs)
    library = _library(context.codegen(), symbol, name, bits, fnty)
    context.active_code_library.add_linking_library(library)
    return cgutils.get_or_insert_function(builder.module, fnty, symbol)


# --------------------------------------------------------------------------------------------
# Public functions: NumPy's scalar semantics from Python, intrinsics in Numba's CPU code.
# --------------------------------------------------------------------------------------------


def _operand(x: SupportsFloat) -> np.floating:
    return x if isinstance(x, np.floating) else np.float64(x)


def _call_numpy(ufunc: np.ufunc, *args: SupportsFloat) -> np.floating:
    with np.errstate(all="ignore"):  # inf and NaN results, as NumPy's scalars give, no warnings
        return ufunc(*(_operand(a) for a in args))


def _public(name: str, ufunc: np.ufunc, summary: str) -> Callable[..., np.floating]:
    """The public function ``name``: NumPy's ``ufunc`` on scalars from Python (the intrinsic
    registered below replaces it in CPU code)."""
    binary = name == "pow"

    def function(*args: SupportsFloat) -> np.floating:
        if len(args) != 1 + binary:
            raise TypeError(f"{name}() takes {1 + binary} argument(s), got {len(args)}")
        return _call_numpy(ufunc, *args)

    arguments = "x, y : float\n        Base and exponent" if binary else "x : float\n        The argument"
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"""{summary}

    Parameters
    ----------
    {arguments}; an integer counts as float64.

    Returns
    -------
    numpy.floating
        From Python, ``np.{ufunc.__name__}``'s result (float32 for float32 arguments, else
        float64) without warnings; in Numba-compiled code, the vectorizable implementation.
    """
    return function


exp = _public("exp", np.exp, "Exponential ``e**x``; inf on overflow, 0 or a subnormal on underflow.")
exp2 = _public("exp2", np.exp2, "``2**x``; inf on overflow, 0 or a subnormal on underflow.")
expm1 = _public("expm1", np.expm1, "``exp(x) - 1``, accurate near 0; inf on overflow, -1 for very "
                "negative ``x``.")
log = _public("log", np.log, "Natural logarithm; -inf at 0 and NaN for negative ``x`` (no exception).")
log1p = _public("log1p", np.log1p, "``log(1 + x)``, accurate near 0; -inf at -1 and NaN below "
                "(no exception).")
pow = _public("pow", np.power, "``x**y`` with C99's special values; NaN for a negative base and a "
              "non-integer exponent.")
sqrt = _public("sqrt", np.sqrt, "Square root, correctly rounded; NaN for negative ``x`` (no exception).")


def _float_args(tys: tuple[nbtypes.Type, ...]) -> str | None:
    """``"same"`` for float32 or float64 arguments of one type, ``"f64"`` for other numbers."""
    if all(t in (nbtypes.float32, nbtypes.float64) for t in tys) and len(set(tys)) == 1:
        return "same"
    if all(isinstance(t, (nbtypes.Float, nbtypes.Integer)) for t in tys):
        return "f64"  # integers and mixed types compute in float64, as math.* does in Numba
    return None


def _register(name: str) -> None:
    """Type and lower ``name`` in CPU code as an intrinsic (see :func:`~gpufuncs.scalar.cpu_intrinsic`):
    its call site is one call of the ``alwaysinline`` implementation (linking its library), on
    the arguments cast to float64 where they are not one of float32 or float64 (integers and
    mixed types, as ``math.*`` in Numba). An ``inline="always"`` overload did the same, but
    Numba compiled a library for it at every typing (per dtype, per compile options), kept for
    the life of the process."""
    nargs = 2 if name == "pow" else 1

    def codegen(context, builder, sig, args):
        fty = sig.return_type
        values = [context.cast(builder, v, t, fty) for v, t in zip(args, sig.args)]
        return builder.call(_function(context, builder, name, context.get_value_type(fty), nargs), values)

    def typed(tys: tuple[nbtypes.Type, ...]) -> Any:
        kind = _float_args(tys)
        if kind is None:
            return None
        return (tys[0] if kind == "same" else nbtypes.float64)(*tys), codegen

    def unary(typingctx, x):
        return typed((x,))

    def binary(typingctx, x, y):
        return typed((x, y))

    typer = unary if nargs == 1 else binary
    typer.__name__ = typer.__qualname__ = f"_{name}_ir"
    cpu_intrinsic(globals()[name])(typer)


for _name in _REPLACED:
    _register(_name)


# --------------------------------------------------------------------------------------------
# The namespace kernels see as ``math``, and the kernel copy that uses it.
# --------------------------------------------------------------------------------------------


@functools.cache
def namespace() -> types.ModuleType:
    """A module with every public attribute of ``math``, this module's functions swapped in.

    Returns
    -------
    types.ModuleType
        The same object on every call. Numba types attribute access on module objects, so
        ``math.exp(x)`` in a function whose global ``math`` is this module compiles to the
        vectorizable :func:`exp`; ``math.floor``, ``math.pi`` and the rest are ``math``'s own.
    """
    mod = types.ModuleType(f"{__name__}.math", "``math`` with vectorizable exp, log, pow, ...")
    for attr in dir(math):
        if not attr.startswith("_"):
            setattr(mod, attr, getattr(math, attr))
    for attr in _SWAPPED:
        setattr(mod, attr, globals()[attr])
    return mod


@njit(inline="always")
def isfinite(x):
    """``math.isfinite`` by a comparison, as NumPy's loops test it: Numba's computes ``x - x``,
    which raises the invalid flag for an infinity (a warning NumPy never gives)."""
    return abs(x) < math.inf


def with_vector_math(pyfunc: types.FunctionType) -> types.FunctionType:
    """Return a copy of ``pyfunc`` that calls this module's functions instead of ``math``'s.

    Parameters
    ----------
    pyfunc : function
        A plain Python function (a scalar kernel). It is not modified.

    Returns
    -------
    function
        A new function with the same code object, defaults, name, qualname and module (see
        :func:`~gpufuncs.targets.compose.rebind`), whose globals and closure name
        :func:`namespace` where ``pyfunc``'s name the ``math`` module, a replacement where they
        name a replaced ``math`` function (``from math import exp``), and an inlined copy where
        they name an ``@njit`` helper or a gpufuncs elementwise kernel (see below), also where
        the code reads one through a module (``gf.clamp``). Its complex ``*`` and ``/`` compile
        to NumPy's (see :mod:`~gpufuncs.targets.numpy_complex`).

    Notes
    -----
    A helper the kernel calls, an ``@numba.njit`` function, is replaced by a new dispatcher of
    ``with_vector_math`` of its Python function, with its options and ``inline="always"`` (so
    that the kernel's loop sees one body, as it must to vectorize), made once per helper and
    without Numba's disk cache (it would share the helper's entries, see below). A gpufuncs
    kernel the kernel calls is replaced the same way, by a copy of its scalar function: a
    composed kernel is one loop, as if the callee's body were written out in it. Only the
    globals the code names are swapped. The helper itself, and every other function in the
    process, keep ``math``. A helper that calls back into one being copied keeps the original
    there. The globals are a snapshot taken now.
    The closure matters for a kernel defined inside a function that imports ``math`` itself:
    without the swap, its ``math.exp`` would be libm's, one scalar call per element.
    Numba's disk cache names a function's entries by file, qualname and first line and keys
    them by bytecode and closure, not globals: with ``cache=True`` the copy and the original
    share entries, and whichever compiled first is loaded for both (a cached copy can run the
    original's libm code). A caller that caches copies must tell them apart, for example by a
    qualname of their own.
    """
    if not isinstance(pyfunc, types.FunctionType):
        raise TypeError(f"with_vector_math needs a Python function, got {type(pyfunc).__name__}")
    return numpy_arithmetic(rebind(pyfunc, _swapped))


def _swapped(value: Any) -> Any:
    """:func:`namespace` for the ``math`` module, the replacement of a replaced ``math``
    function, the inlined copy of an ``@njit`` helper or of a kernel, NumPy's ``cmath`` (see
    :func:`~gpufuncs.targets.numpy_complex.swapped`), anything else as it is."""
    if value is math:
        return namespace()
    if isinstance(value, types.BuiltinFunctionType) and getattr(math, value.__name__, None) is value:
        return getattr(namespace(), value.__name__)
    if isinstance(value, CPUDispatcher) or kernel_spec(value) is not None:
        return _inlined(value)
    return numpy_cmath(value)


def _inline_copy(callee: Any) -> Any:
    """A new ``inline="always"`` dispatcher of ``with_vector_math`` of ``callee``'s Python
    function: an ``@njit`` helper's (with its options; one with ``fastmath`` is not inlined by
    Numba) or a kernel's scalar function."""
    spec = kernel_spec(callee)
    if spec is not None:
        return njit(inline="always")(with_vector_math(spec.pyfunc))
    options = {k: v for k, v in callee.targetoptions.items() if k != "nopython"}
    if not options.get("fastmath"):
        # A helper with fast-math flags is left to LLVM's inliner, which keeps each
        # instruction's flags: inlined by Numba, its statements would take the caller's.
        options["inline"] = "always"
    return njit(**options)(with_vector_math(callee.py_func))


#: Inlined copies by helper or kernel (see :func:`with_vector_math`).
_inlined = Copies(_inline_copy)
