"""The public callable of every kernel, and the one call path.

Every call, on every target, with or without keywords, goes

    Kernel.__call__ -> call signature (args.keyer_of, args.keywords_key)
                    -> ResolvedCall (cached) -> target executor

A call signature that has not been seen is validated completely (:mod:`.plan`) into a
:class:`~gpufuncs.targets.Plan`, for which the target prepares an executor; both are kept in a
:class:`ResolvedCall`. A repeated call builds its key, finds the resolved call and runs it: take
the operands, check that ``out=`` is writable, execute (the executor allocates outputs, checks
overlap with ``out=`` and launches), and finish the result as NumPy would.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..spec import KernelSpec, Loop
from ..targets import (
    DEVICE,
    TARGET_NAMES,
    CudaUnavailableError,
    Plan,
    auto_host_target,
    get_target,
)
from ..targets.base import library_of
from . import axes, lazy, methods
from .args import (
    ABSENT,
    TABLE_SIZE,
    WEAK_SCALARS,
    defer,
    device_arrays_of,
    first_key,
    keep,
    keyer_of,
    keywords_key,
    keywords_of,
    overrides_array_ufunc,
    overriding,
    refuse_target,
)
from .interop import finish_gufunc, gufunc_keywords, refuse_lazy_out
from .operands import Operands, _array_result, _results, finish_out, finisher, operands_for, stage
from .plan import (
    KEYWORDS,
    Call,
    Fresh,
    build_plan,
    describe_input,
    describe_out,
    loop_types,
    parse_call,
    resolve_loop,
    where_arg,
)

#: Resolved calls kept per kernel and target asked for (one per call signature); a full table is emptied.
RESOLVED_CACHE_SIZE = TABLE_SIZE

#: Keywords that some target accepts (``stream`` and ``device`` for cuda); other targets refuse
#: them by name.
TARGET_OPTIONS = ("stream", "device")


class ResolvedCall:
    """Everything decided once for one call signature; the kernel runs a call of that
    signature through it (``_run``). It is not callable itself: its executor trusts that the
    arguments are of the signature it was resolved for, which only the kernel's keyed call
    checks (a compiled loop given arrays of another dtype or rank would read out of bounds).

    Attributes
    ----------
    plan : Plan
        The validated call, as the target executes it (see :class:`.operands.Operands`).
    target : str
        The concrete target it runs on, or ``"auto"`` for a host call that picks ``cpu`` or
        ``parallel`` per call from what ``auto`` learned.
    """

    __slots__ = ("_executor", "_finish", "_fresh", "_nin", "_nout", "_ops", "_out_checks",
                 "_outs_from", "_run", "_stop", "_stream", "_ufunc", "_where", "plan", "target")

    def __init__(self, kernel: Kernel, call: Call, ops: Operands, target: str, executor: Callable,
                 where_converted: bool, fresh: Fresh = None) -> None:
        spec = kernel.spec
        self.plan, self.target, self._executor = ops.plan, target, executor
        self._ops, self._ufunc, self._fresh = ops, kernel, fresh
        self._nin, self._nout = spec.nin, spec.nout
        self._stop = spec.nin + len(call.sizes)  # where positional outputs start
        self._outs_from = None if call.outs is None else ("args" if call.out_positional else "out")
        self._out_checks = tuple(None if o is None else _writable_check(o) for o in call.outs or ())
        self._where = "convert" if where_converted else ("given" if "where" in _given(call) else None)
        self._stream = "stream" in call.options
        self._finish = finisher(kernel, ops.plan, ops, spec.nout)
        # The same steps, without the ones this call signature never needs. Positional outputs
        # that are all None (``exp(x, None)``: allocate, as NumPy) are cut off like sizes.
        extra = call.sizes or call.out_positional
        simple = self._where is None and not self._stream and ops.plain and fresh is None
        if simple and self._outs_from is None and not extra and self._finish in (_array_result, _results):
            # A target may run this commonest call itself, a frame less (see Executor): its
            # value is the new output, or the tuple of several, as these two finishes return.
            self._run = getattr(executor, "plain", None) or (
                self._plain_array if self._finish is _array_result else self._plain)
        elif simple and self._outs_from is None:
            self._run = self._plain if not extra else self._sized
        elif (self._where != "convert" and not self._stream and ops.plain and fresh is None and
              self._outs_from == "out" and spec.nout == 1):
            self._run = self._one_out
        else:
            self._run = self._general

    # Each takes ``(args, out, where, kwargs)``: ``out`` and ``where`` as given (or ABSENT), and
    # the other keywords, as Kernel.__call__ receives them.
    def _plain_array(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        return self._executor(args, None, True, None)[0]

    def _plain(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        return self._finish(self._executor(args, None, True, None), args)

    def _sized(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        inputs = args[: self._nin]
        return self._finish(self._executor(inputs, None, True, None), inputs)

    def _one_out(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        outs = out if type(out) is tuple else (out,)
        writable = self._out_checks[0]
        if writable is not None and not writable(outs[0]):
            _read_only(self._ufunc.spec, outs[0])
        self._executor(args[: self._nin], outs, where if self._where else True, None)
        return outs[0]

    def _general(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        given = inputs = args[: self._nin]
        for i, convert in self._ops.convert:  # lists, subclasses, float16 (see Operands)
            inputs = (*inputs[:i], convert(inputs[i]), *inputs[i + 1:])
        if self._where is None:
            where = True
        elif self._where == "convert":
            where = np.asarray(where, dtype=bool)
        stream = kwargs["stream"] if self._stream else None
        if self._outs_from is None and self._fresh is None:
            return self._finish(self._executor(inputs, None, where, stream), given)
        outs = () if self._outs_from is None else args[self._stop:] if self._outs_from == "args" else out
        if type(outs) is not tuple:
            outs = (outs,)
        for writable, array in zip(self._out_checks, outs):
            if writable is not None and not writable(array):
                _read_only(self._ufunc.spec, array)
        if self._fresh is not None:  # new arrays for the outputs left to allocate
            outs = (*outs, *(None,) * (self._nout - len(outs)))
            outs = tuple(o if f is None else np.empty(f[0], f[1], order=f[2])
                         for o, f in zip(outs, self._fresh))
        arrays = tuple(map(np.asarray, outs)) if self._ops.outs_as_arrays else outs
        if self._ops.staged:
            stage(self._executor, self.plan, inputs, arrays, where, stream)
        else:
            self._executor(inputs, arrays, where, stream)
        if self._fresh is None:
            return finish_out(self._ufunc, outs, given)
        return self._finish_fresh(outs, given)

    def _finish_fresh(self, outs: tuple[Any, ...], given: tuple[Any, ...]) -> Any:
        """What NumPy returns when it allocated some outputs: those as a call without ``out=``
        returns them (wrapped, 0-d as scalars), the ``out=`` arrays as a call with them does."""
        new = self._finish(outs, given)
        if self._outs_from is None:
            return new
        kept = finish_out(self._ufunc, outs, given)
        return tuple(k if f is None else n for k, n, f in zip(kept, new, self._fresh))


def _given(call: Call) -> set[str]:
    return {name for name, default in KEYWORDS.items()
            if name != "out" and getattr(call, name) is not default}


def _writable_check(out: Any) -> Callable[[Any], bool] | None:
    """``out -> whether it may be written``, read on every call (flags can change between
    calls), or ``None`` for an array type that is never read-only (the type is part of the
    call key). A host array's is a C-level attribute read: no Python call per check."""
    arrays = device_arrays_of(out)
    if arrays is None:
        return _HOST_WRITABLE
    return None if arrays.always_writable(type(out)) else arrays.writable


