"""Validation: a call's arguments and keywords into a :class:`~gpufuncs.targets.Plan`.

Everything here raises before anything is written, with the kernel's name in the message, and
runs once per call signature: its result is cached by the caller, so clarity wins over speed.
The rules are NumPy's (broadcasting, NEP 50 scalars, casting, ``out=`` shapes) applied to the
kernel's loops as NumPy's type resolver selects among a ufunc's loops: the declared loops, each
with a float32 argument preceded by its float16 twin that computes in it (NumPy's own float16
loops compute in float32). One deliberate difference: the float16 twins are candidates only
for calls with a float16 input, where NumPy would compute an int8 or a bool in float16 (see
docs/semantics.md).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..spec import HALF, KernelSpec, Loop
from ..targets import DEVICE, HOST, SCALAR, Arg, Plan, check_target
from ..targets.base import c_strides, is_contiguous
from .args import describe

CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
ORDERS = ("K", "A", "C", "F")
#: Keywords of every call, with their defaults (``target`` options such as ``stream`` aside).
KEYWORDS = {"out": None, "where": True, "dtype": None, "casting": "same_kind", "order": "K",
            "target": "auto"}
_UNSUPPORTED_KINDS = {"O": "object", "U": "string", "S": "bytes", "M": "datetime",
                      "m": "timedelta", "V": "void/structured"}


@dataclass
class Call:
    """One call's arguments, sorted out (not yet validated against the kernel's loops)."""

    inputs: list[Any]
    sizes: dict[str, int]
    outs: tuple[Any, ...] | None
    out_positional: bool
    where: Any = True
    dtype: Any = None
    casting: str = "same_kind"
    order: str = "K"
    target: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)


def parse_call(spec: KernelSpec, args: tuple[Any, ...], kwargs: dict[str, Any],
               options: tuple[str, ...]) -> Call:
    """Split positional arguments into inputs, output-only core sizes and positional outputs,
    and check the keywords (``options``: the keywords some target accepts, like ``stream``)."""
    unknown = [k for k in kwargs if k not in KEYWORDS and k not in options]
    if unknown:
        raise TypeError(f"{spec.name}() got unsupported keyword argument(s): {', '.join(sorted(unknown))}")
    check_target(spec.name, kwargs.get("target", "auto"))
    dims = spec.layout.output_only_dims if spec.layout else ()
    least, most = spec.nin + len(dims), spec.nin + len(dims) + spec.nout
    if not least <= len(args) <= most:
        names = ", ".join((*spec.input_names, *dims))
        arguments = "argument" if least == 1 else "arguments"
        outputs = "output array" if spec.nout == 1 else "output arrays"
        raise TypeError(f"{spec.name}() takes {least} positional {arguments} ({names}) and up to "
                        f"{spec.nout} {outputs}, got {len(args)}")
    sizes = {name: _size(spec, name, value) for name, value in zip(dims, args[spec.nin:least])}
    positional = args[least:]
    if positional and "out" in kwargs:  # even out=None, as NumPy
        raise TypeError(f"{spec.name}: cannot specify 'out' as both a positional and keyword argument")
    outs = normalize_out(spec, positional, True) if positional else normalize_out(spec, kwargs.get("out"))
    given = {k: v for k, v in kwargs.items() if k in KEYWORDS and k != "out"}
    return Call(inputs=list(args[: spec.nin]), sizes=sizes, outs=outs, out_positional=bool(positional),
                options={k: v for k, v in kwargs.items() if k in options}, **given)


def _size(spec: KernelSpec, name: str, value: Any) -> int:
    try:
        if isinstance(value, bool | np.bool_):
            raise TypeError
        size = operator.index(value)
    except TypeError:
        if getattr(value, "ndim", 0) and hasattr(value, "dtype"):  # an output given before the size
            order = ", ".join((*spec.input_names, name, "out"))
            raise ValueError(f"{spec.name}: {name} must be a non-negative integer, got an array "
                             f"({type(value).__name__}) of shape {tuple(value.shape)} and dtype "
                             f"{value.dtype} (the arguments are {spec.name}({order}))") from None
        raise ValueError(f"{spec.name}: {name} must be a non-negative integer, got {value!r}") from None
    if size < 0:
        raise ValueError(f"{spec.name}: {name} must be a non-negative integer, got {size}")
    return size


def normalize_out(spec: KernelSpec, out: Any, positional: bool = False) -> tuple[Any, ...] | None:
    """``out=`` as a tuple of ``nout`` entries, or ``None`` when every entry is ``None``.

    As NumPy: an entry ``None`` is an output to allocate (``np.modf(x, out=(o, None))``);
    positional outputs may be fewer than ``nout`` (the rest are allocated); a keyword ``out=``
    of a kernel with several outputs must be a tuple with one entry per output.
    """
    if out is None:
        return None
    if positional:
        outs = (*out, *(None,) * (spec.nout - len(out)))
    elif isinstance(out, tuple):
        outs = out
    elif spec.nout > 1:
        raise TypeError(f"{spec.name}: out= must be a tuple of {spec.nout} entries (an array or "
                        f"None each) for its {spec.nout} outputs, got {type(out).__name__}")
    else:
        outs = (out,)
    if len(outs) != spec.nout:
        raise ValueError(f"{spec.name}: out must have {spec.nout} array(s), got {len(outs)}")
    if all(o is None for o in outs):
        return None
    return outs


def describe_out(spec: KernelSpec, out: Any) -> Arg:
    """The :class:`Arg` of an ``out=`` array (``TypeError`` for anything else)."""
    info = describe(out)
    if info is None or not info.is_array:
        raise TypeError(f"{spec.name}: out= must be an array, got {type(out).__name__}")
    return info


def describe_input(spec: KernelSpec, value: Any, index: int) -> tuple[Arg, Any]:
    """The :class:`Arg` of input ``index`` and the value to compute with (lists become arrays)."""
    info = describe(value)
    if info is None:
        value = np.asarray(value)
        info = describe(value)
    _check_kind(spec, info.dtype, f"input {spec.input_names[index]!r}")
    return info, value


def _check_kind(spec: KernelSpec, dtype: Any, role: str) -> None:
    if isinstance(dtype, type):  # a weak Python scalar
        return
    if dtype.kind not in "biufc":
        kind = _UNSUPPORTED_KINDS.get(dtype.kind, dtype.kind)
        raise TypeError(f"{spec.name}: unsupported {kind} dtype {dtype} for {role}; "
                        f"loops: {', '.join(loop_types(spec))}")


def loop_types(spec: KernelSpec) -> list[str]:
    """NumPy's loop strings, e.g. ``['e->e', 'f->f', 'd->d']`` (float16 ones compute in float32)."""
    return [lp.types for lp in spec.selectable]


