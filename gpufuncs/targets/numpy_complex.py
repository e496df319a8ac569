"""NumPy's complex arithmetic and ``cmath.exp`` in compiled kernels, on the ``cpu`` and ``cuda`` targets.

Multiply and divide
-------------------
A kernel's ``z * w`` and ``z / w`` on complex numbers compile, in Numba, as CPython computes
them, and that is not what NumPy's ufuncs compute:

* **Multiply.** Numba forms the four products ``a*c``, ``b*d``, ``a*d``, ``b*c`` and rounds
  each. NumPy's complex multiply loop (its SIMD loop, which it takes on every CPU with fused
  multiply-add: x86-64 from AVX2 on, arm64) computes ``fma(a, c, -(b*d))`` and
  ``fma(a, d, b*c)``: one product of each part exact. Most results differ in the last bit or
  not at all; at the overflow edge they differ completely: ``(2**512 + 2**459j) * (2**512 +
  2**512j)`` is ``1.7976931348623157e308+infj`` in NumPy (``2**1024 - 2**971`` is the largest
  float64) and ``inf+infj`` in Numba (``2**1024`` overflows before the subtraction). On the GPU,
  numba-cuda rounds ``a*c - b*d`` the same way, and NVVM contracts ``a*d + b*c`` into
  ``fma(b, c, a*d)``: the other product exact, not NumPy's.
* **Divide.** Numba uses CPython's algorithm (Smith's, dividing by the denominator, and a
  ``ZeroDivisionError`` for ``0j``, which a CUDA kernel cannot raise). NumPy's is Smith's with
  a reciprocal, ``scl = 1 / (c + d*r)``, multiplied into both parts (other roundings), and a
  complex infinity or NaN for a zero divisor, no exception.

Kernels here get NumPy's: after Numba's type inference, a rewrite replaces every complex
``*``, ``*=``, ``/`` and ``/=`` (both operands complex, or a real one cast to complex as Numba
and NumPy both do) in a kernel's copy (see :func:`numpy_arithmetic`) with a call to an
intrinsic that emits NumPy's operations in NumPy's order, ``llvm.fma`` for its fused ones. On
the GPU each product and sum that NumPy rounds on its own is an ``llvm.nvvm.mul.rn`` /
``add.rn``, which NVVM never contracts. Results agree with NumPy's arrays bit for bit on both
targets. Only kernel code is rewritten: every other Numba function in the process keeps
Numba's arithmetic.

NumPy itself is not one answer everywhere: its scalar loop (NumPy scalars such as
``np.complex128(z) * w``, a one-element in-place ``out=``, CPUs without FMA) rounds all four
products, as Python does. Kernels follow the loop NumPy runs on arrays on current CPUs. The
CUDA simulator runs a kernel as Python, on NumPy scalars: there the scalar loop's answer.

A real product rounded alone
----------------------------
:func:`rounded_multiply` is ``a * b`` of real numbers that the GPU's compiler does not contract
into the sum it feeds (an ``llvm.nvvm.mul.rn``, as the products above): fused functions use
it, which promise NumPy's values bit for bit.

``cmath.exp``
-------------
A kernel's ``cmath`` is :func:`cmath_namespace` on every target: ``cmath``'s own functions
except :func:`exp`, which is NumPy's complex exponential (C99's ``cexp``, as glibc computes
it). Numba's ``cmath.exp`` differs from it where ``exp(x)`` overflows although the result
does not (``exp(710+1j)`` is ``1.207e308+infj`` in NumPy, ``inf+infj`` in Numba), where the
imaginary part is zero (``exp(710+0j)``: ``inf+0j``, not ``inf+nanj``) and in the sign of some
zeros (``exp(-inf-infj)``: ``0-0j``).
"""

from __future__ import annotations

import cmath
import hashlib
import math
import operator
import types as pytypes
import weakref
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import overload

__all__ = ["cmath_namespace", "cuda_rounded_multiply", "digest", "exp", "numpy_arithmetic", "register_cuda",
           "rounded_multiply", "swapped"]

