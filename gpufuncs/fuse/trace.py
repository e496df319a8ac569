"""Tracing a fused function: run it once on symbols and record each operation, with NumPy's dtypes.

The function is called with a :class:`Symbol` for each argument, which carries the argument's
dtype (or, for a Python scalar, its Python type: NEP 50's weak scalars). Every NumPy ufunc, every
operator and every gpufuncs kernel applied to a symbol records a :class:`Step` holding the loop
dtypes NumPy's own resolution chooses for those operands (``ufunc.resolve_dtypes``; a kernel's
loop selection for kernels), and returns symbols of the results. The recorded steps, in order,
are the fused body (see :mod:`.emit`): each intermediate has exactly the dtype the function run
eagerly would give it, and constants in the body convert to their loop dtype as NumPy converts
them.

Reductions (``.sum()``, ``np.max``, ...) may end the function: they are recorded (see
:mod:`.reduction`) and returned. Whatever fusion cannot compile (an array that is not an
argument, an operation on a reduction's result, a branch on a value, a function with no scalar
form) raises :class:`~gpufuncs.FusionError` naming the function
and the line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dispatch.lazy import call_loop
from ..errors import FusionError
from ..spec import HALF, kernel_spec
from .ops import Unfusable, template
from .reduction import FUNCTIONS, NAMED, REDUCTIONS, Reduced, Reduction, accumulated, bind, combining

#: Python scalars: weak in NEP 50 (``bool`` is no weaker than ``np.bool_``: it is taken as that).
WEAK = (int, float, complex)
#: The dtype a weak Python scalar argument is passed to the fused kernel as.
WEAK_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64), complex: np.dtype(np.complex128)}


@dataclass(frozen=True)
class Operand:
    """A step's operand: ``value`` (a :class:`Symbol`'s index, or a constant already converted
    to ``to``), read as dtype ``to``."""

    value: int | np.generic
    to: np.dtype


@dataclass(frozen=True)
class Step:
    """One operation: ``expression`` (a format string over the operands: see :mod:`.ops`, or a
    kernel's scope name) on ``operands``, giving values of ``results``' dtypes."""

    expression: str
    operands: tuple[Operand, ...]
    results: tuple[np.dtype, ...]
    kernel: Any = None  # a gpufuncs kernel the expression calls


@dataclass
class Trace:
    """What tracing found: the arguments' dtypes, the steps, and the returned symbols."""

    arguments: list[np.dtype | type]
    steps: list[Step] = field(default_factory=list)
    #: The dtype of each symbol (arguments first, then each step's results).
    dtypes: list[np.dtype] = field(default_factory=list)
    #: The arguments each symbol's values depend on (its shape is their broadcast shape).
    depends: list[frozenset[int]] = field(default_factory=list)
    outputs: tuple[int, ...] = ()
    #: The reductions the function returns, in order, where it returns reductions (see
    #: :mod:`.reduce`); ``outputs`` then holds the symbols they reduce.
    reductions: tuple[Reduction, ...] = ()
    #: ``(argument, dtype)``: a Python int argument converted to an integer dtype, which NumPy
    #: refuses (``OverflowError``) for values out of its range: checked on every call.
    int_checks: set[tuple[int, np.dtype]] = field(default_factory=set)


class _NoAttribute(Unfusable, AttributeError):
    """An attribute a traced array does not have."""


class Symbol:
    """A value of the traced function: an argument, or a result of an operation on them."""

    __slots__ = ("_tracer", "index")
    __array_priority__ = 1e9

    def __init__(self, tracer: _Tracer, index: int) -> None:
        self._tracer, self.index = tracer, index

    @property
    def dtype(self) -> np.dtype:
        return self._tracer.dtype_of(self)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method == "reduce":  # NumPy's ufuncs' and gpufuncs kernels' (which defer to this)
            return self._tracer.reduce_by(ufunc, inputs, kwargs)
        if method != "__call__":
            raise Unfusable(f"np.{ufunc.__name__}.{method} is not fused (elementwise calls are, and "
                            f"the reductions {', '.join(REDUCTIONS)} and reduce at the end of the "
                            "function)")
        return self._tracer.apply(ufunc, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return self._tracer.function(func, args, kwargs)

    def astype(self, dtype: Any, **kwargs: Any) -> Symbol:
        if kwargs:
            raise Unfusable(f"astype({', '.join(kwargs)}=...) is not fused")
        return self._tracer.cast(self, np.dtype(dtype))

    def __bool__(self) -> bool:
        raise Unfusable("a branch on an array's values (if, and, or, min, max) is not fused: "
                        "use np.where, np.maximum, np.minimum")

    def _refuse(self, *args: Any) -> Any:
        raise Unfusable("converting an array to a Python number is not fused (math.* functions "
                        "take scalars: use NumPy's functions, e.g. np.exp)")

    __float__ = __int__ = __complex__ = __index__ = _refuse

    def __getattr__(self, name: str) -> Any:
        # An AttributeError too: code that probes for an attribute (``getattr(x, name, None)``,
        # as the kernels' own argument checks do) finds none.
        if name in REDUCTIONS:
            return lambda *args, **kwargs: self._tracer.reduce(name, (self, *args), kwargs)
        if name in ("std", "var"):
            raise _NoAttribute(f".{name}() is not fused (a reduction of two passes); the fused "
                               f"reductions are {', '.join(REDUCTIONS)}")
        raise _NoAttribute(f"the attribute .{name} of an array is not fused")

    def __iter__(self) -> Any:
        raise Unfusable("iterating over an array is not fused")

    def __getitem__(self, key: Any) -> Any:
        raise Unfusable("indexing an array is not fused (the function runs per element)")


def _unary(ufunc: np.ufunc) -> Callable[[Any], Any]:
    return lambda self: self._tracer.operator(ufunc, (self,))


def _binary(ufunc: np.ufunc) -> tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]:
    return (lambda self, other: self._tracer.operator(ufunc, (self, other))), \
        (lambda self, other: self._tracer.operator(ufunc, (other, self)))


for _name, _ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                      ("mod", np.remainder), ("pow", np.power), ("and", np.bitwise_and),
                      ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
    _forward, _reflected = _binary(_ufunc)
    setattr(Symbol, f"__{_name}__", _forward)
    setattr(Symbol, f"__r{_name}__", _reflected)
for _name, _ufunc in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                      ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)):
    setattr(Symbol, f"__{_name}__", _binary(_ufunc)[0])
