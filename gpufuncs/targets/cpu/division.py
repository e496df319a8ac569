"""Integer ``//``, ``%`` and ``divmod`` on the host as NumPy's loops compute and report them.

Numba's lowering (``numba.cpython.numbers._int_divmod_impl``, which its three integer
operations call) is replaced while kernels compile (:data:`gpufuncs.targets.base.REPLACEMENTS`)
by :func:`numpys_divmod`, which:

* raises the floating-point status NumPy's integer loops raise, which the loops read as they
  read any other (:mod:`.fpflags`): *divide by zero* for a zero divisor (the result 0, as
  before), and *overflow* for the quotient of the most negative integer by -1, which wraps to
  that integer (remainder 0), as NumPy's does, where Numba gave 0 (the division itself traps
  on x86, so it divides by 1 there);
* divides once, the remainder being ``x - q * y``. Numba's divides twice (``sdiv`` and
  ``srem``, which x86's one ``idiv`` serves only in straight-line code), and LLVM's vectorizer
  turned each guarded division into a division per lane: two per element, and an int64
  ``divmod`` at 10^4 took 1.87x NumPy's loop. The call that raises the status keeps such loops
  scalar, one ``idiv`` an element, as NumPy's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba.core import cgutils, types

from ..base import REPLACEMENTS
from . import fpflags


def numpys_divmod(original: Any) -> Callable[..., Any]:
    """Numba's ``_int_divmod_impl(context, builder, sig, args, zerodiv_message)`` (pointers
    to the quotient and the remainder, of ``sig``'s return type) as NumPy's (module docstring)."""

    def _int_divmod_impl(context: Any, builder: ir.IRBuilder, sig: Any, args: Any,
                         zerodiv_message: str) -> tuple[ir.Value, ir.Value]:
        ty = sig.return_type.dtype if isinstance(sig.return_type, types.UniTuple) else sig.return_type
        x, y = (context.cast(builder, v, t, ty) for v, t in zip(args, sig.args))
        zero = cgutils.is_scalar_zero(builder, y)
        with builder.if_then(zero, likely=False):
            if not context.error_model.fp_zero_division(builder, (zerodiv_message,)):
                fpflags.raise_status(builder, "divide")
        unusable = zero
        if ty.signed:
            wraps = builder.and_(builder.icmp_signed("==", x, x.type(ty.minval)),
                                 builder.icmp_signed("==", y, y.type(-1)))
            # Numba's three callers name their operation only in this message: NumPy's
            # remainder of the two is 0 without a word, its quotient overflows.
            if "modulo" not in zerodiv_message:
                with builder.if_then(wraps, likely=False):
                    fpflags.raise_status(builder, "over")
            unusable = builder.or_(zero, wraps)
        divisor = builder.select(unusable, y.type(1), y)
        divide = builder.sdiv if ty.signed else builder.udiv
        quotient = divide(x, divisor)
        remainder = builder.sub(x, builder.mul(quotient, divisor))
        if ty.signed:  # floored, as Python's and NumPy's: truncated, less one where the signs differ
            floor = builder.and_(builder.icmp_signed("!=", remainder, remainder.type(0)),
                                 builder.icmp_signed("<", builder.xor(divisor, remainder), y.type(0)))
            quotient = builder.sub(quotient, builder.zext(floor, quotient.type))
            remainder = builder.select(floor, builder.add(remainder, divisor), remainder)
        nothing = y.type(0)
        return (cgutils.alloca_once_value(builder, builder.select(zero, nothing, quotient)),
                cgutils.alloca_once_value(builder, builder.select(zero, nothing, remainder)))

    return _int_divmod_impl


REPLACEMENTS.append(("numba.cpython.numbers", "_int_divmod_impl", numpys_divmod))