#: The functions whose compiled code gets NumPy's complex arithmetic (kernel copies).
_KERNEL_CODE: weakref.WeakSet[Any] = weakref.WeakSet()


def numpy_arithmetic(func: Any) -> Any:
    """Mark ``func``, a kernel's copy about to be compiled, for NumPy's complex ``*`` and ``/``.

    Parameters
    ----------
    func : function
        A Python function that a target compiles (``vecmath.with_vector_math`` and the cuda
        target's ``for_device`` mark the copies they make). Functions inlined into it at
        Numba's IR level (``inline="always"``) are covered with it.

    Returns
    -------
    function
        ``func`` itself.
    """
    _register_cpu()
    _KERNEL_CODE.add(func)
    return func


@cache
def digest() -> str:
    """A digest of this module's source: compiled kernels depend on it (disk-cache keys)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


# -- NumPy's operations, as LLVM IR ----------------------------------------------------------------
class _Ops:
    """The float operations NumPy's loops use, emitted one instruction each, never contracted.

    On the CPU an ``fmul`` and an ``fadd`` are separate roundings unless flagged ``contract``
    (Numba does not). NVVM contracts a product into a following sum by default (``-fma=1``),
    so on the GPU they are ``llvm.nvvm.mul.rn`` and ``llvm.nvvm.add.rn``.
    """

    def __init__(self, builder: ir.IRBuilder, fty: ir.Type, gpu: bool) -> None:
        self.b, self.fty, self.gpu = builder, fty, gpu
        self.suffix = "f" if isinstance(fty, ir.FloatType) else "d"

    def _nvvm(self, name: str, *args: ir.Value) -> ir.Value:
        fnty = ir.FunctionType(self.fty, [self.fty] * len(args))
        module = self.b.module
        fn = module.globals.get(name) or ir.Function(module, fnty, name)
        return self.b.call(fn, args)

    def _llvm(self, name: str, *args: ir.Value) -> ir.Value:
        fnty = ir.FunctionType(self.fty, [self.fty] * len(args))
        return self.b.call(self.b.module.declare_intrinsic(name, [self.fty], fnty), args)

    def const(self, value: float) -> ir.Value:
        return ir.Constant(self.fty, value)

    def mul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._nvvm(f"llvm.nvvm.mul.rn.{self.suffix}", x, y) if self.gpu else self.b.fmul(x, y)

    def add(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._nvvm(f"llvm.nvvm.add.rn.{self.suffix}", x, y) if self.gpu else self.b.fadd(x, y)

    def neg(self, x: ir.Value) -> ir.Value:
        return self.b.fsub(self.const(-0.0), x)  # exact; LLVM 7 (NVVM) has no fneg

    def sub(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.add(x, self.neg(y)) if self.gpu else self.b.fsub(x, y)

    def div(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fdiv(x, y)  # IEEE division on both (NVVM: -prec-div=1 unless fastmath)

    def fma(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        return self._llvm("llvm.fma", x, y, z)

    def fabs(self, x: ir.Value) -> ir.Value:
        if not self.gpu:
            return self._llvm("llvm.fabs", x)
        bits = ir.IntType(32 if self.suffix == "f" else 64)  # NVVM has no llvm.fabs: clear the sign
        cleared = self.b.and_(self.b.bitcast(x, bits), ir.Constant(bits, (1 << (bits.width - 1)) - 1))
        return self.b.bitcast(cleared, self.fty)

    def ge(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered(">=", x, y)

    def eq(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("==", x, y)

    def select(self, cond: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(cond, x, y)


Parts = tuple[ir.Value, ir.Value]


def _multiply(o: _Ops, a: ir.Value, b: ir.Value, c: ir.Value, d: ir.Value) -> Parts:
    """NumPy's SIMD complex multiply (``simd_cmul``: ``npyv_muladdsub`` of ``a`` by ``(c, d)``
    and ``b * (d, c)``): ``fma(a, c, -(b*d))``, ``fma(a, d, b*c)``."""
    return o.fma(a, c, o.mul(o.neg(b), d)), o.fma(a, d, o.mul(b, c))


def _divide(o: _Ops, a: ir.Value, b: ir.Value, c: ir.Value, d: ir.Value) -> Parts:
    """NumPy's complex divide (``@TYPE@_divide`` in ``loops.c.src``, NumPy 2.4): Smith's
    algorithm with a reciprocal; a zero divisor divides each part by ``|c|`` (``+0``). Both
    branches are computed and one selected (a NaN in ``c`` or ``d`` takes the second, as C's
    ``>=`` does)."""
    abs_c, abs_d = o.fabs(c), o.fabs(d)
    one = o.const(1.0)
    # |c| >= |d|: r = d/c
    r1 = o.div(d, c)
    s1 = o.div(one, o.add(c, o.mul(d, r1)))
    re1 = o.mul(o.add(a, o.mul(b, r1)), s1)
    im1 = o.mul(o.sub(b, o.mul(a, r1)), s1)
    # else: r = c/d
    r2 = o.div(c, d)
    s2 = o.div(one, o.add(d, o.mul(c, r2)))
    re2 = o.mul(o.add(o.mul(a, r2), b), s2)
    im2 = o.mul(o.sub(o.mul(b, r2), a), s2)
    first = o.ge(abs_c, abs_d)
    zero = o.b.and_(o.eq(abs_c, o.const(0.0)), o.eq(abs_d, o.const(0.0)))
    re = o.select(first, o.select(zero, o.div(a, abs_c), re1), re2)
    im = o.select(first, o.select(zero, o.div(b, abs_c), im1), im2)
    return re, im


def _codegen(emit: Callable[..., Parts], gpu: bool) -> Callable[..., Any]:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        ty = sig.args[0]
        z = context.make_complex(builder, ty, value=args[0])
        w = context.make_complex(builder, ty, value=args[1])
        result = context.make_complex(builder, ty)
        ops = _Ops(builder, z.real.type, gpu)
        result.real, result.imag = emit(ops, z.real, z.imag, w.real, w.imag)
        return result._getvalue()

    return codegen


def _intrinsic(intrinsic: Callable[..., Any], emit: Callable[..., Parts], gpu: bool) -> Any:
    """``emit`` as a Numba intrinsic of two complex numbers of one type."""
    codegen = _codegen(emit, gpu)

    def typer(typingctx: Any, z: types.Type, w: types.Type) -> Any:
        if isinstance(z, types.Complex) and z == w:
            return z(z, w), codegen
        return None

    name = emit.__name__.lstrip("_")
    typer.__name__ = typer.__qualname__ = f"numpy_complex_{name}{'_cuda' if gpu else ''}"
    return intrinsic(typer)


# -- the rewrite -----------------------------------------------------------------------------------
#: The operators rewritten (a binop's ``fn``; an in-place one's is the ``i`` form) and the
#: emitter of each.
_EMITTERS = {operator.mul: _multiply, operator.imul: _multiply,
             operator.truediv: _divide, operator.itruediv: _divide}


def _rewrite_class(ir_module: Any, base: type, mk_unique_var: Callable[[str], str],
                   intrinsics: dict[Callable[..., Parts], Any]) -> type:
    """The after-inference rewrite of one Numba pipeline (Numba's or numba-cuda's IR classes)."""

    class NumpyComplexArithmetic(base):  # type: ignore[misc, valid-type]
        """Replace complex ``*`` and ``/`` in kernel code with NumPy's (see the module docstring)."""

        def __init__(self, state: Any) -> None:
            super().__init__(state)
            self.typingctx = state.typingctx

        def match(self, func_ir: Any, block: Any, typemap: Any, calltypes: Any) -> bool:
            self.block, self.typemap, self.calltypes = block, typemap, calltypes
            self.found = []
            if func_ir.func_id.func not in _KERNEL_CODE:
                return False
            for stmt in block.body:
                value = getattr(stmt, "value", None)
                if (isinstance(stmt, ir_module.Assign) and isinstance(value, ir_module.Expr)
                        and value.op in ("binop", "inplace_binop") and value.fn in _EMITTERS):
                    sig = calltypes.get(value)
                    if (sig is not None and len(sig.args) == 2
                            and isinstance(sig.args[0], types.Complex) and sig.args[0] == sig.args[1]):
                        self.found.append(stmt)
            return bool(self.found)

        def apply(self) -> Any:
            typingctx = self.typingctx
            block = self.block.copy()
            block.clear()
            found = set(map(id, self.found))
            for stmt in self.block.body:
                if id(stmt) not in found:
                    block.append(stmt)
                    continue
                expr, loc = stmt.value, stmt.loc
                sig = self.calltypes[expr]
                impl = intrinsics[_EMITTERS[expr.fn]]
                fn = ir_module.Var(block.scope, mk_unique_var("$numpy_complex"), loc)
                fnty = typingctx.resolve_value_type(impl)
                self.typemap[fn.name] = fnty
                block.append(ir_module.Assign(ir_module.Global(fn.name, impl, loc), fn, loc))
                call = ir_module.Expr.call(fn, (expr.lhs, expr.rhs), (), loc)
                self.calltypes[call] = fnty.get_call_type(typingctx, sig.args, {})
                block.append(ir_module.Assign(call, stmt.target, loc))
            return block

    return NumpyComplexArithmetic


