"""Compiling kernels for the cuda target from the same scalar definitions.

The scalar function becomes a CUDA device function (``cuda.jit(device=True)``), called by the
templates of :mod:`.kernels`; :class:`CudaKernels` compiles a template per loop dtype and argument
types on first use, and loads it. Compiled kernels are kept on disk as cubins (:mod:`.cubins`),
which a later process loads with the driver alone: numba-cuda is imported only to compile. Numba's
own CUDA ufunc objects, which the call path never uses, are built on request for
``gpufuncs.get(name, "cuda")``.
"""

from __future__ import annotations

import threading
from typing import Any

import numba
import numpy as np
from numba.core import sigutils, types
from numba.np.numpy_support import from_dtype

from ...errors import CudaCompileError
from ...spec import KernelSpec, Loop
from ..base import REPLACEMENTS, compiling, no_flags, numpys_integer_division
from ..compose import compiled_body
from . import cubins
from .compat import SIMULATED, compiled_cubin, exact_remainder, loaded_kernel
from .launch import runs_elementwise
from .runtime import BLOCK, Runtime


def staged_dtype(loop: Loop, inputs: types.BaseTuple) -> np.dtype | None:
    """The loop type in which an elementwise kernel stages its array inputs (see
    ``kernels.ufunc_kernel``): the one loop type of the inputs that ``inputs`` (their Numba
    argument types) pass as arrays, whatever the scalars' types; ``None`` where the arrays have
    several loop types."""
    arrays = {dtype for dtype, arg in zip(loop.inputs, inputs) if isinstance(arg, types.CPointer)}
    if len(arrays) > 1:
        return None
    return arrays.pop() if arrays else loop.inputs[0]


