"""Compiling kernels for the cuda target from the same scalar definitions.

The scalar function of a kernel becomes a CUDA device function (``cuda.jit(device=True)``), and
one small ``cuda.jit`` kernel per arity calls it once per loop element. The kernels are closures
(no generated source): what differs between calls is only the *types* of their arguments, and
Numba specializes a kernel per argument types, so one kernel body serves

* array operands passed as raw pointers (``CPointer``) and scalars passed by value;
* the flat fast path (``shape`` is the empty tuple: element ``i`` is at offset ``i``) and the
  strided path (``shape`` and per-operand element strides: broadcast dimensions have stride 0);
* any input dtype (loaded, then cast to the loop dtype) and any output dtype (cast on store);
* gufunc operands with core dimensions, passed as Numba arrays of shape ``(extent, *core)`` whose
  first stride is one element, so ``a[offset]`` is the core view of loop element ``offset``.

The overloaded helpers :func:`_at`, :func:`_put` and :func:`_arg` pick the right access for each
argument type at compile time; their Python bodies are what the CUDA simulator runs.
Kernels are cached on disk (``cache=True``), keyed on the scalar function's source as well.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba import cuda
from numba.core import sigutils, types
from numba.np.numpy_support import from_dtype

from ...scalar import as_type
from ...spec import KernelSpec
from .runtime import SIMULATED, SimCore, SimPointer

#: The largest arities with a kernel below (ufunc inputs; gufunc inputs + outputs).
MAX_UFUNC_INPUTS = 4
MAX_GUFUNC_ARGS = 4


class CudaCompileError(RuntimeError):
    """A kernel could not be compiled for the cuda target; the message names the kernel."""


# -- element access, shared by every kernel ---------------------------------------------------
def _offset(i, shape, strides):
    """Element offset of loop element ``i`` (C order over ``shape``) for ``strides``."""
    off = 0
    rem = i
    for d in range(len(shape) - 1, 0, -1):
        q = rem // shape[d]
        off += (rem - q * shape[d]) * strides[d]
        rem = q
    return off + rem * strides[0]


def _at(a, s, i, shape):
    """Operand ``a`` at loop element ``i``: ``a[i]`` (flat), ``a[offset]`` (strided) or ``a``."""
    if not isinstance(a, SimPointer | SimCore):
        return a
    return a[_offset(i, shape, s) if shape else i]


def _put(p, s, i, shape, value):
    """Store ``value`` at loop element ``i`` of output ``p``, cast to ``p``'s dtype."""
    p[_offset(i, shape, s) if shape else i] = value


def _arg(a, s, i, shape, zero):
    """A gufunc argument: the core view of a core operand, else the element cast like ``zero``."""
    if isinstance(a, SimCore):
        return a[_offset(i, shape, s) if shape else i]
    return as_type(_at(a, s, i, shape), zero)


if not SIMULATED:
    from numba.cuda.extending import overload

    _offset = cuda.jit(device=True, forceinline=True)(_offset)

    def _is_flat(shape) -> bool:
        return isinstance(shape, types.BaseTuple) and len(shape) == 0

    @overload(_at, inline="always")
    def _at_typing(a, s, i, shape):
        if isinstance(a, types.Number | types.Boolean):
            return lambda a, s, i, shape: a
        if _is_flat(shape):
            return lambda a, s, i, shape: a[i]
        return lambda a, s, i, shape: a[_offset(i, shape, s)]

    @overload(_put, inline="always")
    def _put_typing(p, s, i, shape, value):
        cast = p.dtype  # a Numba number type: calling it converts (float32 -> float16, ...)
        if _is_flat(shape):
            def impl(p, s, i, shape, value):
                p[i] = cast(value)
        else:
            def impl(p, s, i, shape, value):
                p[_offset(i, shape, s)] = cast(value)
        return impl

    @overload(_arg, inline="always")
    def _arg_typing(a, s, i, shape, zero):
        if not isinstance(a, types.Array):
            return lambda a, s, i, shape, zero: as_type(_at(a, s, i, shape), zero)
        if _is_flat(shape):
            return lambda a, s, i, shape, zero: a[i]
        return lambda a, s, i, shape, zero: a[_offset(i, shape, s)]