@cache
def _register_cpu() -> None:
    """Register the rewrite in Numba's pipeline (once, when the first kernel copy is made:
    importing ``ir_utils`` and making the intrinsics costs tens of milliseconds)."""
    from numba.core import ir as nir
    from numba.core.ir_utils import mk_unique_var
    from numba.core.rewrites import Rewrite, register_rewrite
    from numba.extending import intrinsic

    intrinsics = {emit: _intrinsic(intrinsic, emit, gpu=False) for emit in (_multiply, _divide)}
    register_rewrite("after-inference")(_rewrite_class(nir, Rewrite, mk_unique_var, intrinsics))


@cache
def register_cuda() -> None:
    """Give kernel code compiled by numba-cuda NumPy's complex ``*`` and ``/`` (once; the cuda
    target calls it, not under the CUDA simulator, which runs kernels as Python)."""
    from numba.cuda.core import ir as cir
    from numba.cuda.core.ir_utils import mk_unique_var
    from numba.cuda.core.rewrites import Rewrite, register_rewrite
    from numba.cuda.extending import intrinsic

    intrinsics = {emit: _intrinsic(intrinsic, emit, gpu=True) for emit in (_multiply, _divide)}
    register_rewrite("after-inference")(_rewrite_class(cir, Rewrite, mk_unique_var, intrinsics))