#: Simplified kind order of NumPy's ``should_use_min_scalar_weak_literals``.
_KIND_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
#: A Python complex counts as a float there: ``float32_array * 1j`` is complex64 (NEP 50).
_PYTHON_KIND = {bool: "b", int: "u", float: "f", complex: "f"}
#: The dtype a Python scalar has where it is not weak (every input a Python scalar, or one of a
#: kind above every array's): NumPy's default for its type.
_DEFAULT = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: np.dtype(np.float64),
            complex: np.dtype(np.complex128)}


def weak_scalars(dtypes: list[Any]) -> bool:
    """Whether the Python scalars among ``dtypes`` are weak (NEP 50), as NumPy decides it for
    a ufunc's loop search: some input is not a Python scalar, and no Python scalar is of a
    higher kind (bool < integer < float < complex) than every such input. ``bool`` is never
    weak (NumPy reads it as ``np.bool_``)."""
    arrays = [_KIND_ORDER[d.kind] for d in dtypes if not isinstance(d, type)]
    scalars = [_KIND_ORDER[_PYTHON_KIND[d]] for d in dtypes if isinstance(d, type) and d is not bool]
    return bool(arrays) and max(arrays) >= max(scalars, default=-1)


def checked_weak(dtypes: list[Any]) -> bool:
    """Whether Python scalars are weak where a loop is given (``dtype=``) and where the casts
    into the selected loop are checked: beside other inputs, under every casting rule; a lone
    input is checked as its default dtype, as NumPy does (see docs/semantics.md)."""
    return len(dtypes) > 1


def operand_dtype(dtype: Any, weak: bool) -> Any:
    """The dtype an input casts from: its own, a Python type where it is weak, else the Python
    type's default dtype (see :func:`weak_scalars`)."""
    if not isinstance(dtype, type) or (weak and dtype is not bool):
        return dtype
    return _DEFAULT[dtype]