_HOST_WRITABLE = operator.attrgetter("flags.writeable")


def _read_only(spec: KernelSpec, out: Any) -> None:
    where = "" if device_arrays_of(out) is None else " device"
    raise ValueError(f"{spec.name}: out={where} array is read-only")


class Kernel:
    """A NumPy-compatible ufunc (or gufunc) built from one scalar kernel, on every target.

    Instances are created by :func:`gpufuncs.ufunc` / :func:`gpufuncs.gufunc` and live in the
    registry. Calling one behaves like calling a :class:`numpy.ufunc`, with two keywords more:
    ``target`` (``'auto'``, ``'cpu'``, ``'parallel'``, ``'cuda'``) and, for cuda, ``stream`` and
    ``device`` (a GPU's ordinal, or ``'all'`` to split host arrays across every GPU).
    Each target is compiled on first use, exactly once even under concurrent calls.
    """

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self.__name__ = spec.name
        self.__qualname__ = getattr(spec.pyfunc, "__qualname__", spec.name)
        self.__doc__ = spec.doc
        self.__module__ = getattr(spec.pyfunc, "__module__", __name__)
        self.__signature__ = _signature(spec)
        self.registry: Any = None  # set by the registry that holds this kernel (for pickling)
        self._compiled: dict[str, Any] = {}
        self._compile_lock = threading.Lock()
        # Resolved calls by the target asked for, then by call signature: ``target=`` then
        # costs a lookup, not a longer key to build and hash on every call. A table per target
        # from the start: a first call whose key holds UNKEYABLE must fail the lookup with
        # TypeError (not be kept), not with a KeyError for a missing table.
        self._resolved: dict[str, dict[Any, ResolvedCall]] = {t: {} for t in TARGET_NAMES}
        # Output-only core sizes (hermite_norm's n) shape the result: keyed by value.
        dims = spec.layout.output_only_dims if spec.layout else ()
        self._sizes = slice(spec.nin, spec.nin + len(dims)) if dims else None

    @property
    def full_name(self) -> str:
        """The registry's key: module and qualified name of the definition, the last part the
        kernel's ``__name__`` (``"gpufuncs.kernels.exp.exp"``, ``"__main__.act"``)."""
        return self.spec.full_name

    # -- what code written for np.ufunc reads ---------------------------------------------
    @property
    def nin(self) -> int:
        return self.spec.nin

    @property
    def nout(self) -> int:
        return self.spec.nout

    @property
    def nargs(self) -> int:
        return self.nin + self.nout

    @property
    def ntypes(self) -> int:
        return len(self.types)

    @property
    def types(self) -> list[str]:
        """NumPy's loop strings, e.g. ``['e->e', 'f->f', 'd->d']`` (float16 computes in float32)."""
        return loop_types(self.spec)

    @property
    def signature(self) -> str | None:
        """The gufunc layout (``'()->(n)'``), or ``None`` for an elementwise kernel."""
        return self.spec.layout.text if self.spec.layout else None

    @property
    def identity(self) -> float | None:
        return self.spec.identity

    def __repr__(self) -> str:
        kind = "gufunc" if self.spec.layout else "ufunc"
        layout = f" {self.signature!r}" if self.signature else ""
        return (f"<gpufuncs {kind} {self.__name__!r}{layout} [{', '.join(self.types)}] "
                f"compiled for: {', '.join(self._compiled) or 'none yet'}>")

    def __reduce__(self) -> Any:
        # Like a function: by module and qualified name where importing that module finds this
        # kernel again (built-ins, kernels of an installed module). Otherwise (``__main__``, a
        # notebook cell, a kernel made in a function) its registry pickles it by value, so that
        # it unpickles in a process that never defined it (a Dask worker).
        module = sys.modules.get(self.__module__)
        if (self.__module__ != "__main__" and module is not None
                and getattr(module, self.__qualname__, None) is self):
            return self.__qualname__
        if self.registry is None:
            raise TypeError(f"kernel {self.full_name!r} is not registered and cannot be pickled")
        return self.registry.reduce(self)

    # -- compilation ------------------------------------------------------------------------
    def compiled(self, target: str) -> Any:
        """The compiled object for ``target``, building it on first use (thread-safe)."""
        found = self._compiled.get(target)
        if found is not None:
            return found
        backend = get_target(target)
        reason = backend.unavailable_reason()
        if reason is not None:
            raise CudaUnavailableError(f"{self.__name__}: target {target!r} is unavailable: {reason}")
        with self._compile_lock:
            found = self._compiled.get(target)
            if found is None:
                found = self._compiled[target] = backend.compile(self.spec.executed)
        return found

    def resolve_loop(self, dtypes: list[Any], dtype: Any = None, casting: str = "same_kind") -> Loop:
        """The loop a call with inputs of ``dtypes`` (NumPy dtypes, or Python types for
        scalars) and an optional ``dtype=`` selects, as NumPy's type resolver picks it:
        ``loop.inputs`` and ``loop.outputs`` are its dtypes (``TypeError`` if none fits)."""
        return resolve_loop(self.spec, [d if d in WEAK_SCALARS else np.dtype(d) for d in dtypes],
                            dtype, casting)

    # -- the call -----------------------------------------------------------------------------
    def __call__(self, *args: Any, out: Any = ABSENT, where: Any = ABSENT, target: str = "auto",
                 **kwargs: Any) -> Any:
        """Apply the kernel like a :class:`numpy.ufunc`; see the class docstring."""
        # ``out``, ``where`` and ``target`` are parameters of their own: the commonest keywords
        # then need no dictionary lookups (``target`` picks the table of resolved calls).
        # Each argument keyed inline (see args.keyer_of), up to three without a comprehension
        # (a frame of its own before Python 3.12, and a list to convert after): this runs on
        # every call, and most kernels take one to three arguments.
        count = len(args)
        if count == 1:
            a = args[0]
            key = ((keyer_of(type(a)) or first_key)(a),)
        elif count == 2:
            a, b = args
            key = ((keyer_of(type(a)) or first_key)(a), (keyer_of(type(b)) or first_key)(b))
        elif count == 3:
            a, b, c = args
            key = ((keyer_of(type(a)) or first_key)(a), (keyer_of(type(b)) or first_key)(b),
                   (keyer_of(type(c)) or first_key)(c))
        else:
            key = tuple([(keyer_of(type(a)) or first_key)(a) for a in args])
        if out is not ABSENT or where is not ABSENT or kwargs:
            # One out= array, alone or with a where= array, keyed inline as keywords_key would.
            if kwargs or out is None or out is ABSENT or type(out) is tuple or type(where) is bool:
                key = keywords_key(key, keywords_of(out, where, kwargs))
            elif where is ABSENT:
                key = (*key, "out", (keyer_of(type(out)) or first_key)(out))
            else:
                key = (*key, "out", (keyer_of(type(out)) or first_key)(out),
                       "where", (keyer_of(type(where)) or first_key)(where))
        if self._sizes is not None:
            key = (key, args[self._sizes])
        try:
            resolved = self._resolved[target][key]
        except (KeyError, TypeError) as missed:  # TypeError: a call signature that cannot be keyed
            given = keywords_of(out, where, kwargs)
            if target != "auto":
                given["target"] = target
            resolved = self._resolve(args, given, key if isinstance(missed, KeyError) else None)
        return resolved._run(args, out, where, kwargs)

    def resolve(self, *args: Any, **kwargs: Any) -> ResolvedCall | DeferredCall:
        """The resolved call that ``self(*args, **kwargs)`` would run (validated, not run)."""
        return self._resolve(args, kwargs, None)

    def _resolve(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Any) -> Any:
        spec = self.spec
        if spec.layout is not None and axes.given(kwargs):  # (elementwise: refused by parse_call)
            return self._resolve_axes(args, kwargs, key)
        call = parse_call(spec, args, kwargs, TARGET_OPTIONS)
        overridden = self._override(call)
        if overridden is not None:
            return overridden
        infos, values = [], []
        for i, value in enumerate(call.inputs):
            info, converted = describe_input(spec, value, i)
            infos.append(info)
            values.append(converted)
        if spec.lazy:
            spec = self.learn_loop([a.dtype for a in infos], call.dtype, call.casting)
        outs = None if call.outs is None else [None if o is None else describe_out(spec, o)
                                               for o in call.outs]
        where, mask = where_arg(spec, call.where)
        if where is not None and outs is None:
            warnings.warn(f"{spec.name}: 'where' used without 'out', expect uninitialized memory "
                          "in the output. If this is intentional, use out=None.", UserWarning,
                          stacklevel=3)
        plan, fresh = build_plan(spec.executed, call, infos, outs, where)
        ops = operands_for(plan, call.inputs, values, infos)
        target, executor = self._choose_target(call, ops.plan)
        if executor is None:
            executor = get_target(target).prepare(spec.executed, self.compiled(target), ops.plan)
        resolved = ResolvedCall(self, call, ops, target, executor,
                                where is not None and mask is not call.where, fresh)
        return self._keep(key, call.target, resolved)

    def learn_loop(self, dtypes: list[Any], dtype: Any = None, casting: str = "same_kind") -> KernelSpec:
        """A lazy kernel's spec, with a loop for inputs of ``dtypes`` added where none fits
        (see :mod:`.lazy`): compiled code and resolved calls of the old spec are dropped."""
        with self._compile_lock:
            if lazy.needs_loop(self.spec, dtypes, dtype, casting):
                loop = lazy.loop_for(self.spec, dtypes)
                self.spec = dataclasses.replace(self.spec, loops=(*self.spec.loops, loop))
                self._compiled = {}
                self._resolved = {t: {} for t in TARGET_NAMES}
        return self.spec

    def _keep(self, key: Any, target: str, resolved: Any) -> Any:
        return resolved if key is None else keep(self._resolved[target], key, resolved, RESOLVED_CACHE_SIZE)

    def _resolve_axes(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Any) -> Any:
        """A gufunc call with ``axes=``, ``axis=`` or ``keepdims=``: the call of permuted views
        (see :mod:`.axes`), or handed to an override with those keywords."""
        keywords, rest = axes.split(self.spec, kwargs)
        call = parse_call(self.spec, args, rest, TARGET_OPTIONS)
        overridden = self._override(call, keywords)
        if overridden is not None:
            return overridden
        resolved = axes.AxesCall(self.spec, call, args, rest, keywords,
                                 lambda *inner: self._resolve(*inner, None))
        return self._keep(key, call.target, resolved)

    def _choose_target(self, call: Call, plan: Plan) -> tuple[str, Callable | None]:
        """The target, and its executor where the choice made one: ``auto`` on the host may
        pick ``cpu`` or ``parallel`` per call, as ``"auto"`` (see ``targets.cpu.auto``)."""
        target, executor = call.target, None  # a valid name: checked by parse_call
        arrays = [*plan.inputs, *(plan.outs or ()), *((plan.where,) if plan.where else ())]
        on_device = any(a.role == DEVICE for a in arrays)
        if target == "auto" and on_device:
            target = "cuda"
        elif target == "auto":
            target, executor = auto_host_target(self.spec.executed, plan, self.compiled)
        elif on_device and target != "cuda":
            raise ValueError(f"{self.__name__}: device arrays need target 'cuda' or 'auto', "
                             f"not {target!r} (copy them to the host first)")
        host = "cpu" if target == "auto" else target  # auto picks between host targets
        unsupported = [k for k in call.options if k not in get_target(host).options]
        if unsupported:
            raise ValueError(f"{self.__name__}: {', '.join(unsupported)}= applies to target 'cuda' "
                             f"only, not {target!r}")
        return target, executor

    def _override(self, call: Call, keywords: dict[str, Any] | None = None) -> Callable[..., Any] | None:
        """A call that defers to an argument's ``__array_ufunc__`` (Dask, xarray, ...), if any,
        with ``keywords`` (a gufunc's ``axes=``...) passed on as they are."""
        candidates = overriding(self.__name__, [*call.inputs, *(call.outs or ())])
        if not candidates:
            return None
        # NumPy's protocol has no target; the override calls this kernel per block and each
        # block picks its own target.
        refuse_target(self.__name__, call.target, candidates[0])
        self._check_deferred_dtypes(call)
        refuse_lazy_out(self.__name__, call.outs)
        given = {k: getattr(call, k) for k in _given(call)} | (keywords or {})
        if call.outs is not None:
            given["out"] = call.outs
        ufunc_like: Any = self if not call.sizes else SizedKernel(self, tuple(call.sizes.values()))
        if self.spec.layout is None and self.nout > 1 and library_of(type(candidates[0])) == "dask":
            # Dask runs only its own elementwise ufuncs of several outputs; as the gufunc
            # "(),()->(),()" (what the targets run anyway) its apply_gufunc runs this one.
            ufunc_like = SizedKernel(self, (), self.spec.executed.layout.text)

        def deferred() -> Any:
            return defer(self.__name__, ufunc_like, "__call__", candidates, call.inputs, given,
                         lambda obj: gufunc_keywords(obj, call.sizes),
                         finish_gufunc if self.spec.layout else None)

        return DeferredCall(deferred)

    def _check_deferred_dtypes(self, call: Call) -> None:
        """Inputs handed to an override (Dask, xarray, pandas) are checked as NumPy arrays of
        their dtypes would be: a bad dtype fails with the same error when a Dask graph is
        built, not in a task when it is computed."""
        dtypes = []
        for i, value in enumerate(call.inputs):
            dtype = getattr(value, "dtype", None)
            if isinstance(dtype, np.dtype):  # validated as a NumPy array of its dtype
                describe_input(self.spec, np.empty(0, dtype), i)
                dtypes.append(dtype)
            elif not overrides_array_ufunc(type(value)):  # scalars and arrays, as in any call
                dtypes.append(describe_input(self.spec, value, i)[0].dtype)
        # (a lazy kernel's new loop: the override's call adds it)
        if dtypes and not (self.spec.lazy and lazy.needs_loop(self.spec, dtypes, call.dtype, call.casting)):
            resolve_loop(self.spec, dtypes, call.dtype)

    # -- ufunc methods (binary elementwise kernels) --------------------------------------------
    def outer(self, a: Any, b: Any, **kwargs: Any) -> Any:
        """Apply to every pair ``(a[i], b[j])``, like :meth:`numpy.ufunc.outer`."""
        return methods.outer(self, a, b, **kwargs)

    def reduce(self, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
               keepdims: bool = False, initial: Any = methods.NO_VALUE, where: Any = True,
               target: str = "auto") -> Any:
        """Reduce along ``axis``, like :meth:`numpy.ufunc.reduce` (``cuda``: one axis)."""
        return methods.reduce(self, array, axis, dtype, out, keepdims, initial, where, target)

    def accumulate(self, array: Any, axis: int = 0, dtype: Any = None, out: Any = None,
                   target: str = "auto") -> Any:
        """Running reduction, like :meth:`numpy.ufunc.accumulate` (host targets)."""
        return methods.accumulate(self, array, axis, dtype, out, target)

    def at(self, array: np.ndarray, indices: Any, b: Any, target: str = "auto") -> None:
        """Unbuffered in-place application, like :meth:`numpy.ufunc.at` (host targets)."""
        methods.at(self, array, indices, b, target)