# -- one kernel per arity -----------------------------------------------------------------------
# Each takes, per operand, the operand (pointer, scalar or core array) and its element strides
# (an empty tuple for scalars and on the flat path: no kernel parameter at all), then the output,
# the ``where`` mask (a pointer, or 1 by value), the loop shape and the element count.
#
# A thread handles ``per_thread`` elements, ``blockDim`` apart (each warp access stays
# coalesced), and loads all of them before computing any: with one 4-byte element per thread an
# SM has too few bytes in flight to cover the memory latency of an H100 (measured: 1.6 TB/s
# against 2.8 TB/s for a copy). The loops have a constant trip count, so they are unrolled and
# the local arrays live in registers.
def _ufunc_kernel(dev: Any, cast: Any, nin: int, per_thread: int) -> Callable[..., None]:
    if nin == 1:
        def kernel(a0, s0, out, so, w, sw, shape, n):
            first = cuda.blockIdx.x * cuda.blockDim.x * per_thread + cuda.threadIdx.x
            v0 = cuda.local.array(per_thread, cast)
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n:
                    v0[k] = cast(_at(a0, s0, i, shape))
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n and _at(w, sw, i, shape):
                    _put(out, so, i, shape, dev(v0[k]))
    elif nin == 2:
        def kernel(a0, s0, a1, s1, out, so, w, sw, shape, n):
            first = cuda.blockIdx.x * cuda.blockDim.x * per_thread + cuda.threadIdx.x
            v0 = cuda.local.array(per_thread, cast)
            v1 = cuda.local.array(per_thread, cast)
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n:
                    v0[k] = cast(_at(a0, s0, i, shape))
                    v1[k] = cast(_at(a1, s1, i, shape))
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n and _at(w, sw, i, shape):
                    _put(out, so, i, shape, dev(v0[k], v1[k]))
    elif nin == 3:
        def kernel(a0, s0, a1, s1, a2, s2, out, so, w, sw, shape, n):
            first = cuda.blockIdx.x * cuda.blockDim.x * per_thread + cuda.threadIdx.x
            v0 = cuda.local.array(per_thread, cast)
            v1 = cuda.local.array(per_thread, cast)
            v2 = cuda.local.array(per_thread, cast)
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n:
                    v0[k] = cast(_at(a0, s0, i, shape))
                    v1[k] = cast(_at(a1, s1, i, shape))
                    v2[k] = cast(_at(a2, s2, i, shape))
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n and _at(w, sw, i, shape):
                    _put(out, so, i, shape, dev(v0[k], v1[k], v2[k]))
    elif nin == 4:
        def kernel(a0, s0, a1, s1, a2, s2, a3, s3, out, so, w, sw, shape, n):
            first = cuda.blockIdx.x * cuda.blockDim.x * per_thread + cuda.threadIdx.x
            v0 = cuda.local.array(per_thread, cast)
            v1 = cuda.local.array(per_thread, cast)
            v2 = cuda.local.array(per_thread, cast)
            v3 = cuda.local.array(per_thread, cast)
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n:
                    v0[k] = cast(_at(a0, s0, i, shape))
                    v1[k] = cast(_at(a1, s1, i, shape))
                    v2[k] = cast(_at(a2, s2, i, shape))
                    v3[k] = cast(_at(a3, s3, i, shape))
            for k in range(per_thread):
                i = first + k * cuda.blockDim.x
                if i < n and _at(w, sw, i, shape):
                    _put(out, so, i, shape, dev(v0[k], v1[k], v2[k], v3[k]))
    else:
        raise NotImplementedError(f"the cuda target has kernels for 1 to {MAX_UFUNC_INPUTS} inputs")
    return kernel


# Gufunc kernels compute one loop element per thread: their core loops (32 orders of
# hermite_norm per load) already keep enough work in flight.
def _gufunc_kernel(dev: Any, cast: Any, nargs: int) -> Callable[..., None]:
    if nargs == 1:
        def kernel(a0, s0, w, sw, shape, n):
            i = cuda.grid(1)
            if i < n and _at(w, sw, i, shape):
                dev(_arg(a0, s0, i, shape, cast(0)))
    elif nargs == 2:
        def kernel(a0, s0, a1, s1, w, sw, shape, n):
            i = cuda.grid(1)
            if i < n and _at(w, sw, i, shape):
                dev(_arg(a0, s0, i, shape, cast(0)), _arg(a1, s1, i, shape, cast(0)))
    elif nargs == 3:
        def kernel(a0, s0, a1, s1, a2, s2, w, sw, shape, n):
            i = cuda.grid(1)
            if i < n and _at(w, sw, i, shape):
                dev(_arg(a0, s0, i, shape, cast(0)), _arg(a1, s1, i, shape, cast(0)),
                    _arg(a2, s2, i, shape, cast(0)))
    elif nargs == 4:
        def kernel(a0, s0, a1, s1, a2, s2, a3, s3, w, sw, shape, n):
            i = cuda.grid(1)
            if i < n and _at(w, sw, i, shape):
                dev(_arg(a0, s0, i, shape, cast(0)), _arg(a1, s1, i, shape, cast(0)),
                    _arg(a2, s2, i, shape, cast(0)), _arg(a3, s3, i, shape, cast(0)))
    else:
        raise NotImplementedError(f"the cuda target has kernels for 1 to {MAX_GUFUNC_ARGS} arguments")
    return kernel