def can_cast_input(dtype: Any, to: np.dtype, casting: str) -> bool:
    """Whether an input of ``dtype`` (a weak Python type, or a dtype) fits a loop's ``to``:
    NumPy's ``can_cast_pyscalar_scalar_to`` for weak scalars (an int goes to any number, a
    float to floating and complex types, a complex to complex), ``np.can_cast`` otherwise."""
    if not isinstance(dtype, type):
        return np.can_cast(dtype, to, casting)
    if to.kind == "c":
        return True
    if to.kind == "f":
        return dtype is not complex or casting == "unsafe"
    if to.kind in "iu":
        return dtype is int or casting == "unsafe"
    return np.can_cast(_DEFAULT[dtype], to, casting)


def resolve_loop(spec: KernelSpec, dtypes: list[Any], requested: Any, casting: str = "same_kind") -> Loop:
    """The loop a call with inputs of ``dtypes`` (NumPy dtypes, or Python types for scalars)
    runs, as NumPy's type resolver picks it for a ufunc of these loops: the first loop that
    every input casts to safely (NEP 50 for Python scalars), or, with ``dtype=``, the first
    whose outputs are of that dtype and inputs cast safely, else the loop of that dtype
    throughout (NumPy's ``type_tuple_type_resolver``). float16 twins (see
    :func:`gpufuncs.spec.half_loops`) are candidates only where a float16 input takes one of
    their float16 places (or ``dtype=float16`` asks for their result): NumPy would compute an
    int8 in float16, and a Python float beside a float16 array, in another place of a mixed
    loop, would be rounded to float16.
    ``TypeError`` when there is none (longdouble has none, as in any ufunc without one)."""
    wanted = None if requested is None else _requested(spec, requested)
    weak = weak_scalars(dtypes)  # NumPy's should_use_min_scalar_weak_literals, dtype= or not
    dtypes = [operand_dtype(d, weak) for d in dtypes]
    halves = [not isinstance(d, type) and d == HALF for d in dtypes]
    candidates = [lp for lp in spec.selectable if lp.runs is None or wanted == HALF
                  or any(h and t == HALF for h, t in zip(halves, lp.inputs))]
    strict = casting if casting in ("no", "equiv") else "safe"
    fits = [lp for lp in candidates if _fits(dtypes, lp, strict)
            and (wanted is None or all(d == wanted for d in lp.outputs))]
    if not fits and wanted is not None:
        # NumPy's legacy dtype= fallback: the loop of every operand that dtype, its inputs then
        # cast under the call's casting (checked with the rest: check_casting)
        fits = [lp for lp in candidates if all(d == wanted for d in (*lp.inputs, *lp.outputs))]
    if not fits:
        shown = ", ".join(d.__name__ if isinstance(d, type) else str(d) for d in dtypes)
        asked = "" if wanted is None else f" with dtype={wanted}"
        raise TypeError(f"{spec.name}: no loop for inputs ({shown}){asked} under casting "
                        f"{strict if requested is None else casting!r}; loops: "
                        f"{', '.join(loop_types(spec))} (pass dtype= to choose one)")
    return fits[0]


def _fits(dtypes: list[Any], loop: Loop, casting: str) -> bool:
    return all(can_cast_input(d, to, casting) for d, to in zip(dtypes, loop.inputs))


def _requested(spec: KernelSpec, requested: Any) -> np.dtype:
    """The dtype that ``dtype=`` names (``TypeError`` if it is not one)."""
    try:
        return np.dtype(requested)
    except TypeError:
        raise TypeError(f"{spec.name}: dtype={requested!r} is not a dtype; loops: "
                        f"{', '.join(loop_types(spec))}") from None


def check_casting(spec: KernelSpec, dtypes: list[Any], loop: Loop, out_dtypes: list[np.dtype | None],
                  casting: str) -> None:
    """Raise ``TypeError`` if an input's cast to the selected ``loop`` or a result's cast into
    its ``out=`` (``None``: allocated) breaks ``casting``."""
    if casting not in CASTINGS:
        raise ValueError(f"{spec.name}: casting must be one of {CASTINGS}, got {casting!r}")
    weak = checked_weak(dtypes)
    for i, (dt, to) in enumerate(zip(dtypes, loop.inputs)):
        dt = operand_dtype(dt, weak)
        if not can_cast_input(dt, to, casting):
            shown = dt.__name__ if isinstance(dt, type) else dt
            raise TypeError(f"{spec.name}: cannot cast input {spec.input_names[i]!r} "
                            f"from {shown} to the {loop.types} loop's {to} with casting={casting!r}")
    for result, odt in zip(loop.outputs, out_dtypes):
        if odt is not None and not np.can_cast(result, odt, casting):
            raise TypeError(f"{spec.name}: cannot cast the {result} result to out= dtype "
                            f"{odt} with casting={casting!r}")


