"""Helpers that scalar kernels may call, on every target.

Numba types a Python float literal as float64, so ``0.5 * x`` silently turns a float32 kernel's
arithmetic into float64 (slower on GPUs, and not what float32 users expect), and an integer
literal promotes float32 the same way. :func:`as_type` writes a constant in the dtype of the
loop being compiled, so one scalar function serves every signature in its own precision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.typing.templates import infer_global, make_intrinsic_template
from numba.extending import overload


def as_type(value: float, like: Any) -> Any:
    """Return ``value`` converted to the numeric type of ``like``.

    Parameters
    ----------
    value : float or int
        The constant (or integer, such as a loop counter) to convert.
    like : scalar
        A value whose type the result takes: usually one of the kernel's arguments.

    Returns
    -------
    scalar
        ``value`` as ``like``'s type: float32 in a float32 loop, float64 in a float64 loop.
    """
    return type(like)(value)


def _as_type_typing(value, like):  # unannotated: Numba compares the parameters
    # Numba's generic overload: numba-cuda compiles it for the GPU as well.
    if isinstance(like, types.Number):
        cast = like

        def impl(value, like):
            return cast(value)

        return impl
    if isinstance(like, types.Boolean):  # a bool argument (a bool loop given a scalar)
        return lambda value, like: bool(value)
    return None


overload(as_type)(_as_type_typing)


def cpu_intrinsic(handle: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Type and lower calls of the Python function ``handle`` in code compiled for the CPU with
    the decorated function, written as a Numba ``@intrinsic``'s: ``typer(typingctx, *argtypes)``
    returns ``(signature, codegen)``, or ``None`` where it does not apply.

    ``handle`` stays a plain Python function (an ``@intrinsic`` object cannot be called from
    Python). Unlike an ``@overload``, whose implementation Numba compiles in full as soon as a
    call is typed (a code library of its own per argument types and compile options, kept for
    the life of the process, for the type check at a kernel's definition as for its first
    call: most of a user kernel's resident memory after its first call with a cold cache),
    the codegen writes its instructions into the caller. Registered for the ``cpu`` target:
    preferred there to a generic overload of the same function, which other targets
    (numba-cuda's) keep compiling, and which still serves the argument types where ``typer``
    returns ``None``."""

    def register(typer: Callable[..., Any]) -> Callable[..., Any]:
        template = make_intrinsic_template(handle, typer, handle.__name__, kwargs={"target": "cpu"})
        infer_global(handle, types.Function(template))
        return typer

    return register


@cpu_intrinsic(as_type)
def _as_type_cpu(typingctx, value, like):
    # as _as_type_typing's ``cast(value)`` and ``bool(value)``: Numba's casts, without a function
    scalars = (types.Number, types.Boolean)
    if not isinstance(value, scalars) or not isinstance(like, scalars):
        return None

    return like(value, like), _call_cast


def _call_cast(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
    """``as_type``'s cast, as a call of a small function of the caller's module in Numba's
    calling convention, which LLVM inlines: the code the overload's compiled function gave.
    With the cast's constant written in the caller, LLVM's function passes fold the kernel
    differently before inlining: ``half = as_type(0.5, x) if overflowed else one`` and
    ``x * half - x0 * half`` became two more multiplies per element in gaussian's loop (5%
    slower at 10**6 elements), where the call left ``x - x0`` for ``half == 1``."""
    call_conv = context.call_conv
    name = "gpufuncs.as_type." + ".".join(str(t).replace(" ", "") for t in sig.args)
    fnty = call_conv.get_function_type(sig.return_type, sig.args)
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    if fn.is_declaration:
        fn.linkage = "linkonce_odr"
        call_conv.decorate_function(fn, ("value", "like"), sig.args)
        inner = ir.IRBuilder(fn.append_basic_block("entry"))
        value = call_conv.get_arguments(fn)[0]
        value = context.cast(inner, value, sig.args[0], sig.return_type)
        call_conv.return_value(inner, context.get_return_value(inner, sig.return_type, value))
    status, result = call_conv.call_function(builder, fn, sig.return_type, sig.args, args)
    with cgutils.if_unlikely(builder, status.is_error):
        call_conv.return_status_propagate(builder, status)
    return result


def by_precision(like: Any, for_float32: Any, for_float64: Any) -> Any:
    """Return ``for_float32`` where ``like`` is float32, ``for_float64`` otherwise.

    For what :func:`as_type` cannot do without a cost in the loop: a table of constants (a
    module-level NumPy array, which Numba compiles into the code) kept in both precisions, so
    that a float32 loop reads float32 values instead of converting float64 ones at every use.
    Decided when the loop is compiled: the other value costs nothing.

    Parameters
    ----------
    like : scalar
        A value of the loop's precision: usually one of the kernel's arguments.
    for_float32, for_float64
        The two values, of any types (typically NumPy arrays of float32 and float64).

    Returns
    -------
    object
        One of the two.
    """
    return for_float32 if isinstance(like, np.float32) else for_float64


def _by_precision_typing(like, for_float32, for_float64):  # unannotated: as for as_type
    if isinstance(like, types.Number):
        if like == types.float32:
            return lambda like, for_float32, for_float64: for_float32
        return lambda like, for_float32, for_float64: for_float64
    return None


overload(by_precision)(_by_precision_typing)


def muladd(a: Any, b: Any, c: Any) -> Any:
    """Return ``a * b + c``, as one fused multiply-add where the hardware has one.

    Fused, the product is not rounded before the sum: one rounding instead of two, and one
    instruction instead of two: a recurrence, whose steps wait for each other, gains most
    (``hermite_norm``'s uses it). On CPUs with FMA instructions (x86-64 since Haswell and
    Zen, every ARM64) the ``cpu`` and ``parallel`` targets fuse it (LLVM's ``fmuladd``); the
    ``cuda`` target's compiler fuses ``a * b + c`` wherever it appears, so there it is that
    expression. Without FMA hardware, and from plain Python, it is ``a * b + c`` rounded twice.

    Parameters
    ----------
    a, b, c : float
        Of one floating type (float32 or float64).

    Returns
    -------
    float
        ``a * b + c`` in that type.
    """
    return a * b + c


def _one_float_type(a: Any, b: Any, c: Any) -> bool:
    """Whether the Numba types ``a``, ``b`` and ``c`` are one floating type (what LLVM's
    ``fmuladd`` takes)."""
    return isinstance(a, types.Float) and a == b == c


# The CPU's own intrinsic comes first there (Numba prefers the most specific target); other
# targets, numba-cuda's included, compile the generic overload, which their compilers fuse.
@cpu_intrinsic(muladd)
def _fmuladd(typingctx, a, b, c):
    if not _one_float_type(a, b, c):
        return None

    def codegen(context, builder, sig, args):
        llty = args[0].type
        fnty = ir.FunctionType(llty, [llty] * 3)
        fn = builder.module.declare_intrinsic("llvm.fmuladd", [llty], fnty)
        return builder.call(fn, args)

    return a(a, b, c), codegen


def _muladd_typing(a, b, c):
    if all(isinstance(t, types.Float) for t in (a, b, c)):
        return lambda a, b, c: a * b + c
    return None


overload(muladd)(_muladd_typing)
