"""NumPy's elementwise functions as scalar code: the statement a fused body computes each with.

Each operation of a traced function (see :mod:`.trace`) becomes one statement of the fused
scalar function (see :mod:`.emit`), on operands already cast to the loop dtypes that NumPy's
type resolution chose, its value then cast to the loop's output dtype. :func:`template` gives
the statement's expression, a format string over the operands (``"{0} + {1}"``):

* an operator, where Numba's on operands of one dtype computes NumPy's value once cast back
  (Numba widens small integers, whose results then wrap as NumPy's, as int64's do: kernels
  compile with wrapping integers, see :func:`gpufuncs.targets.base.numpys_arithmetic`);
* ``math.f`` / ``cmath.f``, which each target compiles as it does in a kernel's body (vector
  math on ``cpu``, NumPy's complex functions: see :mod:`gpufuncs.targets.numpy_complex`);
* one of the ``@numba.njit`` functions below (:data:`HELPERS`), where NumPy's C loop gives
  values Numba's operator would not (NaN in ``maximum``, the signs of ``floor_divide``), and
  a float product as ``rounded_multiply`` (see :mod:`gpufuncs.targets.numpy_complex`), which
  the GPU's compiler does not fuse into the sum it feeds, as it would ``a * b``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..targets.numpy_complex import rounded_multiply


class Unfusable(Exception):
    """An operation fusion does not compile; the tracer adds where it happened."""


# -- helpers: NumPy's loops where Numba's operators differ --------------------------------------------
@numba.njit
def maximum(a, b):
    # NaN in either propagates (the first, if both); of equal values b, as NumPy's loops give
    # it (the sign of a zero: np.maximum(0.0, -0.0) is -0.0)
    return a if a > b or a != a else b


@numba.njit
def minimum(a, b):
    return a if a < b or a != a else b


@numba.njit
def fmax(a, b):
    # NaN only where both are; of equal values b, as NumPy's array loop (its loop for a few
    # elements gives a: the sign of a zero there is NumPy's choice of loop, docs/fusion.md)
    return a if a > b or b != b else b


@numba.njit
def fmin(a, b):
    return a if a < b or b != b else b


@numba.njit
def floor_divide(a, b):
    """NumPy's float ``floor_divide``: Numba's ``//`` (CPython's ``float_divmod``, the algorithm
    of NumPy's ``npy_divmod``), and ``a / b`` where ``b`` is 0 (Numba's would raise or differ)."""
    return a // b if b != 0 else a / b


@numba.njit
def remainder(a, b):
    """NumPy's float ``remainder``: Numba's ``%`` (the sign of ``b``, as ``npy_remainder``), and
    NaN where ``b`` is 0 (C's ``fmod``)."""
    return a % b if b != 0 else math.nan


@numba.njit
def sign(x):
    if x > 0:
        return 1
    if x < 0:
        return -1
    return x if x != x else 0  # NaN stays NaN; both zeros give 0


#: Below this magnitude a float64 may have a fraction; at and above it every one is an integer.
_INTEGRAL = 2.0**52


# ``math.floor``, ``ceil`` and ``trunc`` give Numba integers: NaN, infinities and large values
# would not survive the conversion, nor the sign of a zero result (``np.ceil(-0.5)`` is -0.0).
@numba.njit
def floor(x):
    return math.copysign(math.floor(x), x) if abs(x) < _INTEGRAL else x  # (NaN: False)


@numba.njit
def ceil(x):
    return math.copysign(math.ceil(x), x) if abs(x) < _INTEGRAL else x


@numba.njit
def trunc(x):
    return math.copysign(math.floor(abs(x)), x) if abs(x) < _INTEGRAL else x


@numba.njit
def isfinite(x):
    # By comparisons, as NumPy's loop: Numba's math.isfinite computes x - x, which raises the
    # invalid flag for an infinity (a warning NumPy's np.isfinite never gives).
    return abs(x.real) < math.inf and abs(x.imag) < math.inf


#: The helpers by name: the fused body's scope holds them.
HELPERS = {f.py_func.__name__: f for f in (maximum, minimum, fmax, fmin, floor_divide, remainder, sign,
                                           floor, ceil, trunc, isfinite, rounded_multiply)}

_EXPRESSIONS = {np.add: "{0} + {1}", np.subtract: "{0} - {1}", np.multiply: "{0} * {1}",
          np.true_divide: "{0} / {1}", np.less: "{0} < {1}", np.less_equal: "{0} <= {1}",
          np.greater: "{0} > {1}", np.greater_equal: "{0} >= {1}", np.equal: "{0} == {1}",
          np.not_equal: "{0} != {1}", np.negative: "-{0}", np.positive: "+{0}",
          np.absolute: "abs({0})", np.square: "{0} * {0}",
          np.bitwise_and: "{0} & {1}", np.bitwise_or: "{0} | {1}", np.bitwise_xor: "{0} ^ {1}",
          np.logical_and: "({0} != 0) & ({1} != 0)", np.logical_or: "({0} != 0) | ({1} != 0)",
          np.logical_xor: "({0} != 0) != ({1} != 0)", np.logical_not: "{0} == 0",
          np.maximum: "maximum({0}, {1})", np.minimum: "minimum({0}, {1})",
          np.fmax: "fmax({0}, {1})", np.fmin: "fmin({0}, {1})", np.sign: "sign({0})",
          np.floor: "floor({0})", np.ceil: "ceil({0})", np.trunc: "trunc({0})",
          np.isfinite: "isfinite({0})"}

#: ``math`` functions of real loops (``cmath`` too where NumPy's complex loop is the same one).
_MATH = {np.exp: "exp", np.expm1: "expm1", np.log: "log", np.log2: "log2", np.log10: "log10",
         np.log1p: "log1p", np.sqrt: "sqrt", np.sin: "sin", np.cos: "cos", np.tan: "tan",
         np.arcsin: "asin", np.arccos: "acos", np.arctan: "atan", np.sinh: "sinh",
         np.cosh: "cosh", np.tanh: "tanh", np.arcsinh: "asinh", np.arccosh: "acosh",
         np.arctanh: "atanh", np.isnan: "isnan", np.isinf: "isinf",
         np.arctan2: "atan2", np.hypot: "hypot", np.copysign: "copysign", np.exp2: "exp2"}
_CMATH = {np.exp: "exp", np.log: "log", np.sqrt: "sqrt", np.isnan: "isnan", np.isinf: "isinf"}
#: Real loops whose values are exactly integers: their integer loops give the input back.
_IDENTITY_ON_INTEGERS = {np.floor, np.ceil, np.trunc, np.rint}


def template(ufunc: np.ufunc, inputs: tuple[np.dtype, ...], power_of: object = None) -> str:
    """The expression of ``ufunc`` on operands of its loop's ``inputs`` dtypes.

    ``power_of``: for ``np.power``, the exponent where it is a constant (NumPy computes
    ``x ** 2`` as ``square``, ``x ** 0.5`` as ``sqrt``, ``x ** -1`` as ``reciprocal``).
    ``Unfusable`` for a function or loop that fusion does not compile.
    """
    kind = inputs[0].kind
    if kind == "f" and (ufunc in (np.multiply, np.square) or (ufunc is np.power and power_of == 2)):
        # rounded alone as NumPy rounds it: the GPU's compiler would fuse it into a sum
        return "rounded_multiply({0}, {1})" if ufunc is np.multiply else "rounded_multiply({0}, {0})"
    if ufunc in _IDENTITY_ON_INTEGERS and kind in "biu":
        return "{0}"
    if ufunc is np.isfinite and kind in "biu":
        return "{0} == {0}"  # always true
    if ufunc is np.power:
        return _power(kind, power_of)
    if ufunc in (np.floor_divide, np.remainder):
        if kind in "iu":
            return "{0} // {1}" if ufunc is np.floor_divide else "{0} % {1}"
        if kind == "f":
            return f"{ufunc.__name__}({{0}}, {{1}})"
    if ufunc is np.reciprocal and kind in "fc":
        return "1 / {0}"
    if ufunc is np.invert and kind in "biu":
        return "not {0}" if kind == "b" else "~{0}"
    if kind == "c":
        if ufunc in _CMATH:
            return f"cmath.{_CMATH[ufunc]}({{0}})"
        if ufunc in (np.maximum, np.minimum, np.fmax, np.fmin, np.sign) or ufunc in _MATH:
            raise Unfusable(f"np.{ufunc.__name__} of complex numbers is not fused")
    if ufunc in (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal):
        if inputs[0] != inputs[1]:  # NumPy's exact int64/uint64 comparisons
            raise Unfusable(f"np.{ufunc.__name__} of {inputs[0]} with {inputs[1]} is not fused")
    if ufunc in _EXPRESSIONS:
        return _EXPRESSIONS[ufunc]
    if ufunc in _MATH and kind == "f":
        name = _MATH[ufunc]
        if name == "exp2":
            return "2.0 ** {0}"
        args = ", ".join(f"{{{i}}}" for i in range(len(inputs)))
        return f"math.{name}({args})"
    raise Unfusable(f"np.{ufunc.__name__} with inputs {', '.join(map(str, inputs))} is not fused")


_MAX_PRODUCT = 64


def _power(kind: str, exponent: object) -> str:
    if exponent is not None and kind in "fc":
        special = {2: "{0} * {0}", 0.5: "math.sqrt({0})" if kind == "f" else "cmath.sqrt({0})",
                   -1: "1 / {0}", 1: "+{0}"}
        if exponent in special:
            return special[exponent]
    if kind in "fc":
        return "{0} ** {1}"
    if kind in "biu" and isinstance(exponent, (int, np.integer)) and 0 <= exponent <= _MAX_PRODUCT:
        # A product of constant length: it wraps as NumPy's integer power, modulo 2**bits once
        # cast back (kernels compile with wrapping integers: see targets.base.numpys_arithmetic).
        return " * ".join(["{0}"] * int(exponent)) if exponent else "1"
    raise Unfusable(f"integer ** is fused for constant exponents from 0 to {_MAX_PRODUCT} only "
                    "(NumPy raises for negative exponents, which a fused loop cannot)")