def build_plan(spec: KernelSpec, call: Call, inputs: list[Arg], outs: list[Arg | None] | None,
               where: Arg | None) -> tuple[Plan, Fresh]:
    """Validate dtypes, casting, order and shapes of a call; return its :class:`Plan` and the
    outputs the call allocates itself (see :func:`fresh_outputs`). ``outs``: the ``out=``
    entries, ``None`` for one to allocate."""
    dtypes = [a.dtype for a in inputs]
    if call.casting not in CASTINGS:
        raise ValueError(f"{spec.name}: casting must be one of {CASTINGS}, got {call.casting!r}")
    loop = resolve_loop(spec, dtypes, call.dtype, call.casting)
    for value, dtype, to in zip(call.inputs, dtypes, loop.inputs):
        if dtype is int and to.kind in "iu":
            to.type(value)  # NumPy converts a Python int first: its OverflowError before any other
    check_casting(spec, dtypes, loop, [None if o is None else o.dtype for o in outs or ()],
                  call.casting)
    if call.order not in ORDERS:
        raise ValueError(f"{spec.name}: order must be one of {ORDERS}, got {call.order!r}")
    loop_shape, out_shapes, core = _shapes(spec, [a.shape for a in inputs], outs, call.sizes,
                                           where.shape if where is not None else ())
    layout = spec.layout
    cores = tuple(len(d) for d in (*layout.inputs, *layout.outputs)) if layout else \
        (0,) * (spec.nin + spec.nout)
    plan = Plan(loop=loop, loop_shape=loop_shape,
                out_shapes=out_shapes, core_sizes=core, order=_alloc_order(call.order, inputs),
                inputs=tuple(inputs), outs=tuple(outs) if outs else None, where=where, cores=cores,
                device=call.options.get("device"))
    return fresh_outputs(spec, plan)


#: Per output, ``(shape, dtype, order)`` of a new array the call allocates before the executor
#: runs, ``None`` for an ``out=`` array; ``None`` as a whole when the executor allocates.
Fresh = tuple[tuple[tuple[int, ...], np.dtype, str] | None, ...] | None


def fresh_outputs(spec: KernelSpec, plan: Plan) -> tuple[Plan, Fresh]:
    """The plan as the executor runs it, with the outputs dispatch allocates on each call
    described as ``out=`` arrays, and what to allocate.

    Two kinds of calls allocate their outputs here, as new host arrays in ``plan.order``:

    * ``out=`` with some entries ``None`` (``out=(o1, None)``): NumPy allocates those;
    * a gufunc whose allocated outputs have ``order='F'`` over more than one dimension (NumPy
      lays out the whole output, core dimensions included, in Fortran order), which the flat
      loops, writing C-contiguous rows, do not give: given as ``out=``, the call takes a path
      that writes any layout.

    Calls with device arrays leave allocation to their target (a device gufunc's outputs have
    the target's layout), and cannot leave some outputs to allocate (``TypeError``).
    """
    on_device = any(a.role == DEVICE for a in (*plan.inputs, *(o for o in plan.outs or () if o)))
    if plan.outs is not None and None in plan.outs:
        if on_device:
            raise TypeError(f"{spec.name}: out= with some entries None is not supported with device "
                            "arrays; give every output, or none")
        missing = [o is None for o in plan.outs]
    elif (spec.layout is not None and plan.outs is None and plan.order == "F" and not on_device
          and any(len(s) > 1 for s in plan.out_shapes)):
        missing = [True] * spec.nout
    else:
        return plan, None
    fresh = tuple((shape, dtype, plan.order) if new else None
                  for shape, dtype, new in zip(plan.out_shapes, plan.result_dtypes, missing))
    outs = tuple(_new_array(*f) if f is not None else o for f, o in zip(fresh, plan.outs or fresh))
    return replace(plan, outs=outs), fresh


