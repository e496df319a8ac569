"""Integer ``//``, ``%`` and ``divmod`` on the host as NumPy's loops compute and report them.

Numba's lowering (``numba.cpython.numbers._int_divmod_impl``, which its three integer
operations call) is replaced while kernels compile (:data:`gpufuncs.targets.base.REPLACEMENTS`)
by :func:`numpys_divmod`, which:

* raises the floating-point status NumPy's integer loops raise, which the loops read as they
  read any other (:mod:`.fpflags`): *divide by zero* for a zero divisor (the result 0, as
  before), and *overflow* for the quotient of the most negative integer by -1, which wraps to
  that integer (remainder 0), as NumPy's does, where Numba gave 0. Each comes from a float
  operation that raises it exactly then and decides the result (:func:`_flagged_zero`,
  :func:`_flagged_wrap`), so that LLVM keeps it;
* divides once: Numba's divides twice (``sdiv`` and ``srem``, which x86's one ``idiv`` serves
  only in straight-line code), and LLVM's vectorizer turned each guarded division into a
  division per lane, two per element (an int64 ``divmod`` at 10^4 took 1.9x NumPy's loop);
  signed values divide as magnitudes (:func:`_floored`), with no branch on their signs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba.core import cgutils, types

from ..base import REPLACEMENTS


def numpys_divmod(original: Any) -> Callable[..., Any]:
    """Numba's ``_int_divmod_impl(context, builder, sig, args, zerodiv_message)`` (pointers
    to the quotient and the remainder, of ``sig``'s return type) as NumPy's (module docstring)."""

    def _int_divmod_impl(context: Any, builder: ir.IRBuilder, sig: Any, args: Any,
                         zerodiv_message: str) -> tuple[ir.Value, ir.Value]:
        ty = sig.return_type.dtype if isinstance(sig.return_type, types.UniTuple) else sig.return_type
        x, y = (context.cast(builder, v, t, ty) for v, t in zip(args, sig.args))
        nothing = y.type(0)
        zero = builder.icmp_unsigned("==", y, nothing)
        if context.error_model.raise_on_fp_zero_division:
            with builder.if_then(zero, likely=False):
                context.error_model.fp_zero_division(builder, (zerodiv_message,))
        divisor = builder.select(zero, y.type(1), y)
        if not ty.signed:
            quotient, remainder = _divided(builder, x, divisor)
        else:
            quotient, remainder = _floored(builder, x, divisor)
            # Numba's three callers name their operation only in this message: NumPy's
            # remainder of the two is 0 without a word, its quotient overflows.
            if "modulo" not in zerodiv_message:
                quotient = _flagged_wrap(builder, x, y, ty, quotient)
        if not context.error_model.raise_on_fp_zero_division:
            # The same answer, and NumPy's flag: found after the division, not before it
            zero = _flagged_zero(builder, y, ty)
        return (cgutils.alloca_once_value(builder, builder.select(zero, nothing, quotient)),
                cgutils.alloca_once_value(builder, builder.select(zero, nothing, remainder)))

    return _int_divmod_impl


def _divided(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Unsigned ``x // y`` and ``x % y`` with one division."""
    quotient = builder.udiv(x, y)
    return quotient, builder.sub(x, builder.mul(quotient, y))


def _flagged_zero(builder: ir.IRBuilder, y: ir.Value, ty: Any) -> ir.Value:
    """Whether ``y`` is 0, found as ``1.0 / y`` being infinite: a float division that raises
    divide by zero exactly then, and that LLVM must keep, since the answer depends on it. (A
    call that raised the flag cost 1.4 ns an element in the loops; this division 0.5 ns, off
    the integer division's path where it decides only the results.)"""
    double = ir.DoubleType()
    as_double = builder.sitofp(y, double) if ty.signed else builder.uitofp(y, double)
    return builder.fcmp_ordered("==", builder.fdiv(double(1.0), as_double), double(float("inf")))


def _flagged_wrap(builder: ir.IRBuilder, x: ir.Value, y: ir.Value, ty: Any, quotient: ir.Value) -> ir.Value:
    """``quotient`` (of ``x`` by ``y``), with overflow raised where it wrapped (the most
    negative integer by -1, whose quotient is that integer, as :func:`_floored` gives it):
    ``float(x) * 1e300`` overflows to -inf exactly then (``float(x) * 0.0`` elsewhere raises
    nothing) and picks the quotient, so LLVM keeps it, and cannot fold it (x is not known)."""
    double = ir.DoubleType()
    wraps = builder.and_(builder.icmp_signed("==", x, x.type(ty.minval)),
                         builder.icmp_signed("==", y, y.type(-1)))
    scaled = builder.fmul(builder.sitofp(x, double), builder.select(wraps, double(1e300), double(0.0)))
    return builder.select(builder.fcmp_ordered("==", scaled, double(float("-inf"))), x, quotient)


def _floored(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Signed ``x // y`` and ``x % y`` (``y`` not 0) floored, as Python's and NumPy's.

    The magnitudes are divided, unsigned: x86's division of small non-negative values (LLVM
    tries a 32-bit one first) then takes the same branch whatever the signs, where a signed
    division mispredicted it for every other element of data of mixed signs. ``-2**63`` is its
    own magnitude as unsigned, and its quotient by -1 wraps to itself, remainder 0, as NumPy's."""
    zero = x.type(0)
    negative_x, negative_y = builder.icmp_signed("<", x, zero), builder.icmp_signed("<", y, zero)
    size_x = builder.select(negative_x, builder.sub(zero, x), x)
    size_y = builder.select(negative_y, builder.sub(zero, y), y)
    size_q, size_r = _divided(builder, size_x, size_y)
    quotient = builder.select(builder.xor(negative_x, negative_y), builder.sub(zero, size_q), size_q)
    remainder = builder.select(negative_x, builder.sub(zero, size_r), size_r)  # truncated
    # Floored: one less, and y more, where the remainder is not 0 and its sign is not y's
    floor = builder.and_(builder.icmp_signed("!=", remainder, zero),
                         builder.icmp_signed("<", builder.xor(y, remainder), zero))
    return (builder.sub(quotient, builder.zext(floor, quotient.type)),
            builder.select(floor, builder.add(remainder, y), remainder))


REPLACEMENTS.append(("numba.cpython.numbers", "_int_divmod_impl", numpys_divmod))
