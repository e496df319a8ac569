"""The one call path: every gpufuncs callable is a :class:`Kernel`.

A call is validated completely here (arguments, dtypes and casting, shapes, ``out=``) into a
:class:`~gpufuncs.targets.Plan` before any target runs, so bad input never half-writes ``out``
and every target shares NumPy's rules. Targets only execute plans.
"""

from __future__ import annotations

import inspect
import math
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import methods
from .spec import KernelSpec
from .targets import TARGET_NAMES, CudaUnavailableError, Plan, get_target

#: ``target="auto"`` runs host arrays on ``parallel`` from this many output elements up, on
#: ``cpu`` below. Measured on the 2-core CI machine (Numba's default ``omp`` threading layer) with
#: ``benchmarks/bench_cpu.py``, table ``benchmarks/results/cpu_crossover.txt``: ``parallel`` is
#: 1.1x-4x slower than ``cpu`` for ``clamp`` and ``exp`` at every size up to 10^7 (the omp layer
#: calls the ufunc loop once per element) and gains at most 1.1x for ``gaussian`` (from 10^4), so
#: elementwise kernels stay on ``cpu``. Re-measure whenever the parallel target or threading
#: layer changes.
AUTO_PARALLEL_MIN_SIZE = 10**9

#: The same threshold for generalized kernels: ``hermite_norm`` (8 outputs per loop call) gains
#: on ``parallel`` from 8,000 to 24,000 output elements in the same table (runs differ).
AUTO_PARALLEL_MIN_SIZE_GUFUNC = 10**4

#: Validated plans kept per kernel (by argument dtypes and shapes); the cache is emptied when full.
PLAN_CACHE_SIZE = 256

_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_ORDERS = ("K", "A", "C", "F")
_WEAK_SCALARS = (bool, int, float)
_HOST_TYPES = (np.ndarray, np.generic, *_WEAK_SCALARS)
_UNSUPPORTED_KINDS = {"c": "complex", "O": "object", "U": "string", "S": "bytes", "M": "datetime",
                      "m": "timedelta", "V": "void/structured"}


def _is_device_array(obj: Any) -> bool:
    """True for GPU arrays (``__cuda_array_interface__``, a CUDA DLPack device, or the CUDA
    simulator's arrays, which stand in for Numba device arrays under ``NUMBA_ENABLE_CUDASIM``)."""
    cls = type(obj)
    known = _DEVICE_CLASSES.get(cls, _UNSEEN)
    if known is _UNSEEN:
        known = _DEVICE_CLASSES[cls] = _class_is_device(cls)
    return _instance_is_device(obj) if known is None else known


_UNSEEN = object()
#: Per class: every instance is a device array (True), none is (False), or it depends (None).
#: Asked several times per call, so the answer for a class is worked out once.
_DEVICE_CLASSES: dict[type, bool | None] = {}


def _class_is_device(cls: type) -> bool | None:
    if issubclass(cls, _HOST_TYPES):
        return False
    # Looked up on the class: torch computes the interface dict on every access, and declares
    # it on CPU tensors too (``is_cuda`` then decides, per tensor).
    declared = hasattr(cls, "__cuda_array_interface__") or getattr(cls, "__cuda_ndarray__", False)
    return True if declared and not hasattr(cls, "is_cuda") else None


def _instance_is_device(obj: Any) -> bool:
    cls = type(obj)
    if hasattr(cls, "__cuda_array_interface__") or getattr(cls, "__cuda_ndarray__", False):
        return bool(getattr(obj, "is_cuda", True))
    if "__cuda_array_interface__" in getattr(obj, "__dict__", ()):
        return True
    dlpack_device = getattr(obj, "__dlpack_device__", None)
    # 2 = kDLCUDA, 13 = kDLCUDAManaged
    return dlpack_device is not None and dlpack_device()[0] in (2, 13)