def _new_array(shape: tuple[int, ...], dtype: np.dtype, order: str) -> Arg:
    """The :class:`Arg` of ``np.empty(shape, dtype, order=order)``."""
    if order == "F":
        strides = c_strides(shape[::-1], dtype.itemsize)[::-1]
    else:
        strides = c_strides(shape, dtype.itemsize)
    return Arg(HOST, np.ndarray, dtype, shape, strides)


def _shapes(spec: KernelSpec, shapes: list[tuple[int, ...]], outs: list[Arg] | None,
            sizes: dict[str, int], where: tuple[int, ...]
            ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...], dict[str, int]]:
    layout = spec.layout
    in_cores = layout.inputs if layout else ((),) * spec.nin
    out_cores = layout.outputs if layout else ((),)
    core = dict(sizes)
    loops = [_bind_core(spec, shape, dims, core, f"input {name!r}")
             for shape, dims, name in zip(shapes, in_cores, spec.input_names)]
    try:
        loop_shape = np.broadcast_shapes(*loops, where)  # like NumPy, where= broadcasts too
    except ValueError:
        shown = " ".join(str(tuple(s)) for s in (*shapes, *([where] if where else [])))
        raise ValueError(f"{spec.name}: operands could not be broadcast together with "
                         f"shapes {shown}") from None
    for o, dims in zip(outs or (), out_cores):
        if o is None:
            continue
        # Like NumPy, inputs may broadcast up to out's loop shape, never the reverse.
        out_loop = _bind_core(spec, o.shape, dims, core, "out=")
        if _broadcasts_to(loop_shape, out_loop):
            loop_shape = out_loop
    out_shapes = tuple(loop_shape + tuple(core[d] for d in dims) for dims in out_cores)
    for o, want in zip(outs or (), out_shapes):
        if o is not None and o.shape != want:
            raise ValueError(f"{spec.name}: out= has shape {o.shape}, the result has shape {want}")
    return loop_shape, out_shapes, core


def _bind_core(spec: KernelSpec, shape: tuple[int, ...], dims: tuple[str, ...], core: dict[str, int],
               role: str) -> tuple[int, ...]:
    if len(shape) < len(dims):
        raise ValueError(f"{spec.name}: {role} has {len(shape)} dimension(s), the layout "
                         f"{spec.layout.text!r} needs at least {len(dims)}")
    split = len(shape) - len(dims)
    for d, size in zip(dims, shape[split:]):
        if core.setdefault(d, size) != size:
            raise ValueError(f"{spec.name}: core dimension {d!r} of {role} has size {size}, "
                             f"expected {core[d]}")
    return tuple(shape[:split])


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _alloc_order(order: str, inputs: list[Arg]) -> str:
    if order in "CF":
        return order
    arrays = [a for a in inputs if a.is_array and len(a.shape) > 1]
    f_only = arrays and all(_is_f_only(a) for a in arrays)
    return "F" if f_only else "C"


def _is_f_only(a: Arg) -> bool:
    """F-contiguous and not C-contiguous (both hold for arrays with one non-unit dimension)."""
    item = a.dtype.itemsize
    return is_contiguous(a.shape, a.strides, item, "F") and not is_contiguous(a.shape, a.strides, item)


def where_arg(spec: KernelSpec, where: Any) -> tuple[Arg | None, Any]:
    """The :class:`Arg` of a ``where=`` mask and the mask to use (``None``: write everywhere).

    Like NumPy: a boolean array is used as it is, other arrays must cast safely to bool, and
    anything else (a list, a Python bool, a subclass) is converted with
    ``np.asarray(where, dtype=bool)``.
    """
    if where is True:
        return None, True
    info = describe(where)
    if info is None or info.role == SCALAR:
        where = np.asarray(where, dtype=bool)
        info = describe(where)
    if info.dtype != np.bool_ or (info.role == HOST and info.cls is not np.ndarray):
        if not np.can_cast(info.dtype, np.bool_, "safe"):
            raise TypeError(f"{spec.name}: cannot cast where= from dtype {info.dtype} to bool "
                            "according to the rule 'safe'")
        where = np.asarray(where, dtype=bool)  # a subclass (a masked array) as its plain data
        info = describe(where)
    return info, where