# -- a real product rounded alone -----------------------------------------------------------------
@numba.njit
def rounded_multiply(a, b):  # unannotated: a Numba function
    """``a * b`` of real numbers, rounded alone as NumPy's loops round it, never contracted
    with a sum it feeds into one fused multiply-add. Numba's CPU code does not contract; NVVM
    does by default (``a * 2.5 + c`` is one rounding on the GPU, two in NumPy), so CUDA copies
    of code that calls this call :func:`cuda_rounded_multiply` instead."""
    return a * b


@cache
def cuda_rounded_multiply() -> Any:
    """:func:`rounded_multiply` for numba-cuda: an ``llvm.nvvm.mul.rn``, which neither NVVM
    nor ``ptxas`` contracts (with LTO or without). Operands of two float types are first cast to
    the wider, as Numba's ``*`` casts them."""
    from numba.cuda.extending import intrinsic

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        a, b = (context.cast(builder, v, t, sig.return_type) for v, t in zip(args, sig.args))
        return _Ops(builder, a.type, gpu=True).mul(a, b)

    def rounded_multiply_cuda(typingctx: Any, a: types.Type, b: types.Type) -> Any:
        if isinstance(a, types.Float) and isinstance(b, types.Float):
            return max(a, b, key=lambda t: t.bitwidth)(a, b), codegen
        return None

    return intrinsic(rounded_multiply_cuda)