def elements_per_thread(spec: KernelSpec, staged: np.dtype | None, n: int, multiprocessors: int) -> int:
    """Loop elements per thread: for elementwise kernels whose array inputs are ``staged`` (see
    :func:`staged_dtype`), 16 bytes of each input in flight, where ``n`` elements give every one
    of the GPU's ``multiprocessors`` a block that way. Fewer elements take one per thread: the
    call then waits for the kernel's latency, not for memory bandwidth, and four elements in a
    thread compute one after the other (measured on an H100 at 10^3 float32 elements: 2.6 us
    against 2.2 us of GPU time, the same as CuPy's). Array inputs of several loop types take one
    element per thread (see ``kernels.ufunc_kernel``)."""
    if not runs_elementwise(spec) or staged is None:
        return 1
    per_thread = max(1, 16 // staged.itemsize)
    return per_thread if n >= BLOCK * per_thread * multiprocessors else 1


# numba-cuda's two copies of Numba's lowering of numbers, replaced while kernels compile as
# Numba's own are (see base.numpys_arithmetic), with its exact float remainder. Registered here,
# where the cuda target compiles: without numba-cuda, numba.cuda is Numba's old bundled target,
# which has no such modules (every compilation, on the CPU too, would fail importing them).
if not SIMULATED:
    REPLACEMENTS += [(name, attr, make)
                     for name in ("numba.cuda.cpython.numbers", "numba.cuda.np.math.numbers")
                     for attr, make in (("real_divmod_func_body", exact_remainder),
                                        ("_int_arith_flags", no_flags),
                                        ("int_divmod_signed", numpys_integer_division))]


class CudaKernels:
    """The device function and kernels of one kernel spec, compiled per argument types on demand.

    :meth:`get` returns what the runtime launches (a loaded ``CUkernel`` on a GPU, the
    ``cuda.jit`` dispatcher under the simulator) and the loop elements each thread handles.
    """

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self._device_function: Any = None  # made on the first compilation (see device_function)
        self._dispatchers: dict[tuple[str, int, np.dtype | None], Any] = {}
        self._launchable: dict[tuple[Any, ...], tuple[Any, int]] = {}
        self._lock = threading.Lock()
        self._numba_object: Any = None
        self._raising: dict[str, bool] = {}  # loop signature -> whether the kernel can raise

    @property
    def device_function(self) -> Any:
        """The scalar function as a CUDA device function; kernels and ``@njit`` helpers its body
        calls become device functions too (see :mod:`.compose`). Made on first need: a process
        whose kernels all come from the disk cache never imports numba-cuda's compiler."""
        if self._device_function is None:
            from .compose import kernel_device_function

            self._device_function = kernel_device_function(self.spec)
        return self._device_function

    def numba_object(self) -> Any:
        """Numba's own CUDA ufunc object for this spec (see :func:`numba_object`), built once."""
        with self._lock:
            if self._numba_object is None:
                self._numba_object = numba_object(self.spec)
        return self._numba_object

    def get(self, loop: Loop, argtypes: tuple[types.Type, ...], n: int,
            runtime: Runtime) -> tuple[Any, int]:
        """The launchable kernel for the declared ``loop`` and Numba argument types over ``n``
        loop elements on ``runtime``'s GPU (from the disk cache, else compiled, on first use),
        and the loop elements each of its threads handles."""
        per_thread = elements_per_thread(self.spec, self._staged(loop, argtypes), n,
                                         runtime.multiprocessors)
        key = (loop.signature, argtypes, per_thread, runtime.ordinal)
        found = self._launchable.get(key)
        if found is None:
            with self._lock:
                found = self._launchable.get(key)
                if found is None:
                    found = self._launchable[key] = self._load(loop, argtypes, per_thread, runtime)
        return found, per_thread

    def _load(self, loop: Loop, argtypes: tuple[types.Type, ...], per_thread: int,
              runtime: Runtime) -> Any:
        """The kernel from the disk cache, else compiled (refused if it can raise), then saved."""
        key = None if SIMULATED else cubins.entry_key(self.spec, loop, argtypes, per_thread, runtime)
        found = None if key is None else cubins.load(key)
        if found is None:
            found = self._compile(loop, argtypes, per_thread, runtime, key)
        return found

    def _refuse_raising(self, loop: Loop) -> None:
        """Refuse a kernel that can raise an exception: a CUDA kernel cannot report one (numba-cuda
        drops it outside debug builds, and the thread leaves its output unwritten), so the call
        would return a silently wrong answer. Decided once per loop, before the first launch,
        from the kernel compiled for the CPU (see ``cpu.loops.may_raise``; a kernel that
        compiles for the GPU only is let through)."""
        from ..cpu import CpuKernel

        raising = self._raising.get(loop.signature)
        if raising is None:
            try:
                raising = CpuKernel(self.spec, "cpu").may_raise(loop)
            except Exception:  # nothing to tell from
                raising = False
            self._raising[loop.signature] = raising
        if raising:
            raise TypeError(f"{self.spec.name}: this kernel can raise an exception, which a CUDA "
                            "kernel cannot report (the GPU would leave the element unwritten); run "
                            "it with target='cpu' or 'parallel', or return NaN instead of raising")

    def _staged(self, loop: Loop, argtypes: tuple[types.Type, ...]) -> np.dtype | None:
        """:func:`staged_dtype` of an elementwise kernel's inputs (``argtypes[0]``)."""
        return staged_dtype(loop, argtypes[0]) if runs_elementwise(self.spec) else None

    def _dispatcher(self, loop: Loop, per_thread: int, staged: np.dtype | None) -> Any:
        found = self._dispatchers.get((loop.signature, per_thread, staged))
        if found is None:
            from numba import cuda

            from .kernels import gufunc_kernel, ufunc_kernel

            spec = self.spec
            zeros = tuple(d.type(0) for d in loop.inputs + loop.outputs)  # a type per argument
            if runs_elementwise(spec):
                body = ufunc_kernel(self.device_function, zeros[: spec.nin], per_thread, staged)
            else:
                body = gufunc_kernel(self.device_function, zeros)
            found = cuda.jit(body)  # (cached on disk as cubins, not by numba-cuda: see .cubins)
            self._dispatchers[(loop.signature, per_thread, staged)] = found
        return found

    def _compile(self, loop: Loop, argtypes: tuple[types.Type, ...], per_thread: int,
                 runtime: Runtime, key: str | None) -> Any:
        """Compile with numba-cuda (for ``runtime``'s GPU: its context is current), refuse a
        kernel that can raise, and save the cubin under ``key`` (``None``: not cached)."""
        try:
            dispatcher = self._dispatcher(loop, per_thread, self._staged(loop, argtypes))
            if SIMULATED:
                compiled = dispatcher
            else:
                with compiling(), runtime.current():
                    compiled = dispatcher.compile(argtypes)
                    entry = compiled_cubin(compiled)
        except Exception as exc:
            raise CudaCompileError(
                f"kernel {self.spec.name!r} failed to compile for target 'cuda' "
                f"({loop.types} loop, arguments {argtypes}): {exc}"
            ) from exc
        self._refuse_raising(loop)
        if SIMULATED:
            return compiled
        if entry is None:  # code that needs numba-cuda's module set-up: loaded by numba-cuda
            with runtime.current():
                return loaded_kernel(compiled)
        if key is not None:
            cubins.save(key, *entry)
        return cubins.kernel_from(*entry)


# -- Numba's own CUDA ufunc objects (what gf.get(name, target="cuda") returns) -----------------
class SimulatedNumbaObject:
    """Stands in for Numba's CUDA ufunc object, which the CUDA simulator cannot build or run."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.__name__}: Numba's CUDA ufunc objects do not run under "
                                  f"NUMBA_ENABLE_CUDASIM=1; call gpufuncs.{self.__name__}(...) instead")


def numba_object(spec: KernelSpec) -> Any:
    """Numba's ``@vectorize`` / ``@guvectorize`` (``target="cuda"``) object for ``spec``.

    A gufunc with output-only core dimensions (``"()->(n)"``) cannot be expressed in Numba
    (numba#2797); its Numba object takes one extra input after the real ones whose core shape
    gives those sizes (for ``hermite_norm``: ``g(x, np.empty(n), out=out)``).
    """
    if SIMULATED:
        return SimulatedNumbaObject(spec.name)
    from numba import cuda

    from .compose import DEVICE_OPTIONS, for_device

    sigs = [loop.signature for loop in spec.loops]
    try:
        if spec.layout is None:
            return numba.vectorize(sigs, target="cuda")(for_device(spec.pyfunc))
        if not spec.layout.output_only_dims:
            body = compiled_body(spec, for_device, cuda.jit(**DEVICE_OPTIONS))
            return numba.guvectorize(sigs, spec.layout.text, target="cuda")(body)
        return _guvectorize_with_size_input(spec)
    except Exception as exc:
        raise CudaCompileError(f"kernel {spec.name!r}: Numba's CUDA ufunc object failed to "
                               f"build: {exc}") from exc


def _guvectorize_with_size_input(spec: KernelSpec) -> Any:
    from .compose import device_function

    layout = spec.layout
    dims = layout.output_only_dims
    if spec.nout != 1 or spec.nin > 3:
        raise NotImplementedError("only one output and up to three inputs are supported")
    dev = device_function(spec.pyfunc)
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
        size = types.Array(from_dtype(loop.inputs[0]), len(dims), "A")
        sigs.append(types.void(*args[: spec.nin], size, *args[spec.nin:]))
    ins = ",".join(f"({','.join(d)})" for d in layout.inputs)
    outs = ",".join(f"({','.join(d)})" for d in layout.outputs)
    text = f"{ins},({','.join(dims)})->{outs}"
    with_size.__name__ = spec.name
    return numba.guvectorize(sigs, text, target="cuda")(with_size)