class DeferredCall:
    """A call handed to an argument's ``__array_ufunc__`` (never cached: such arguments have
    no call signature)."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self._deferred = run

    def _run(self, args: tuple[Any, ...], out: Any, where: Any, kwargs: dict[str, Any]) -> Any:
        # (the arguments were taken when the call was resolved: see Kernel._override)
        return self._deferred()


class SizedKernel:
    """A gufunc with its output-only core sizes bound, as handed to ``__array_ufunc__``:
    Dask and xarray call it with the array arguments only. ``signature``: the gufunc layout it
    shows instead of the kernel's (an elementwise kernel of several outputs, for Dask)."""

    def __init__(self, kernel: Kernel, sizes: tuple[int, ...], signature: str | None = None) -> None:
        self.kernel, self.sizes = kernel, sizes
        self.__name__, self.signature = kernel.__name__, signature or kernel.signature
        self.nin, self.nout, self.nargs = kernel.nin, kernel.nout, kernel.nargs

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.kernel(*inputs, *self.sizes, **kwargs)

    def __repr__(self) -> str:
        dims = self.kernel.spec.executed.layout.output_only_dims
        bound = ", ".join(f"{d}={n}" for d, n in zip(dims, self.sizes))
        return f"<gpufuncs gufunc {self.__name__!r} {self.signature!r}{' with ' if bound else ''}{bound}>"


def _signature(spec: KernelSpec) -> inspect.Signature:
    """What ``help()`` and ``inspect.signature`` show: the real parameters, NumPy's keywords."""
    positional = inspect.Parameter.POSITIONAL_ONLY
    dims = spec.layout.output_only_dims if spec.layout else ()
    params = [inspect.Parameter(n, positional) for n in (*spec.input_names, *dims)]
    params.append(inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))
    keyword = inspect.Parameter.KEYWORD_ONLY
    params += [inspect.Parameter(k, keyword, default=v) for k, v in KEYWORDS.items() if k != "out"]
    params += [inspect.Parameter(k, keyword, default=None) for k in TARGET_OPTIONS]
    return inspect.Signature(params)