def _overrides(objs: Sequence[Any]) -> list[Any]:
    """Arguments whose type overrides ``__array_ufunc__`` (Dask, xarray, ...), NumPy's order."""
    found: list[Any] = []
    for obj in objs:
        method = getattr(type(obj), "__array_ufunc__", None)
        if method is None or method is np.ndarray.__array_ufunc__ or _is_device_array(obj):
            continue
        if any(type(f) is type(obj) for f in found):
            continue
        # Subclasses before superclasses, otherwise left to right (NEP 13).
        at = next((i for i, f in enumerate(found) if issubclass(type(obj), type(f))), len(found))
        found.insert(at, obj)
    return found


class Kernel:
    """A NumPy-compatible ufunc (or gufunc) built from one scalar kernel, on every target.

    Instances are created by :func:`gpufuncs.ufunc` / :func:`gpufuncs.gufunc` and live in the
    registry. Calling one behaves like calling a :class:`numpy.ufunc`; see the README for the
    rules. Each target is compiled on first use, exactly once even under concurrent calls.
    """

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self.__name__ = self.__qualname__ = spec.name
        self.__doc__ = spec.doc
        self.__module__ = getattr(spec.pyfunc, "__module__", __name__)
        self._compiled: dict[str, Any] = {}
        self._compile_lock = threading.Lock()
        self._output_dims = spec.layout.output_only_dims if spec.layout else ()
        self._fast_loops: dict[tuple[Any, ...], Any] = {}
        # __call__ takes **kwargs for speed; advertise call()'s keywords to introspection
        # (Dask checks that the keywords it forwards exist).
        self.__signature__ = inspect.signature(self.call)
        self._cpu_ufunc: Any = None
        self._plans: dict[tuple[Any, ...], Plan] = {}

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
        return len(self.spec.loops)

    @property
    def types(self) -> list[str]:
        """NumPy's loop strings, e.g. ``['fff->f', 'ddd->d']``."""
        return [lp.char * self.nin + "->" + lp.char * self.nout for lp in self.spec.loops]

    @property
    def signature(self) -> str | None:
        """The gufunc layout (``'()->(n)'``), or ``None`` for an elementwise kernel."""
        return self.spec.layout.text if self.spec.layout else None

    @property
    def identity(self) -> float | None:
        return self.spec.identity

    def __repr__(self) -> str:
        kind = "gufunc" if self.spec.layout else "ufunc"
        sigs = ", ".join(self.types)
        layout = f" {self.signature!r}" if self.signature else ""
        return (f"<gpufuncs {kind} {self.__name__!r}{layout} [{sigs}] "
                f"compiled for: {', '.join(self._compiled) or 'none yet'}>")

    def __reduce__(self):
        # Pickles by name (Dask ships callables to workers): the registry is rebuilt on import.
        from .registry import get_kernel

        return get_kernel, (self.__name__,)

    # -- compilation ------------------------------------------------------------------------
    def compiled(self, target: str) -> Any:
        """The compiled Numba object for ``target``, building it on first use (thread-safe)."""
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
                found = self._compiled[target] = backend.compile(self.spec)
        return found

    # -- the call -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Apply the kernel like a :class:`numpy.ufunc` (see :meth:`call` for the keywords)."""
        if not kwargs or kwargs.keys() == {"target"}:
            result = self._fast_call(args, kwargs.get("target", "auto"))
            if result is not NotImplemented:
                return result
        return self.call(*args, **kwargs)

    def call(
        self,
        *args: Any,
        out: Any = None,
        where: Any = True,
        dtype: Any = None,
        casting: str = "same_kind",
        order: str = "K",
        target: str = "auto",
        stream: Any = None,
        **unsupported: Any,
    ) -> Any:
        """Apply the kernel: the full, validated call path.

        Parameters
        ----------
        *args
            The inputs (arrays, device arrays, scalars), then for gufuncs the sizes of the
            output-only core dimensions (``hermite_norm(x, n)``).
        out : array or tuple of arrays, optional
            Where to write the result; validated (shape, dtype, writable) before any write.
        where : array_like of bool, optional
            With ``out=``, positions where it is False keep ``out``'s values.
        dtype : dtype, optional
            The loop to compute in (``np.float32`` computes float64 input in float32).
        casting : {'no', 'equiv', 'safe', 'same_kind', 'unsafe'}
            Which input and output casts are allowed, as in NumPy.
        order : {'K', 'A', 'C', 'F'}
            Memory order of allocated outputs.
        target : {'auto', 'cpu', 'parallel', 'cuda'}
            Where to run; ``auto`` picks ``cuda`` for device arrays, else ``cpu`` below
            ``AUTO_PARALLEL_MIN_SIZE`` output elements (``AUTO_PARALLEL_MIN_SIZE_GUFUNC`` for
            generalized kernels) and ``parallel`` from there up.
        stream : optional
            For ``cuda``: a numba, cuda.core, CuPy or torch stream to run on.

        Returns
        -------
        array, scalar or tuple
            Like NumPy: a scalar for 0-d inputs, the ``out`` array when given.
        """
        if unsupported:
            raise TypeError(f"{self.__name__}() got unsupported keyword argument(s): "
                            f"{', '.join(sorted(unsupported))}")
        inputs, sizes = self._split_args(args)
        outs = self._normalize_out(out)
        given = {k: v for k, v, default in (("out", outs, None), ("where", where, True),
                                            ("dtype", dtype, None), ("casting", casting, "same_kind"),
                                            ("order", order, "K"))
                 if v is not default}
        overridden = self._try_overrides(inputs, outs, sizes, given, target)
        if overridden is not NotImplemented:
            return overridden
        device = [_is_device_array(a) for a in inputs]
        on_device = any(device) or any(_is_device_array(a) for a in (*(outs or ()), where))
        host_inputs = [a if d or isinstance(a, (*_WEAK_SCALARS, np.ndarray)) else np.asarray(a)
                       for a, d in zip(inputs, device)]
        plan = self._cached_plan(host_inputs, outs, sizes, dtype, casting, order)
        chosen = self._choose_target(target, on_device, plan)
        backend_options = {"stream": stream} if chosen == "cuda" else {}
        if stream is not None and chosen != "cuda":
            raise ValueError(f"{self.__name__}: stream= applies to target 'cuda' only, not {chosen!r}")
        results = get_target(chosen).execute(
            self.spec, self.compiled(chosen), plan, host_inputs, outs, where, **backend_options
        )
        if outs is None and not plan.loop_shape and self.spec.layout is None:
            results = tuple(r[()] if isinstance(r, np.ndarray) else r for r in results)
        return results[0] if self.nout == 1 else results

    # -- ufunc methods (binary elementwise kernels) --------------------------------------------
    def outer(self, a: Any, b: Any, **kwargs: Any) -> Any:
        """Apply to every pair ``(a[i], b[j])``, like :meth:`numpy.ufunc.outer`."""
        return methods.outer(self, a, b, **kwargs)

    def reduce(self, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None,
               keepdims: bool = False, initial: Any = methods._NO_VALUE, where: Any = True,
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

    # -- the fast path: small host calls without keywords -------------------------------------
    def _fast_call(self, args: tuple[Any, ...], target: str) -> Any:
        """Skip re-validation for argument types already seen; ``NotImplemented`` if not eligible.

        Eligible: a call on ``cpu`` with NumPy arrays of one shape and scalars (plus the integer
        sizes of a gufunc like ``hermite_norm``), whose dtypes resolved before to a loop that
        returns its own dtype. NumPy's ufunc then does the (already validated) work directly;
        anything else, errors included, takes :meth:`call`.
        """
        key = tuple(a.dtype if type(a) is np.ndarray else type(a) for a in args)
        loop = self._fast_loops.get(key)
        if loop is None:
            loop = self._fast_loops[key] = self._fast_loop(key)
        if not loop or (target != "auto" and target != "cpu"):
            return NotImplemented
        nin = self.nin
        shape = None
        for a in args[:nin] if len(args) > nin else args:
            if type(a) is np.ndarray:
                if shape is None:
                    shape = a.shape
                elif a.shape != shape:
                    return NotImplemented
        size = 1 if shape is None else math.prod(shape)
        if len(args) == nin:  # elementwise: ``loop`` is the signature string
            if target == "auto" and size >= AUTO_PARALLEL_MIN_SIZE:
                return NotImplemented
            return (self._cpu_ufunc or self._load_cpu_ufunc())(*args, signature=loop)
        sizes = args[nin:]
        if min(sizes) < 0 or (target == "auto" and
                              size * math.prod(sizes) >= AUTO_PARALLEL_MIN_SIZE_GUFUNC):
            return NotImplemented
        out = np.empty((*(shape or ()), *sizes), loop)
        (self._cpu_ufunc or self._load_cpu_ufunc())(*args[:nin], out)
        return out

    def _fast_loop(self, key: tuple[Any, ...]) -> Any:
        """What the fast path runs for argument types ``key``: the signature string of an
        elementwise kernel, the loop dtype of a gufunc with scalar inputs and only output-only
        core dimensions, or ``''`` when these types need the full path."""
        layout = self.spec.layout
        if len(key) != self.nin + len(self._output_dims):
            return ""
        if layout is not None and (any(layout.inputs) or set(self._output_dims) != {
                d for dims in layout.outputs for d in dims} or key[self.nin:] != (int,) * len(
                self._output_dims)):
            return ""
        dtypes = []
        for k in key[: self.nin]:
            if isinstance(k, np.dtype) and k.kind in "biuf":
                dtypes.append(k)
            elif k in _WEAK_SCALARS:
                dtypes.append(k)
            elif isinstance(k, type) and issubclass(k, np.number | np.bool_):
                dtypes.append(np.dtype(k))
            else:
                return ""
        try:
            loop, result = self._loop_dtype(dtypes, None)
        except TypeError:
            return ""
        if loop != result:
            return ""
        return loop if layout is not None else loop.char * self.nin + "->" + loop.char

    def _parallel_threshold(self) -> int:
        return AUTO_PARALLEL_MIN_SIZE_GUFUNC if self.spec.layout else AUTO_PARALLEL_MIN_SIZE

    def _load_cpu_ufunc(self) -> Any:
        compiled = self.compiled("cpu")
        self._cpu_ufunc = getattr(compiled, "ufunc", compiled)
        return self._cpu_ufunc

    # -- validation: everything below raises before anything is written ------------------------
    def _split_args(self, args: tuple[Any, ...]) -> tuple[list[Any], dict[str, int]]:
        expected = self.nin + len(self._output_dims)
        if len(args) != expected:
            names = ", ".join(self.spec.input_names + self._output_dims)
            raise TypeError(f"{self.__name__}() takes {expected} positional arguments "
                            f"({names}), got {len(args)}")
        sizes = {}
        for name, value in zip(self._output_dims, args[self.nin:]):
            try:
                if isinstance(value, bool | np.bool_):
                    raise TypeError
                size = operator.index(value)
            except TypeError:
                raise ValueError(f"{self.__name__}: {name} must be a non-negative integer, "
                                 f"got {value!r}") from None
            if size < 0:
                raise ValueError(f"{self.__name__}: {name} must be a non-negative integer, got {size}")
            sizes[name] = size
        return list(args[: self.nin]), sizes

    def _normalize_out(self, out: Any) -> tuple[Any, ...] | None:
        if out is None:
            return None
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != self.nout:
            raise ValueError(f"{self.__name__}: out must have {self.nout} array(s), got {len(outs)}")
        if all(o is None for o in outs):
            return None
        if any(o is None for o in outs):
            raise ValueError(f"{self.__name__}: give every output in out=, or none")
        for o in outs:
            if isinstance(o, np.ndarray):
                if not o.flags.writeable:
                    raise ValueError(f"{self.__name__}: out= array is read-only")
            elif not _is_device_array(o):
                raise TypeError(f"{self.__name__}: out= must be an array, got {type(o).__name__}")
            elif _read_only_device_array(o):
                raise ValueError(f"{self.__name__}: out= device array is read-only")
        return outs

    def _try_overrides(self, inputs, outs, sizes, given, target) -> Any:
        candidates = _overrides([*inputs, *(outs or ())])
        if not candidates:
            return NotImplemented
        if target != "auto":
            # NumPy's protocol has no target; the override calls this kernel per block and
            # each block picks its own target.
            raise TypeError(f"{self.__name__}: target={target!r} cannot be passed through "
                            f"{type(candidates[0]).__name__}.__array_ufunc__; its blocks use 'auto'")
        ufunc_like: Any = self
        if sizes:
            # Output-only core dimensions (hermite's n) are not arrays: bind them, and tell
            # gufunc-aware overrides (Dask's apply_gufunc) their sizes.
            ufunc_like = _SizedKernel(self, tuple(sizes.values()))
            given = {**given, "output_sizes": sizes}
        for obj in candidates:
            result = type(obj).__array_ufunc__(obj, ufunc_like, "__call__", *inputs, **given)
            if result is not NotImplemented:
                return result
        raise TypeError(f"{self.__name__}: operand types "
                        f"{[type(c).__name__ for c in candidates]} all returned NotImplemented "
                        "from __array_ufunc__")

    def _dtype_of(self, obj: Any, role: str) -> np.dtype | type:
        """The dtype of an array, or the Python type of a weak scalar (NEP 50)."""
        if isinstance(obj, _WEAK_SCALARS):
            return type(obj)
        dt = obj.dtype if isinstance(obj, np.ndarray | np.generic) else _device_dtype(obj)
        if dt.kind not in "biuf":
            kind = _UNSUPPORTED_KINDS.get(dt.kind, dt.kind)
            raise TypeError(f"{self.__name__}: unsupported {kind} dtype {dt} for {role}; "
                            f"supported: {', '.join(self._supported())}")
        return dt

    def _supported(self) -> list[str]:
        loops = [str(lp.dtype) for lp in self.spec.loops]
        return [*loops, "float16 (computed in float32)", "integer and bool (computed in float64)"]

    def _loop_dtype(self, dtypes: list[Any], requested: Any) -> tuple[np.dtype, np.dtype]:
        """(loop dtype, result dtype) by NumPy's promotion rules and gpufuncs' float loops."""
        if requested is not None:
            try:
                natural = np.dtype(requested)
            except TypeError:
                raise TypeError(f"{self.__name__}: dtype={requested!r} is not a dtype; "
                                f"loops: {', '.join(self.types)}") from None
            if natural.kind != "f":
                raise TypeError(f"{self.__name__}: dtype={natural} is not a floating dtype; "
                                f"loops: {', '.join(self.types)}")
        else:
            natural = np.result_type(*(d if isinstance(d, np.dtype) else d(0) for d in dtypes))
        # float16 computes in float32 and is returned as float16 (NumPy's own float16 loops do
        # the same); integers and bool compute in float64.
        wanted = np.dtype(np.float32) if natural == np.float16 else natural
        if wanted.kind != "f" or wanted.itemsize > 8:
            wanted = np.dtype(np.float64)
        loop = next((lp.dtype for lp in self.spec.loops if lp.dtype.itemsize >= wanted.itemsize), None)
        if loop is None:
            raise TypeError(f"{self.__name__}: no loop for dtype {natural}; loops: {', '.join(self.types)}")
        return loop, (natural if natural == np.float16 else loop)

    def _check_casting(self, dtypes, loop: np.dtype, result: np.dtype, outs, casting: str) -> None:
        if casting not in _CASTINGS:
            raise ValueError(f"{self.__name__}: casting must be one of {_CASTINGS}, got {casting!r}")
        for i, dt in enumerate(dtypes):
            if isinstance(dt, np.dtype) and not np.can_cast(dt, loop, casting):
                raise TypeError(f"{self.__name__}: cannot cast input {self.spec.input_names[i]!r} "
                                f"from {dt} to the {loop} loop with casting={casting!r}")
        for o in outs or ():
            odt = o.dtype if isinstance(o, np.ndarray) else _device_dtype(o)
            if not np.can_cast(result, odt, casting):
                raise TypeError(f"{self.__name__}: cannot cast the {result} result to out= dtype "
                                f"{odt} with casting={casting!r}")

    def _cached_plan(self, inputs, outs, sizes, dtype, casting, order) -> Plan:
        """:meth:`_plan`, reused for arguments of the same types, dtypes and shapes: a plan
        depends on nothing else, so a repeated call (a loop of small GPU calls, ``out=`` in a
        host loop) skips the validation it already passed. Failures are never cached."""
        key = _plan_key(inputs, outs, sizes, dtype, casting, order)
        if key is None:
            return self._plan(inputs, outs, sizes, dtype, casting, order)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(inputs, outs, sizes, dtype, casting, order)
            if len(self._plans) >= PLAN_CACHE_SIZE:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _plan(self, inputs, outs, sizes, dtype, casting, order) -> Plan:
        dtypes = [self._dtype_of(a, f"input {name!r}") for a, name in zip(inputs, self.spec.input_names)]
        loop_dtype, result_dtype = self._loop_dtype(dtypes, dtype)
        self._check_casting(dtypes, loop_dtype, result_dtype, outs, casting)
        if order not in _ORDERS:
            raise ValueError(f"{self.__name__}: order must be one of {_ORDERS}, got {order!r}")
        loop_shape, out_shapes, core = self._shapes([np.shape(a) if not _is_device_array(a)
                                                      else _device_shape(a) for a in inputs],
                                                     outs, sizes)
        return Plan(loop=self.spec.loop_for(loop_dtype), result_dtype=result_dtype,
                    loop_shape=loop_shape, out_shapes=out_shapes, core_sizes=core,
                    order=_alloc_order(order, inputs))

    def _shapes(self, shapes, outs, sizes):
        layout = self.spec.layout
        in_cores = layout.inputs if layout else ((),) * self.nin
        out_cores = layout.outputs if layout else ((),)
        core = dict(sizes)
        loops = []
        for shape, dims, name in zip(shapes, in_cores, self.spec.input_names):
            loops.append(self._bind_core(shape, dims, core, f"input {name!r}"))
        try:
            loop_shape = np.broadcast_shapes(*loops)
        except ValueError:
            shown = " ".join(str(tuple(s)) for s in shapes)
            raise ValueError(f"{self.__name__}: operands could not be broadcast together with "
                             f"shapes {shown}") from None
        for o, dims in zip(outs or (), out_cores):
            # Like NumPy, inputs may broadcast up to out's loop shape, never the reverse.
            out_loop = self._bind_core(_shape_of(o), dims, core, "out=")
            if _broadcasts_to(loop_shape, out_loop):
                loop_shape = out_loop
        out_shapes = tuple(loop_shape + tuple(core[d] for d in dims) for dims in out_cores)
        for o, want in zip(outs or (), out_shapes):
            if _shape_of(o) != want:
                raise ValueError(f"{self.__name__}: out= has shape {_shape_of(o)}, "
                                 f"the result has shape {want}")
        return loop_shape, out_shapes, core

    def _bind_core(self, shape, dims, core: dict[str, int], role: str) -> tuple[int, ...]:
        if len(shape) < len(dims):
            raise ValueError(f"{self.__name__}: {role} has {len(shape)} dimension(s), the layout "
                             f"{self.signature!r} needs at least {len(dims)}")
        split = len(shape) - len(dims)
        for d, size in zip(dims, shape[split:]):
            if core.setdefault(d, size) != size:
                raise ValueError(f"{self.__name__}: core dimension {d!r} of {role} has size {size}, "
                                 f"expected {core[d]}")
        return tuple(shape[:split])

    def _choose_target(self, target: str, on_device: bool, plan: Plan) -> str:
        if target not in TARGET_NAMES:
            raise ValueError(f"{self.__name__}: unknown target {target!r}; valid targets: "
                             f"{', '.join(TARGET_NAMES)}")
        if target == "auto":
            if on_device:
                return "cuda"
            size = math.prod(plan.out_shapes[0])
            return "parallel" if size >= self._parallel_threshold() else "cpu"
        if on_device and target != "cuda":
            raise ValueError(f"{self.__name__}: device arrays need target 'cuda' or 'auto', "
                             f"not {target!r} (copy them to the host first)")
        return target


class _SizedKernel:
    """A gufunc with its output-only core sizes bound, as handed to ``__array_ufunc__``."""

    def __init__(self, kernel: Kernel, sizes: tuple[int, ...]) -> None:
        self.kernel, self.sizes = kernel, sizes
        self.__name__, self.signature = kernel.__name__, kernel.signature
        self.nin, self.nout, self.nargs = kernel.nin, kernel.nout, kernel.nargs

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.kernel.call(*inputs, *self.sizes, **kwargs)


def _operand_key(obj: Any) -> tuple[Any, ...] | None:
    """What :meth:`Kernel._plan` reads of one operand, or ``None`` where that is not cheap."""
    cls = type(obj)
    if cls is np.ndarray:
        # The layout flags choose the order of allocated outputs (``order="K"``).
        return cls, obj.dtype, obj.shape, obj.flags.c_contiguous, obj.flags.f_contiguous
    if cls in _WEAK_SCALARS:
        return (cls,)
    if isinstance(obj, np.generic):
        return cls, obj.dtype
    dtype, shape = getattr(obj, "dtype", None), getattr(obj, "shape", None)
    if dtype is None or shape is None:
        return None  # lists, DLPack-only objects: planned afresh
    return cls, dtype, tuple(shape)


def _plan_key(inputs, outs, sizes, dtype, casting, order) -> tuple[Any, ...] | None:
    keys = [_operand_key(a) for a in (*inputs, *(outs or ()))]
    if None in keys:
        return None
    key = (*keys, outs is None, *sizes.values(), dtype, casting, order)
    try:
        hash(key)
    except TypeError:  # an unhashable dtype= or casting= argument: validated (and rejected) afresh
        return None
    return key


def _read_only_device_array(obj: Any) -> bool:
    """The read-only flag of ``__cuda_array_interface__`` (DLPack-only objects carry none)."""
    interface = getattr(obj, "__cuda_array_interface__", None)
    return bool(interface and interface.get("data", (0, False))[1])


def _device_dtype(obj: Any) -> np.dtype:
    dt = getattr(obj, "dtype", None)
    if isinstance(dt, np.dtype):
        return dt
    from .targets.cuda.arrays import device_dtype  # torch dtypes, the CAI typestr, DLPack

    return device_dtype(obj)


def _device_shape(obj: Any) -> tuple[int, ...]:
    shape = getattr(obj, "shape", None)  # Numba, CuPy, torch: cheaper than the interface dict
    if shape is not None:
        return tuple(shape)
    from .targets.cuda.arrays import device_shape

    return device_shape(obj)


def _shape_of(obj: Any) -> tuple[int, ...]:
    return obj.shape if isinstance(obj, np.ndarray) else _device_shape(obj)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _alloc_order(order: str, inputs: list[Any]) -> str:
    if order in "CF":
        return order
    arrays = [a for a in inputs if isinstance(a, np.ndarray) and a.ndim > 1]
    f_only = arrays and all(a.flags.f_contiguous and not a.flags.c_contiguous for a in arrays)
    return "F" if f_only else "C"