for _name, _ufunc in (("neg", np.negative), ("pos", np.positive), ("abs", np.absolute),
                      ("invert", np.invert)):
    setattr(Symbol, f"__{_name}__", _unary(_ufunc))
Symbol.__hash__ = object.__hash__  # (defining __eq__ removed it)


class _Tracer:
    """Records the steps of one trace (see :func:`trace`)."""

    def __init__(self, arguments: list[np.dtype | type]) -> None:
        self.trace = Trace(list(arguments))
        self.trace.dtypes = [WEAK_DTYPES[a] if isinstance(a, type) else a for a in arguments]
        self.trace.depends = [frozenset({i}) for i in range(len(arguments))]
        #: Symbols that are Python scalars in the eager call (weak in NEP 50), by index: the
        #: Python scalar arguments, and Python operators' results on Python scalars only.
        self.weak: dict[int, type] = {i: a for i, a in enumerate(arguments) if isinstance(a, type)}

    def dtype_of(self, symbol: Symbol) -> np.dtype:
        return self.trace.dtypes[symbol.index]

    def _resolution_dtype(self, value: Any) -> np.dtype | type:
        """``value``'s dtype as NumPy's resolution sees it (a Python type for a weak scalar)."""
        if isinstance(value, Symbol):
            return self.weak.get(value.index) or self.dtype_of(value)
        if isinstance(value, bool):
            return np.dtype(np.bool_)
        if isinstance(value, WEAK):
            return type(value)
        if isinstance(value, np.generic):
            return value.dtype
        if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
            raise Unfusable("an array that is not an argument of the function is not fused: "
                            "pass it as an argument")
        raise Unfusable(f"a value of type {type(value).__name__} is not fused")

    def _operand(self, value: Any, to: np.dtype) -> Operand:
        """``value`` read as ``to``: a constant converted now, as NumPy converts it."""
        if isinstance(value, Symbol):
            if value.index < len(self.trace.arguments) and self.trace.arguments[value.index] is int:
                if to.kind in "iu" and to != WEAK_DTYPES[int]:
                    self.trace.int_checks.add((value.index, to))
            return Operand(value.index, to)
        return Operand(to.type(value), to)  # OverflowError for a Python int out of range: NumPy's

    def _record(self, expression: str, operands: list[Operand], results: tuple[np.dtype, ...],
                kernel: Any = None) -> Symbol | tuple[Symbol, ...]:
        for dtype in (*[op.to for op in operands], *results):
            if dtype == HALF:
                raise Unfusable("float16 values are not fused (NumPy rounds each float16 "
                                "operation; cast to float32 first)")
            if dtype.kind not in "biufc":
                raise Unfusable(f"dtype {dtype} is not fused")
        self.trace.steps.append(Step(expression, tuple(operands), results, kernel))
        first = len(self.trace.dtypes)
        self.trace.dtypes += list(results)
        depends = frozenset().union(*(self.trace.depends[op.value] for op in operands
                                      if not isinstance(op.value, np.generic)))
        self.trace.depends += [depends] * len(results)
        symbols = tuple(Symbol(self, first + k) for k in range(len(results)))
        return symbols[0] if len(symbols) == 1 else symbols

    def operator(self, ufunc: np.ufunc, inputs: tuple[Any, ...]) -> Any:
        """A Python operator (``-b``, ``b * 2``): ``ufunc`` as NumPy computes it, except on Python
        scalars only, where the eager call computes with Python's: a float or complex result
        stays a Python scalar (weak), and an int result is refused (Python computes it without
        wrapping, and NumPy checks its value against each loop it meets, per call)."""
        if not all(isinstance(self._resolution_dtype(v), type) for v in inputs):
            return ufunc(*inputs)
        result = self.apply(ufunc, inputs, {})
        kind = self.dtype_of(result).kind
        if kind in "iu":
            raise Unfusable(f"{ufunc.__name__} of Python ints only is not fused (Python computes it "
                            "without wrapping, and NumPy checks the value against each loop it meets): "
                            "compute it before the call, or pass a NumPy integer")
        if kind in "fc":
            self.weak[result.index] = float if kind == "f" else complex
        return result

    def apply(self, ufunc: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kwargs:
            raise Unfusable(f"keywords ({', '.join(kwargs)}) in a call of {ufunc.__name__} are not fused")
        dtypes = [self._resolution_dtype(v) for v in inputs]
        spec = kernel_spec(ufunc) or kernel_spec(getattr(ufunc, "kernel", None))  # (a gufunc's sizes bound)
        if spec is not None:
            return self._kernel(ufunc, spec, inputs, dtypes)
        if not isinstance(ufunc, np.ufunc):
            raise Unfusable(f"{ufunc!r} is not fused")
        loop = ufunc.resolve_dtypes((*dtypes, *[None] * ufunc.nout))
        exponent = None
        if ufunc is np.power and not isinstance(inputs[1], Symbol):
            exponent = inputs[1]
        expression = template(ufunc, loop[: ufunc.nin], exponent)
        operands = [self._operand(v, to) for v, to in zip(inputs, loop)]
        return self._record(expression, operands, loop[ufunc.nin:])

    def _kernel(self, kernel: Any, spec: Any, inputs: tuple[Any, ...], dtypes: list[Any]) -> Any:
        if spec.is_gufunc:
            raise Unfusable(f"{spec.name!r} is a generalized kernel (layout {spec.layout.text!r}); "
                            "fusion compiles elementwise kernels")
        if len(inputs) != spec.nin:
            raise Unfusable(f"{spec.name} takes {spec.nin} inputs, got {len(inputs)}")
        loop = call_loop(spec, dtypes)
        operands = [self._operand(v, to) for v, to in zip(inputs, loop.inputs)]
        return self._record("", operands, loop.outputs, kernel)

    def function(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if func is np.where and len(args) == 3 and not kwargs:
            return self._where(*args)
        if func is np.clip and not kwargs and len(args) == 3:
            return self._clip(*args)
        if func in FUNCTIONS:
            return self.reduce(FUNCTIONS[func], args, kwargs)
        raise Unfusable(f"np.{getattr(func, '__name__', repr(func))} is not fused")

    def reduce(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Reduced:
        """``np.<name>(*args, **kwargs)`` of a symbol: recorded, to end the function with."""
        operand, axis, keepdims, given = bind(name, args, kwargs)
        if not isinstance(operand, Symbol) or operand.index in self.weak:
            raise Unfusable(f"{name}() of a value that is not an array computed from the arguments "
                            "is not fused")
        dtype = accumulated(name, self.dtype_of(operand), given)
        if dtype == HALF or dtype.kind not in "biufc":
            raise Unfusable(f"{name}() in dtype {dtype} is not fused")
        return Reduced(Reduction(name, operand.index, axis, keepdims, dtype))

    def reduce_by(self, combine: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Reduced:
        """``combine.reduce(operand, **kwargs)`` (NumPy's ufunc or a gpufuncs kernel): one of the
        named reductions where NumPy's is one (``np.add.reduce`` is ``np.sum``, its axis 0
        by default), else a reduction by ``combine`` (see :func:`.reduction.combining`)."""
        kwargs = {"axis": 0, **kwargs}  # (ufunc.reduce's default, where np.sum's is all axes)
        if combine in NAMED:
            return self.reduce(NAMED[combine], inputs, kwargs)
        operand, axis, keepdims, given = bind("reduce", inputs, kwargs)
        name = getattr(combine, "__name__", repr(combine))
        if not isinstance(operand, Symbol) or operand.index in self.weak:
            raise Unfusable(f"{name}.reduce of a value that is not an array computed from the "
                            "arguments is not fused")
        if kernel_spec(combine) is None and not isinstance(combine, np.ufunc):
            raise Unfusable(f"{name}.reduce is not fused")
        found, dtype, start = combining(combine, self.dtype_of(operand), given)
        if dtype == HALF or dtype.kind not in "biufc":
            raise Unfusable(f"{name}.reduce in dtype {dtype} is not fused")
        return Reduced(Reduction("reduce", operand.index, axis, keepdims, dtype, found, start))

    def _where(self, condition: Any, a: Any, b: Any) -> Symbol:
        # np.where's result dtype: np.result_type of the two values (weak scalars as values).
        kinds = [self._resolution_dtype(v) for v in (a, b)]
        result = np.result_type(*[{int: 0, float: 0.0, complex: 0j}[k] if isinstance(k, type) else k
                                  for k in kinds])
        operands = [self._operand(condition, np.dtype(np.bool_)), self._operand(a, result),
                    self._operand(b, result)]
        return self._record("{1} if {0} else {2}", operands, (result,))

    def _clip(self, x: Any, lo: Any, hi: Any) -> Symbol:
        clip = np._core.umath.clip
        loop = clip.resolve_dtypes((*[self._resolution_dtype(v) for v in (x, lo, hi)], None))
        expression = "minimum(maximum({0}, {1}), {2})"
        operands = [self._operand(v, to) for v, to in zip((x, lo, hi), loop)]
        return self._record(expression, operands, loop[3:])

    def cast(self, symbol: Symbol, dtype: np.dtype) -> Symbol:
        return self._record("{0}", [Operand(symbol.index, self.dtype_of(symbol))], (dtype,))


def trace(func: Callable[..., Any], arguments: list[np.dtype | type]) -> Trace:
    """Run ``func`` on a :class:`Symbol` per argument (its dtype, or a Python type for a weak
    scalar) and return what it computed.

    Raises
    ------
    FusionError
        For anything fusion does not compile, naming ``func`` and the line.
    TypeError, OverflowError
        NumPy's own errors for the operations (no loop for the operands, a constant out of
        range), with the line.
    """
    tracer = _Tracer(arguments)
    symbols = [Symbol(tracer, i) for i in range(len(arguments))]
    try:
        returned = func(*symbols)
    except Unfusable as exc:
        raise FusionError(f"{_where_in(func, exc)}: {exc}") from None
    except (OverflowError, ValueError, TypeError) as exc:  # NumPy's, as the eager call raises
        base = next(c for c in (OverflowError, ValueError, TypeError) if isinstance(exc, c))
        raise base(f"{_where_in(func, exc)}: {exc}") from exc
    results = returned if isinstance(returned, tuple) else (returned,)
    reduced = [r for r in results if isinstance(r, Reduced)]
    if reduced:
        if len(reduced) != len(results):
            raise FusionError(f"{_name(func)}: returns reductions beside elementwise arrays; a "
                              "fused function returns either (fuse two functions for both)")
        tracer.trace.reductions = tuple(r.reduction for r in reduced)
        results = tuple(Symbol(tracer, r.reduction.symbol) for r in reduced)
    if not results or not all(isinstance(r, Symbol) for r in results):
        raise FusionError(f"{_name(func)}: a fused function returns arrays computed from its "
                          f"arguments (or a tuple of them), got {type(returned).__name__}")
    for r in results:
        if r.index in tracer.weak:
            raise FusionError(f"{_name(func)}: returns a Python scalar (an argument, or Python's "
                              "arithmetic on Python scalars), not an array")
        if not tracer.trace.depends[r.index]:
            raise FusionError(f"{_name(func)}: returns a value that depends on no argument")
    tracer.trace.outputs = tuple(r.index for r in results)
    return tracer.trace


def _name(func: Callable[..., Any]) -> str:
    return f"fused function {getattr(func, '__qualname__', func)!r}"


def _where_in(func: Callable[..., Any], exc: BaseException) -> str:
    """``fused function 'f', line N`` for the deepest line of ``func`` in ``exc``'s traceback."""
    line, tb = None, exc.__traceback__
    code = getattr(func, "__code__", None)
    while tb is not None:
        if tb.tb_frame.f_code is code:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f" ({code.co_filename}, line {line})" if line is not None else ""
    return f"{_name(func)}{where}"

