"""What the executor receives, and what the caller gets back, for one call signature.

Targets execute plain arrays of NumPy's own class; everything else a call may hold is turned into
such arrays here, once decided per call signature:

* array subclasses (masked arrays, ``np.matrix``, a user's own) are handed over as plain views,
  and new results are wrapped back the way NumPy wraps them (``__array_wrap__`` of the input
  NumPy picks, with the ``(ufunc, args, i)`` context that lets a masked array combine masks);
  an ``out=`` subclass is returned through its own ``__array_wrap__``, as NumPy does;
* a call whose selected loop is float16 (see :func:`.plan.resolve_loop`) reads its inputs as
  float16, as NumPy's float16 loop would, and a float16 result meant for an ``out=`` of another
  dtype is rounded to float16 before the cast (computed into a new array, then copied);
* longdouble, which no compiled loop reads or writes, is cast on the host: inputs to the loop
  chosen with ``dtype=``, results into a longdouble ``out=`` through a new array;
* 0-d input arrays are read as NumPy scalars (their loop is the scalars' one);
* 0-d results become NumPy scalars, as NumPy returns them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..spec import HALF
from ..targets import DEVICE, HOST, NUMPY_SCALAR, SCALAR, Arg, Plan
from ..targets.base import c_strides, copy_cast
from .args import describe

LONGDOUBLE = np.dtype(np.longdouble)
#: NumPy's priorities for an exact ndarray and for a scalar (``NPY_PRIORITY``, ``NPY_SCALAR_PRIORITY``).
_ARRAY_PRIORITY, _SCALAR_PRIORITY = 0.0, -1000000.0


@dataclass(frozen=True)
class Operands:
    """How the arguments of one call signature become the executor's operands.

    Attributes
    ----------
    plan : Plan
        The plan the target executes: the validated plan, with converted operands described.
    convert : tuple of (int, callable)
        Inputs to convert on every call, by index (lists to arrays, subclasses to plain views,
        anything to float16 for the float16 loop).
    outs_as_arrays : bool
        Whether ``out=`` holds subclasses, handed over as plain views.
    staged : bool
        Whether results go through new arrays of the result dtype before the cast into ``out=``.
    wrap : int or None
        The input whose ``__array_wrap__`` wraps new results, as NumPy picks it.
    """

    plan: Plan
    convert: tuple[tuple[int, Callable[[Any], Any]], ...] = ()
    outs_as_arrays: bool = False
    staged: bool = False
    wrap: int | None = None

    @property
    def plain(self) -> bool:
        """Whether every argument is handed over, and every result returned, as it is."""
        return not (self.convert or self.outs_as_arrays or self.staged) and self.wrap is None


def operands_for(plan: Plan, given: list[Any], values: list[Any], infos: list[Arg]) -> Operands:
    """The :class:`Operands` of a validated call: ``given`` are the inputs as passed, ``values``
    the same after array-likes were converted, ``infos`` their descriptions (``plan.inputs``)."""
    convert, described = [], []
    for i, (arg, value, info) in enumerate(zip(given, values, infos)):
        step = _conversion(info, value is not arg, plan.loop.inputs[i])
        if step is not None:
            convert.append((i, step))
            info = describe(step(arg))
        described.append(info)
    outs = plan.outs or ()
    outs_as_arrays = any(o.role == HOST and o.cls is not np.ndarray for o in outs)
    staged = all(o.role == HOST for o in outs) and any(
        _through_new_array(d, o) for d, o in zip(plan.result_dtypes, outs) if o is not None)
    executed = replace(plan, inputs=tuple(described),
                       outs=tuple(_plain(o) for o in outs) if outs_as_arrays else plan.outs)
    if staged:  # results go to new arrays of the result dtype, then are copied into out=
        # (with a mask, the executor writes them where it holds, into arrays stage() makes:
        # NumPy never runs the kernel on the elements a mask leaves out)
        fresh = tuple(Arg(HOST, np.ndarray, d, s, c_strides(s, d.itemsize))
                      for s, d in zip(plan.out_shapes, plan.result_dtypes))
        executed = replace(executed, outs=fresh if plan.where is not None else None)
    return Operands(executed, tuple(convert), outs_as_arrays, staged, wrap_index(given, infos))


def _through_new_array(result: np.dtype, out: Arg) -> bool:
    """Whether results reach ``out`` through a new array: float16 results meant for another
    dtype (NumPy rounds them to float16 first), and longdouble, which no compiled loop writes."""
    return (result == HALF and out.dtype != HALF) or out.dtype == LONGDOUBLE


def _conversion(info: Arg, listlike: bool, loop_input: np.dtype) -> Callable[[Any], Any] | None:
    """How input ``info`` is converted on every call (``None``: not at all), for a loop that
    reads it as ``loop_input``."""
    if info.role == DEVICE:
        return None  # device arrays are the device target's to read
    if loop_input == HALF and info.dtype != HALF:
        return _as_half  # NumPy casts the float16 loop's inputs to float16 first
    if info.dtype == LONGDOUBLE:  # (dtype= chose a loop) no compiled loop reads longdouble
        return functools.partial(np.asarray, dtype=loop_input)
    if info.dtype is int and loop_input.kind in "iu":
        # A Python int's value is not in the call signature: each call's must fit the loop's
        # integer type, and NumPy's scalar raises its own OverflowError where it does not.
        return loop_input.type
    if info.role == HOST and info.cls is np.ndarray and info.shape == () and info.dtype.kind in "biufc":
        # A 0-d array is a NumPy scalar of its dtype to NumPy's rules (NEP 50): read as one, it
        # runs the loop NumPy scalars and Python numbers already compiled, not one of its own.
        return _item
    if listlike or (info.role == HOST and info.cls is not np.ndarray):
        return np.asarray  # a plain view of a subclass; a new array of a list
    return None


def _item(value: np.ndarray) -> Any:
    return value[()]


def _as_half(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=HALF)


def _plain(arg: Arg) -> Arg:
    return replace(arg, cls=np.ndarray) if arg.role == HOST else arg


def wrap_index(given: list[Any], infos: list[Arg]) -> int | None:
    """The input whose ``__array_wrap__`` wraps new results, or ``None`` for none.

    NumPy's ``npy_find_array_wrap``: the first input of the highest ``__array_priority__`` among
    those with an ``__array_wrap__``, where an exact ndarray counts with priority 0 and scalars
    with -1e6 and neither wraps; a subclass of priority 0 is preferred to an exact ndarray.
    """
    found, priority = None, None
    for i, (value, info) in enumerate(zip(given, infos)):
        if info.role == DEVICE:
            continue
        if type(value) is np.ndarray or info.role in (SCALAR, NUMPY_SCALAR):
            mine = _ARRAY_PRIORITY if type(value) is np.ndarray else _SCALAR_PRIORITY
            if priority is None or priority < mine:
                found, priority = None, mine
            continue
        if getattr(type(value), "__array_wrap__", None) is None:
            continue  # lists and the like
        mine = float(getattr(value, "__array_priority__", 0.0))
        if priority is None or priority < mine or (mine == 0.0 and found is None):
            found, priority = i, mine
    return found


def apply_wrap(wrapper: Any, result: Any, context: tuple[Any, ...], return_scalar: bool) -> Any:
    """``wrapper.__array_wrap__(result, context, return_scalar)``, falling back to the older
    signatures without ``return_scalar`` and without ``context`` as NumPy does."""
    wrap = wrapper.__array_wrap__
    try:
        return wrap(result, context, return_scalar)
    except TypeError:
        pass
    try:
        wrapped = wrap(result, context)
    except TypeError:
        wrapped = wrap(result)
    return wrapped[()] if return_scalar and type(wrapped) is np.ndarray else wrapped


Finish = Callable[[tuple[Any, ...], tuple[Any, ...]], Any]


def finisher(ufunc: Any, plan: Plan, ops: Operands, nout: int) -> Finish:
    """``finish(results, inputs)``: the call's return value from the executor's new results."""
    # Like NumPy, each 0-d result is returned as a scalar (a device call's stay device arrays).
    on_host = all(a.role != DEVICE for a in plan.inputs)
    zero_d = tuple(on_host and not s for s in plan.out_shapes)
    scalar = all(zero_d)
    wrap = ops.wrap
    if wrap is not None:
        def wrapped(results: tuple[Any, ...], inputs: tuple[Any, ...]) -> Any:
            done = tuple(apply_wrap(inputs[wrap], r, (ufunc, inputs, i), r.ndim == 0)
                         for i, r in enumerate(results))
            return done[0] if nout == 1 else done
        return wrapped
    if nout > 1 and not any(zero_d):
        return _results  # (device calls and n-d results: the executor's tuple as it is)
    if nout > 1:
        return lambda results, inputs: tuple(r[()] if z else r for r, z in zip(results, zero_d))
    return _scalar_result if scalar else _array_result


def _results(results: tuple[Any, ...], inputs: tuple[Any, ...]) -> Any:
    return results


def _scalar_result(results: tuple[Any, ...], inputs: tuple[Any, ...]) -> Any:
    return results[0][()]  # like NumPy: a 0-d result is returned as a NumPy scalar


def _array_result(results: tuple[Any, ...], inputs: tuple[Any, ...]) -> Any:
    return results[0]


def finish_out(ufunc: Any, outs: tuple[Any, ...], inputs: tuple[Any, ...]) -> Any:
    """What a call with ``out=`` returns: each ``out`` array, through its own ``__array_wrap__``
    where it is a subclass (NumPy's rule: a masked ``out`` takes the inputs' combined mask)."""
    done = tuple(apply_wrap(o, o, (ufunc, (*inputs, *outs), i), False)
                 if isinstance(o, np.ndarray) and type(o) is not np.ndarray else o
                 for i, o in enumerate(outs))  # device arrays are returned as they are
    return done[0] if len(done) == 1 else done


def stage(executor: Callable[..., tuple[Any, ...]], plan: Plan, inputs: tuple[Any, ...],
          outs: tuple[Any, ...], where: Any, stream: Any) -> None:
    """Run into new arrays of the result dtype and cast them into ``outs`` where ``where``
    holds (the mask broadcast over each output's core dimensions)."""
    if where is True:
        results = executor(inputs, None, True, stream)
    else:  # computed only where the mask holds (see operands_for)
        results = tuple(np.empty(s, d) for s, d in zip(plan.out_shapes, plan.result_dtypes))
        executor(inputs, results, where, stream)
    for out, result, core in zip(outs, results, plan.cores[len(plan.inputs):]):
        mask = where if where is True else np.asarray(where)[(..., *(np.newaxis,) * core)]
        copy_cast(out, result, mask)