# -- cmath.exp -------------------------------------------------------------------------------------
def exp(z: complex) -> complex:
    """NumPy's complex exponential, as a kernel's ``cmath.exp(z)`` computes it.

    Parameters
    ----------
    z : complex
        The argument; a real one counts as complex (float32 as complex64, others as complex128).

    Returns
    -------
    numpy.complexfloating
        From Python, ``np.exp`` of ``z`` (complex64 for complex64 or float32 arguments, else
        complex128), without warnings: C99's ``cexp`` (glibc's), an overflowing ``exp(x)`` scaled
        so that a finite result stays finite, C99's special values for infinite and NaN parts. In
        compiled code, the same algorithm (see ``_exp_typing``): bit for bit NumPy's on the
        ``cpu`` target, which calls the same libm ``exp``, ``sin`` and ``cos``; within the
        kernel's tolerance on the GPU (CUDA's libdevice functions), special values exact.
    """
    kind = np.complex64 if isinstance(z, (np.complex64, np.float32)) else np.complex128
    with np.errstate(all="ignore"):
        return np.exp(kind(z))


def _exp_typing(z):  # unannotated: Numba compares the parameters
    """glibc's ``__cexp`` (``s_cexp_template.c``), which NumPy's ``np.exp`` calls for complex
    numbers. Every constant is of the argument's precision (float32 arithmetic stays float32)."""
    if isinstance(z, types.Complex):
        real = z.underlying_float
    elif isinstance(z, types.Float | types.Integer):
        real = types.float32 if z == types.float32 else types.float64
    else:
        return None
    ftype = np.float32 if real == types.float32 else np.float64
    ctype = np.complex64 if ftype is np.float32 else np.complex128
    info = np.finfo(ftype)
    # t = (int) ((MAX_EXP - 1) * ln 2): 88 (float32), 709 (float64); exp(t) is finite
    big = ftype(int((info.maxexp - 1) * math.log(2)))
    tiny, huge = ftype(info.tiny), ftype(info.max)
    zero, one, inf, nan = ftype(0), ftype(1), ftype(np.inf), ftype(np.nan)

    def impl(z):
        w = ctype(z)
        x, y = w.real, w.imag
        if math.isfinite(x):
            if not math.isfinite(y):
                return ctype(complex(nan, nan))
            s, c = (math.sin(y), math.cos(y)) if abs(y) > tiny else (y, one)
            if x > big:
                e = math.exp(big)
                x, s, c = x - big, s * e, c * e
                if x > big:
                    x, s, c = x - big, s * e, c * e
            if x > big:  # the real part was above 3 t: overflow
                return ctype(complex(huge * c, huge * s))
            ev = math.exp(x)
            return ctype(complex(ev * c, ev * s))
        if math.isinf(x):
            if math.isfinite(y):
                value = zero if x < zero else inf
                if y == zero:
                    return ctype(complex(value, y))
                s, c = (math.sin(y), math.cos(y)) if abs(y) > tiny else (y, one)
                return ctype(complex(math.copysign(value, c), math.copysign(value, s)))
            if x > zero:
                return ctype(complex(inf, y - y))
            return ctype(complex(zero, math.copysign(zero, y)))
        return ctype(complex(nan, y if y == zero else nan))

    return impl


@cache
def cmath_namespace() -> pytypes.ModuleType:
    """A module with every public attribute of ``cmath``, :func:`exp` swapped in.

    Returns
    -------
    types.ModuleType
        The same object on every call: what a kernel's ``cmath`` is, on every target.
    """
    mod = pytypes.ModuleType(f"{__name__}.cmath", "``cmath`` with NumPy's complex exponential")
    for attr in dir(cmath):
        if not attr.startswith("_"):
            setattr(mod, attr, getattr(cmath, attr))
    overload(exp)(_exp_typing)  # registered once, with the namespace that reaches it
    mod.exp = exp
    return mod


def swapped(value: Any) -> Any:
    """What a kernel's copy reads for ``value``: :func:`cmath_namespace` for the ``cmath``
    module, :func:`exp` for ``cmath.exp`` (``from cmath import exp``), ``value`` otherwise."""
    if value is cmath:
        return cmath_namespace()
    if value is cmath.exp:
        cmath_namespace()  # the overload of exp
        return exp
    return value
