"""``gf.fuse``: a function of arrays, written with NumPy and gpufuncs kernels, as one kernel.

A fused function is traced once per combination of its arguments' dtypes (see :mod:`.trace`):
each NumPy ufunc, operator and gpufuncs kernel it applies is recorded with the loop dtypes that
NumPy's eager call would use, and the record becomes one scalar function (see :mod:`.emit`),
compiled as an elementwise gpufuncs kernel of exactly those types. Calls then go through that
kernel: broadcasting, ``out=``, every target, device arrays kept on their device, one pass over
memory with no temporaries.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dispatch import Kernel
from ..dispatch.args import arg_key, describe, keep, lookup
from ..errors import FusionError
from ..spec import KernelSpec, parse_loop
from .emit import reduction_function, scalar_function, signature
from .reduction import ReducingPart, Reduction
from .trace import WEAK, Trace, trace

#: Keywords of a call that go to the fused kernel (the function itself takes none of its own).
_CALL_KEYWORDS = frozenset({"out", "target", "stream", "device", "order"})
_TARGET = frozenset({"target"})


@dataclass(frozen=True)
class _Part:
    """A kernel computing some of the results (``positions`` among them) from some of the
    arguments (``arguments``): the results that depend on the same arguments, which share
    their broadcast shape, as in the eager call."""

    kernel: Kernel
    arguments: tuple[int, ...]
    positions: tuple[int, ...]


@dataclass(frozen=True)
class _Compiled:
    parts: tuple[_Part, ...]
    int_checks: frozenset[tuple[int, np.dtype]]
    nout: int
    reductions: tuple[ReducingPart, ...] = ()  # where the function returns reductions


class Fused:
    """A function fused into one elementwise kernel per combination of argument dtypes.

    Call it as the function, with arrays (NumPy, device arrays, lists), NumPy scalars and
    Python scalars, plus ``out=``, ``target=`` (and ``stream=``, ``device=``, ``order=``) as for
    any kernel. ``kernels`` lists what has been compiled so far.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        if not inspect.isfunction(func):
            raise FusionError(f"gf.fuse takes a Python function, got {type(func).__name__}")
        parameters = inspect.signature(func).parameters.values()
        if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters):
            raise FusionError(f"fused function {func.__qualname__!r}: *args, **kwargs and "
                              "keyword-only parameters are not fused")
        functools.update_wrapper(self, func)
        self.func = func
        self._signature = inspect.signature(func)
        self._nargs = len(self._signature.parameters)
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}
        self._lock = threading.Lock()
        #: The plans of calls that return one reduction, by the target and each argument's key
        #: (see :meth:`ReducingPart.planned`): such a call's Python was most of a small one.
        self._planned: dict[tuple[Any, ...], Callable[[tuple[Any, ...]], Any]] = {}

    @property
    def kernels(self) -> dict[tuple[Any, ...], Kernel]:
        """The kernel compiled for each combination of argument dtypes seen (a Python scalar
        argument is keyed by its type: ``float`` beside a float32 array stays float32). Where
        the results depend on different arguments (and so may differ in shape), one kernel
        per such group: the first is listed."""
        return {key: found.parts[0].kernel for key, found in self._compiled.items() if found.parts}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = None
        if len(args) == self._nargs and (not kwargs or kwargs.keys() == _TARGET):
            key = (kwargs.get("target"), *map(arg_key, args))
            planned = lookup(self._planned, key)
            if planned is not None:
                return planned(args)
        if not kwargs:
            options: dict[str, Any] = {}
        elif kwargs.keys() <= _CALL_KEYWORDS:  # (the commonest: target= alone; a dict of its own)
            options, kwargs = kwargs, {}
        else:
            options = {k: kwargs.pop(k) for k in _CALL_KEYWORDS & kwargs.keys()}
        if kwargs or len(args) != self._nargs:
            args = tuple(self._signature.bind(*args, **kwargs).arguments.values())  # TypeError as Python's
        found = self.checked(args)
        if found.reductions:
            result = _reduce(found.reductions, args, options)
            if key is not None and len(found.reductions) == 1 and not found.int_checks:
                planned = found.reductions[0].planned(args, options)
                if planned is not None:
                    keep(self._planned, key, planned)
            return result
        if len(found.parts) == 1 and len(found.parts[0].arguments) == len(args):
            return found.parts[0].kernel(*args, **options)
        return self._call_parts(found, args, options)

    def _call_parts(self, found: _Compiled, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        out = options.pop("out", None)
        outs = out if isinstance(out, tuple) else (out,) * (found.nout == 1) or (None,) * found.nout
        results: list[Any] = [None] * found.nout
        for part in found.parts:
            given = tuple(outs[k] for k in part.positions)
            computed = part.kernel(*(args[i] for i in part.arguments),
                                   **({"out": given} if any(o is not None for o in given) else {}),
                                   **options)
            computed = computed if isinstance(computed, tuple) else (computed,)
            for k, value in zip(part.positions, computed):
                results[k] = value
        return results[0] if found.nout == 1 else tuple(results)

    def checked(self, args: tuple[Any, ...]) -> _Compiled:
        """What a call with ``args`` runs, its Python int arguments checked as NumPy checks them."""
        found = self._compiled_for(args)
        for index, dtype in found.int_checks:
            _check_int(args[index], dtype)
        return found

    def _compiled_for(self, args: tuple[Any, ...]) -> _Compiled:
        """What calls with arguments of ``args``' dtypes run (traced on the first such call)."""
        key = tuple(map(_dtype_of, args))
        return self._compiled.get(key) or self._compile(key)

    def _compile(self, key: tuple[Any, ...]) -> _Compiled:
        with self._lock:
            found = self._compiled.get(key)
            if found is None:
                traced = trace(self.func, list(key))
                if traced.reductions:
                    found = self._compiled[key] = _Compiled((), frozenset(traced.int_checks),
                                                            len(traced.outputs), self._reducing(traced))
                    return found
                groups: dict[frozenset[int], list[int]] = {}
                for position, symbol in enumerate(traced.outputs):
                    groups.setdefault(traced.depends[symbol], []).append(position)
                parts = tuple(self._part(traced, tuple(sorted(depends)), tuple(positions))
                              for depends, positions in groups.items())
                found = self._compiled[key] = _Compiled(parts, frozenset(traced.int_checks),
                                                        len(traced.outputs))
        return found

    def _reducing(self, traced: Trace) -> tuple[ReducingPart, ...]:
        parts, names = [], tuple(self._signature.parameters)
        for r in traced.reductions:
            arguments = tuple(sorted(traced.depends[r.symbol]))
            part = ReducingPart(r, arguments, [traced.dtypes[i] for i in arguments], self.func.__name__,
                                tuple(names[i] for i in arguments),
                                functools.partial(reduction_function, traced, self.func, arguments, r))
            part.values = self._kernel(traced, arguments, (r.symbol,))
            parts.append(part)
        return tuple(parts)

    def reduced(self, *args: Any) -> tuple[tuple[Reduction, Any], ...]:
        """For a function that returns reductions: each reduction and the values it reduces in a
        call with ``args`` (computed by an elementwise kernel on ``cpu``, NumPy arrays), as the
        testing module bounds a compensated sum's distance from NumPy's by them."""
        found = self._compiled_for(args)
        return tuple((part.reduction, part.values(*(args[i] for i in part.arguments), target="cpu"))
                     for part in found.reductions)

    def _part(self, traced: Trace, arguments: tuple[int, ...], positions: tuple[int, ...]) -> _Part:
        outputs = tuple(traced.outputs[k] for k in positions)
        return _Part(self._kernel(traced, arguments, outputs), arguments, positions)

    def _kernel(self, traced: Trace, arguments: tuple[int, ...], outputs: tuple[int, ...]) -> Kernel:
        """The elementwise kernel of ``traced``'s symbols ``outputs`` of the ``arguments``."""
        body = scalar_function(traced, self.func, arguments, outputs)
        names = tuple(self._signature.parameters)
        spec = KernelSpec(name=self.func.__name__, pyfunc=body,
                          loops=(parse_loop(signature(traced, arguments, outputs), len(arguments), False),),
                          layout=None, reference=None, tolerances={},
                          doc=inspect.getdoc(self.func) or "", arg_names=tuple(names[i] for i in arguments))
        return Kernel(spec)

    def result_dtypes(self, *args: Any) -> tuple[np.dtype, ...]:
        """The dtypes of the results of a call with arguments like ``args``: NumPy's, as the
        eager call would give them (traced; compiled at the first call)."""
        found = self._compiled_for(args)
        if found.reductions:
            return tuple(part.reduction.dtype for part in found.reductions)
        dtypes: list[Any] = [None] * found.nout
        for part in found.parts:
            for k, dtype in zip(part.positions, part.kernel.spec.loops[0].outputs):
                dtypes[k] = dtype
        return tuple(dtypes)

    def source(self, *args: Any) -> str:
        """The scalar function(s) that calls with arguments like ``args`` run (compiled first)."""
        found = self._compiled_for(args)
        if found.reductions:
            return "\n\n".join(part.source() for part in found.reductions)
        return "\n\n".join(part.kernel.spec.pyfunc.source for part in found.parts)

    def __repr__(self) -> str:
        return f"<gpufuncs fused function {self.func.__qualname__!r}>"


def _reduce(parts: tuple[ReducingPart, ...], args: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """The returned reductions, each written into its ``out=`` array where one is given
    (checked before any is computed: a tuple, an entry per result, where there are several)."""
    out = options.pop("out", None)
    if len(parts) == 1:
        outs = out if isinstance(out, tuple) else (out,)
    elif out is None:
        outs = (None,) * len(parts)
    elif isinstance(out, tuple):
        outs = out
    else:  # (NumPy's TypeError for a ufunc of several outputs given one array)
        raise TypeError(f"{parts[0].name}: out= must be a tuple of {len(parts)} entries (an array or "
                        f"None each) for its {len(parts)} results, got {type(out).__name__}")
    if len(outs) != len(parts):
        raise ValueError(f"out= has {len(outs)} arrays for {len(parts)} results")
    if len(parts) == 1:
        return parts[0](args, {**options, "out": outs[0]})
    return tuple(part(args, {**options, "out": o}) for part, o in zip(parts, outs))


def _dtype_of(value: Any) -> np.dtype | type:
    """How tracing types ``value``: its dtype, or its Python type for a weak scalar."""
    cls = type(value)
    if cls is bool:
        return np.dtype(np.bool_)
    if cls in WEAK:
        return cls
    dtype = getattr(value, "dtype", None)
    if not isinstance(dtype, np.dtype):
        arg = describe(value)
        dtype = arg.dtype if arg is not None else np.asarray(value).dtype
    # Byte order is storage: NumPy computes a byte-swapped array in the native loop, as the
    # fused kernel's call casts it.
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _check_int(value: Any, dtype: np.dtype) -> None:
    """NumPy's refusal of a Python int its loop dtype cannot hold (NEP 50)."""
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise OverflowError(f"Python integer {value} out of bounds for {dtype}")


def fuse(func: Callable[..., Any]) -> Fused:
    """Fuse a function of arrays into one elementwise kernel on every target.

    The function may apply gpufuncs elementwise kernels, NumPy's elementwise ufuncs (``np.exp``,
    ``np.sqrt``, ``np.maximum``, comparisons, ...), ``np.where``, ``np.clip``, arithmetic
    operators, ``astype`` and constants to its arguments. Each call computes what the function
    run eagerly with NumPy computes, with NumPy's dtypes for every intermediate and the result,
    in one pass over memory.

    Parameters
    ----------
    func : function
        The function. Its parameters are positional; each argument may be an array (host or
        device) or a scalar.

    Returns
    -------
    Fused
        The fused function: call it as ``func``, with ``out=``, ``target=`` and the device
        options of any kernel besides.

    Raises
    ------
    FusionError
        At the first call, for anything that cannot be fused, naming the function and the line.

    Examples
    --------
    >>> import numpy as np, gpufuncs as gf
    >>> @gf.fuse
    ... def chain(x, mu, s, w):
    ...     return gf.clamp(gf.gaussian(x, mu, s) * w + np.exp(-x), 0, 1)
    >>> x = np.linspace(0, 3, 4, dtype=np.float32)
    >>> chain(x, 0.0, 1.0, 2.0).dtype
    dtype('float32')
    """
    return Fused(func)