def elements_per_thread(spec: KernelSpec, loop_dtype: np.dtype) -> int:
    """Loop elements per thread: 16 bytes of each input in flight for elementwise kernels."""
    return 1 if spec.layout is not None else max(1, 16 // np.dtype(loop_dtype).itemsize)


# -- argument types -----------------------------------------------------------------------------
def numba_type(key: Any) -> types.Type:
    """The Numba type of one kernel argument from its launch key (see ``launch.py``).

    Keys: ``('p', dtype)`` a pointer, ``('s', dtype)`` a scalar by value, ``('a', dtype, ndim)``
    a core array, an ``int`` k a tuple of k int64 (strides or shape), ``'n'`` the count.
    """
    if key == "n":
        return types.int64
    if isinstance(key, int):
        return types.UniTuple(types.int64, key) if key else types.Tuple(())
    kind, dtype = key[0], from_dtype(np.dtype(key[1]))
    if kind == "p":
        return types.CPointer(dtype)
    if kind == "s":
        return dtype
    return types.Array(dtype, key[2], "A")


def _source_key(pyfunc: Callable[..., Any]) -> str | None:
    """A digest of the module that defines ``pyfunc`` (its helpers and constants included)."""
    try:
        return hashlib.sha256(Path(inspect.getsourcefile(pyfunc)).read_bytes()).hexdigest()
    except (TypeError, OSError):
        return None  # defined in a REPL or notebook: nothing stable to key a disk cache on


def _jit_kernel(pyfunc: Callable[..., None], source_key: str | None) -> Any:
    if SIMULATED:
        return cuda.jit(pyfunc)
    dispatcher = cuda.jit(pyfunc)
    if source_key is not None:
        from numba.cuda.dispatcher import CUDACache

        class SourceKeyedCache(CUDACache):
            # Numba keys a cached kernel on the kernel's own code only; the scalar function it
            # calls lives in another file, so its source is part of our key as well.
            def _index_key(self, sig, codegen):
                return (*super()._index_key(sig, codegen), source_key)

        dispatcher._cache = SourceKeyedCache(pyfunc)
    return dispatcher


class CudaKernels:
    """The device function and kernels of one kernel spec, compiled per argument types on demand.

    :meth:`get` returns what the runtime launches (a ``cuda.core`` kernel on a GPU, the
    ``cuda.jit`` dispatcher under the simulator) and the loop elements each thread handles.
    """

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        #: Core dimensions of each argument (inputs, then outputs).
        self.cores = [len(d) for d in (*spec.layout.inputs, *spec.layout.outputs)] if spec.layout \
            else [0] * (spec.nin + spec.nout)
        options = {} if SIMULATED else {"forceinline": True}
        self.device_function = cuda.jit(device=True, **options)(spec.pyfunc)
        self._source_key = _source_key(spec.pyfunc)
        self._dispatchers: dict[np.dtype, Any] = {}
        self._launchable: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        self._numba_object: Any = None

    def numba_object(self) -> Any:
        """Numba's own CUDA ufunc object for this spec (see :func:`numba_object`), built once."""
        with self._lock:
            if self._numba_object is None:
                self._numba_object = numba_object(self.spec)
        return self._numba_object

    def get(self, loop_dtype: np.dtype, keys: tuple[Any, ...]) -> tuple[Any, int]:
        """The launchable kernel for the loop dtype and argument keys (compiled on first use),
        and the number of loop elements per thread."""
        found = self._launchable.get((loop_dtype, keys))
        if found is None:
            with self._lock:
                found = self._launchable.get((loop_dtype, keys))
                if found is None:
                    found = (self._compile(loop_dtype, keys), elements_per_thread(self.spec, loop_dtype))
                    self._launchable[(loop_dtype, keys)] = found
        return found

    def _dispatcher(self, loop_dtype: np.dtype) -> Any:
        found = self._dispatchers.get(loop_dtype)
        if found is None:
            cast = from_dtype(loop_dtype)
            spec = self.spec
            if spec.layout is None:
                body = _ufunc_kernel(self.device_function, cast, spec.nin,
                                     elements_per_thread(spec, loop_dtype))
            else:
                body = _gufunc_kernel(self.device_function, cast, spec.nin + spec.nout)
            found = self._dispatchers[loop_dtype] = _jit_kernel(body, self._source_key)
        return found

    def _compile(self, loop_dtype: np.dtype, keys: tuple[Any, ...]) -> Any:
        try:
            dispatcher = self._dispatcher(loop_dtype)
            if SIMULATED:
                return dispatcher
            compiled = dispatcher.compile(tuple(numba_type(k) for k in keys))
            compiled.bind()  # load the module into the context once
            # numba-cuda launches through cuda.core itself; its compiled function holds the
            # cuda.core Kernel, which we launch directly with raw pointers and scalars.
            return compiled._codelibrary.get_cufunc().kernel
        except NotImplementedError as exc:
            raise CudaCompileError(f"kernel {self.spec.name!r}: {exc}") from exc
        except Exception as exc:
            raise CudaCompileError(
                f"kernel {self.spec.name!r} failed to compile for target 'cuda' "
                f"({loop_dtype} loop, arguments {keys}): {exc}"
            ) from exc


# -- Numba's own CUDA ufunc objects (what gf.get(name, target="cuda") returns) -----------------
class SimulatedNumbaObject:
    """Stands in for Numba's CUDA ufunc object, which the CUDA simulator cannot build or run."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.__name__}: Numba's CUDA ufunc objects do not run under "
                                  "NUMBA_ENABLE_CUDASIM=1; call gpufuncs.{name}(...) instead")


def numba_object(spec: KernelSpec) -> Any:
    """Numba's ``@vectorize`` / ``@guvectorize`` (``target="cuda"``) object for ``spec``.

    A gufunc with output-only core dimensions (``"()->(n)"``) cannot be expressed in Numba
    (numba#2797); its Numba object takes one extra input after the real ones whose core shape
    gives those sizes (for ``hermite_norm``: ``g(x, np.empty(n), out=out)``).
    """
    if SIMULATED:
        return SimulatedNumbaObject(spec.name)
    sigs = [loop.signature for loop in spec.loops]
    try:
        if spec.layout is None:
            return numba.vectorize(sigs, target="cuda")(spec.pyfunc)
        if not spec.layout.output_only_dims:
            return numba.guvectorize(sigs, spec.layout.text, target="cuda")(spec.pyfunc)
        return _guvectorize_with_size_input(spec)
    except Exception as exc:
        raise CudaCompileError(f"kernel {spec.name!r}: Numba's CUDA ufunc object failed to "
                               f"build: {exc}") from exc


def _guvectorize_with_size_input(spec: KernelSpec) -> Any:
    layout = spec.layout
    dims = layout.output_only_dims
    if spec.nout != 1 or spec.nin > 3:
        raise NotImplementedError("only one output and up to three inputs are supported")
    dev = cuda.jit(device=True)(spec.pyfunc)
    if spec.nin == 1:
        def with_size(a0, size, out):
            dev(a0, out)
    elif spec.nin == 2:
        def with_size(a0, a1, size, out):
            dev(a0, a1, out)
    else:
        def with_size(a0, a1, a2, size, out):
            dev(a0, a1, a2, out)
    sigs = []
    for loop in spec.loops:
        args, _ = sigutils.normalize_signature(loop.signature)
        size = types.Array(from_dtype(loop.dtype), len(dims), "A")
        sigs.append(types.void(*args[: spec.nin], size, *args[spec.nin:]))
    ins = ",".join(f"({','.join(d)})" for d in layout.inputs)
    outs = ",".join(f"({','.join(d)})" for d in layout.outputs)
    text = f"{ins},({','.join(dims)})->{outs}"
    with_size.__name__ = spec.name
    return numba.guvectorize(sigs, text, target="cuda")(with_size)
