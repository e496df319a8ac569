"""The few CUDA runtime services the cuda target uses, real or simulated.

Everything else in this package speaks to the GPU through one :class:`Runtime`: wrap a raw
stream handle, allocate stream-ordered device memory, copy, order streams, launch. On a real GPU
these are thin calls into ``cuda.core`` and ``cuda.bindings``; a launch is one
``cuLaunchKernel`` with a parameter buffer packed in advance (see ``launch.py``), through the
cheapest binding available (:meth:`Runtime.launcher`). Under ``NUMBA_ENABLE_CUDASIM=1`` the same
calls work on host memory, so the simulator runs the very kernels and launch logic of the real
path (only the last step, handing arguments to the kernel, differs).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .compat import SIMULATED

#: Threads per block. Every kernel here is memory-bound with one element per thread; 256 keeps
#: enough warps in flight per SM without depending on a kernel's register count. The simulator
#: runs one Python thread per CUDA thread, so it gets small blocks.
BLOCK = 16 if SIMULATED else 256

#: Stream handle values with a fixed meaning (the CUDA array interface's convention): 0 and 1
#: are the legacy default stream, 2 the per-thread default stream.
LEGACY_HANDLES = (0, 1)


def cupy_loaded() -> bool:
    """Whether this process has imported CuPy: then its pool serves the target's raw buffers
    (:meth:`Runtime.allocator`) and its launch call launches (:meth:`Runtime.launcher`).
    Importing it for that alone would cost more than it saves."""
    return "cupy" in sys.modules


def same_stream(a: int, b: int) -> bool:
    """Whether two raw stream handles name the same stream."""
    return a == b or (a in LEGACY_HANDLES and b in LEGACY_HANDLES)


class HostBuffer:
    """Host memory standing in for a device allocation (simulator) or a pinned staging buffer."""

    def __init__(self, nbytes: int) -> None:
        self.array = np.empty(max(nbytes, 1), np.uint8)
        self.ptr = self.array.ctypes.data
        self.size = nbytes



class _SimStream:
    """The simulator's stream: work runs when it is issued, so there is nothing to order."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def sync(self) -> None:
        """Nothing is ever pending."""

    def wait(self, other: Any) -> None:
        """Nothing is ever pending."""

    def record(self) -> _SimStream:
        return self


#: The process that initialised the driver: a child forked from it cannot use CUDA.
_initialised_in: int | None = None


def explain(err: Any, what: str) -> str:
    """The message for a ``CUresult`` other than success while doing ``what``; in a child
    forked after the driver was initialised (where every CUDA call fails), saying so."""
    message = f"CUDA error {err!r} while {what}"
    if _initialised_in is not None and os.getpid() != _initialised_in:
        message += ("; this process was forked from one that had initialised CUDA, and CUDA "
                    "cannot be used after a fork: start child processes with multiprocessing's "
                    "'spawn' or 'forkserver' start method")
    return message


def check(err: Any, what: str) -> None:
    """Raise ``RuntimeError`` for a ``CUresult`` other than success (see :func:`explain`)."""
    if int(err) != 0:
        raise RuntimeError(explain(err, what))


def _host_alloc(nbytes: int, flags: int) -> np.ndarray:
    """``nbytes`` of page-locked host memory from ``cuMemHostAlloc`` with ``flags`` (the current
    context must be set), as a byte array that frees it when the last view of it is dropped."""
    from cuda.bindings import driver

    err, address = driver.cuMemHostAlloc(nbytes, flags)
    if err == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise MemoryError(f"out of pinned host memory allocating {nbytes:,} bytes")
    if int(err) != 0:
        raise RuntimeError(explain(err, f"allocating {nbytes:,} bytes of pinned host memory"))
    owner = (ctypes.c_uint8 * nbytes).from_address(address)
    weakref.finalize(owner, driver.cuMemFreeHost, address)
    return np.frombuffer(owner, np.uint8)


def _portable_pinned(nbytes: int) -> np.ndarray:
    """Page-locked host memory pinned for every context (``CU_MEMHOSTALLOC_PORTABLE``), as a
    byte array: ``numba.cuda.pinned_array`` pins for the current context only, and copies
    another GPU makes from such memory run at pageable speed."""
    return _host_alloc(nbytes, 0x01)  # CU_MEMHOSTALLOC_PORTABLE


def _mapped_pinned(nbytes: int) -> tuple[np.ndarray, int]:
    """Page-locked host memory mapped into the current context's GPU address space, portable
    (pinned for every context): the host array of its bytes and its device address (under
    unified addressing the same value), where a kernel's stores land in host memory."""
    from cuda.bindings import driver

    words = _host_alloc(nbytes, 0x01 | 0x02)  # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
    err, address = driver.cuMemHostGetDevicePointer(words.ctypes.data, 0)
    check(err, "mapping pinned host memory into the GPU's address space")
    return words, int(address)


class Runtime:
    """One GPU through ``cuda.core``: streams by handle, a stream-ordered pool, copies, launches.

    There is one runtime per device, made by the cuda target's :class:`Runtimes`. On a machine
    with one GPU its primary context is made current in each thread that uses it, once, and left
    there. With several GPUs calls switch contexts, so each runtime makes its device's context
    current around its work (:meth:`activate`, :meth:`current`, :meth:`guarded`) and puts the
    caller's back after it: a CuPy user inside ``with cupy.cuda.Device(1):`` stays on device 1.
    """

    simulated = False

    def __init__(self, device: int = 0) -> None:
        from cuda.bindings import driver

        self._driver, self._launch_kernel = driver, driver.cuLaunchKernel
        self.ordinal = device
        #: Whether calls must switch to this device's context and back (several GPUs visible).
        self.switching = device_count() > 1
        err, handle = driver.cuDeviceGet(device)
        check(err, f"finding device {device}")
        #: Streaming multiprocessors: how many blocks a launch needs to use the whole GPU.
        self.multiprocessors = self._attribute(handle, "MULTIPROCESSOR_COUNT")
        #: ``(major, minor)``: the architecture kernels are compiled and cached for.
        self.compute_capability = (self._attribute(handle, "COMPUTE_CAPABILITY_MAJOR"),
                                   self._attribute(handle, "COMPUTE_CAPABILITY_MINOR"))
        #: Has the attribute ``here`` in each thread whose device is bound (:meth:`bind_thread`);
        #: executors test it inline (``hasattr``, a C call), not by calling a method each time.
        self.bound = threading.local()
        # The primary context, which numba, CuPy and torch share. Through cuda.bindings alone:
        # cuda.core (streams, the pool) is imported on first need, for its 0.1 s.
        err, self._context = driver.cuDevicePrimaryCtxRetain(handle)
        check(err, f"retaining device {device}'s primary context")
        self._context_id = int(self._context)
        previous = driver.cuCtxGetCurrent()[1]
        (err,) = driver.cuCtxSetCurrent(self._context)
        check(err, f"making device {device}'s context current")
        self.bound.here = True
        self._streams: dict[int, Any] = {}
        self._functions: dict[Any, Any] = {}
        self._handles: dict[int, Any] = {}
        self._flag_ring: Any = None
        self._device: Any = None
        self._pool: Any = None
        if self.switching and previous is not None and int(previous) != self._context_id:
            self.restore(previous)  # creating a runtime changes no one's current device

    def _attribute(self, handle: Any, name: str) -> int:
        drv = self._driver
        err, value = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"),
                                              handle)
        check(err, f"reading device {self.ordinal}'s {name}")
        return int(value)

    @property
    def device(self) -> Any:
        """The ``cuda.core`` ``Device`` (imported and set up on first use)."""
        return self._made_once("_device", self._new_device)

    @property
    def pool(self) -> Any:
        """The target's own stream-ordered pool, made on first use and kept reserved between
        calls like CuPy's and torch's caching allocators: with the driver's default release
        threshold (0) every synchronize hands the memory back to the OS and the next allocation
        maps it again."""
        return self._made_once("_pool", self._new_pool)

    def _made_once(self, name: str, make: Callable[[], Any]) -> Any:
        found = getattr(self, name)
        if found is None:
            with _CORE_OBJECTS:
                found = getattr(self, name)
                if found is None:
                    found = make()
                    setattr(self, name, found)
        return found

    def _new_device(self) -> Any:
        from cuda.core import Device

        device = Device(self.ordinal)
        with self.current():
            device.set_current()  # cuda.core's own per-object set-up
        return device

    def _new_pool(self) -> Any:
        from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions

        pool = DeviceMemoryResource(self.device, DeviceMemoryResourceOptions())
        try:
            self._set_pool_attribute(pool, "RELEASE_THRESHOLD", 2**63)
        except Exception as exc:  # only slower allocations after a synchronize
            warnings.warn(f"gpufuncs: could not keep the CUDA memory pool reserved: {exc}",
                          RuntimeWarning, stacklevel=4)
        if self.switching:
            self._open_pool_to_peers(pool)
        return pool

    def _open_pool_to_peers(self, pool: Any) -> None:
        """Let every GPU that can reach this one use the pool's memory. Pool memory is mapped
        on its own device only (peer access enabled on contexts does not extend to pools), so
        without this a copy of a result made with another GPU's context current fails, where
        ``cuMemAlloc`` memory (Numba's, CuPy's, torch's) works."""
        from cuda.core import Device

        try:
            peers = [d.device_id for d in Device.get_all_devices()
                     if d.device_id != self.ordinal and d.can_access_peer(self.ordinal)]
            if peers:
                pool.peer_accessible_by = peers
        except Exception as exc:  # only cross-device use of results is affected
            warnings.warn(f"gpufuncs: could not open device {self.ordinal}'s memory pool to "
                          f"its peers: {exc}", RuntimeWarning, stacklevel=5)

    def set_pool_attribute(self, name: str, value: int) -> None:
        """Set ``CU_MEMPOOL_ATTR_<name>`` of the target's pool (e.g. ``USED_MEM_HIGH`` to 0)."""
        self._set_pool_attribute(self.pool, name, value)

    def _set_pool_attribute(self, pool: Any, name: str, value: int) -> None:
        drv = self._driver
        attr = getattr(drv.CUmemPool_attribute, f"CU_MEMPOOL_ATTR_{name}")
        (err,) = drv.cuMemPoolSetAttribute(self._pool_handle(pool), attr, drv.cuuint64_t(value))
        check(err, f"setting the memory pool's {name}")

    def pool_attribute(self, name: str) -> int:
        """Read ``CU_MEMPOOL_ATTR_<name>`` of the target's pool (e.g. ``USED_MEM_HIGH``)."""
        drv = self._driver
        attr = getattr(drv.CUmemPool_attribute, f"CU_MEMPOOL_ATTR_{name}")
        err, value = drv.cuMemPoolGetAttribute(self._pool_handle(self.pool), attr)
        check(err, f"reading the memory pool's {name}")
        return int(value)

    def _pool_handle(self, pool: Any) -> Any:
        handle = pool.handle
        return self._driver.CUmemoryPool(handle) if isinstance(handle, int) else handle

    def flag_ring(self) -> Any:
        """This GPU's :class:`~.fpflags.FlagRing` (mapped pinned memory), made on first need."""
        ring = self._flag_ring
        if ring is None:
            with _FLAG_RINGS:
                if self._flag_ring is None:
                    from .fpflags import FlagRing

                    words, address = self._mapped(FlagRing.nbytes())
                    self._flag_ring = FlagRing(words.view(np.uint32), address)
                ring = self._flag_ring
        return ring

    def _mapped(self, nbytes: int) -> tuple[np.ndarray, int]:
        """Zeroed page-locked host memory mapped into the GPU's address space: the host array
        and the device address of the same bytes."""
        with self.current():
            words, address = _mapped_pinned(nbytes)
        words[:] = 0
        return words, address

    def bind_thread(self) -> None:
        """Make the device current in this thread (cuda.core needs it per thread), once: with
        one GPU nothing else changes the context. (With several, :meth:`guarded` switches.)"""
        if not hasattr(self.bound, "here"):
            if not self.switching:
                (err,) = self._driver.cuCtxSetCurrent(self._context)
                check(err, f"making device {self.ordinal}'s context current")
            self.bound.here = True

    def activate(self) -> Any:
        """Make this device's context current; returns the context to put back after the work
        (``None``: nothing to put back, the context was current already; a null context: the
        thread had none, and is left with none, so the next CUDA user in it starts on device 0
        as it would have)."""
        drv = self._driver
        err, previous = drv.cuCtxGetCurrent()
        if err or int(previous) == self._context_id:
            # err: no usable driver here (a forked child): the work itself reports why.
            return None
        (err,) = drv.cuCtxSetCurrent(self._context)
        check(err, f"making device {self.ordinal}'s context current")
        return previous

    def restore(self, previous: Any) -> None:
        """Put back the context that :meth:`activate` replaced."""
        if previous is not None:
            (err,) = self._driver.cuCtxSetCurrent(previous)
            check(err, "restoring the caller's CUDA context")

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """This device's context current in the block, the caller's put back after it."""
        previous = self.activate()
        try:
            yield
        finally:
            self.restore(previous)

    def guarded(self, execute: Callable[..., Any]) -> Callable[..., Any]:
        """``execute`` run in this device's context (several GPUs), or ``execute`` itself: with
        one GPU the context is bound once per thread and a call pays nothing for devices.

        With several, a call whose thread is on this device already (see :meth:`on_device`)
        runs as it is; others make the context current and put the caller's back. The
        executor's ``plain`` entry (see ``device._plain``) is guarded the same way."""
        if not self.switching:
            return execute
        activate, restore, on_device = self.activate, self.restore, self.on_device()

        def guard(run: Callable[..., Any]) -> Callable[..., Any]:
            def in_context(*args: Any) -> Any:
                if on_device():
                    return run(*args)
                previous = activate()
                try:
                    return run(*args)
                finally:
                    restore(previous)
            return in_context

        guarded = guard(execute)
        plain = getattr(execute, "plain", None)
        if plain is not None:
            guarded.plain = guard(plain)  # type: ignore[attr-defined]
        return guarded

    def on_device(self) -> Callable[[], bool]:
        """``on_device()``: whether this device's (primary) context is current in the calling
        thread, told cheaply where CuPy is loaded: CuPy's ``cuCtxGetCurrent`` is a C call, a
        fraction of ``cuda.bindings``' with its wrapped handle. Without CuPy it answers
        ``False``: the caller then makes the context current itself (:meth:`activate`).
        (The runtime API's current device cannot tell: a thread with no context at all is on
        device 0 by its answer.)"""
        if not cupy_loaded():
            return lambda: False
        from cupy.cuda import driver

        current, ours = driver.ctxGetCurrent, self._context_id
        return lambda: current() == ours

    def stream(self, handle: int) -> Any:
        """The ``cuda.core`` stream for a raw ``cudaStream_t`` value (wrappers are cached)."""
        found = self._streams.get(handle)
        if found is None:
            from cuda.core import LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM, Stream

            # Borrowed, not owned: the caller's library keeps the stream alive.
            found = self._streams[handle] = (
                LEGACY_DEFAULT_STREAM if handle in LEGACY_HANDLES else
                PER_THREAD_DEFAULT_STREAM if handle == 2 else Stream.from_handle(handle))
        return found

    def new_stream(self) -> Any:
        """A new non-blocking stream of this device, owned by the target."""
        with self.current():
            return self.device.create_stream()

    def allocate(self, nbytes: int, stream: Any) -> Any:
        """Device memory from the pool, ordered on ``stream`` (freed there when dropped).

        Out of memory, the pool first gives back what it keeps reserved but unused, and tries
        once more; then it raises ``MemoryError`` with the size asked for.
        """
        for attempt in range(2):
            try:
                return self.pool.allocate(max(nbytes, 1), stream=stream)
            except Exception as exc:  # cuda.core's CUDAError: its message names the CUresult
                if "OUT_OF_MEMORY" not in str(exc):
                    raise
                if attempt == 0:
                    self.trim()
        raise MemoryError(f"CUDA out of memory allocating {nbytes:,} bytes on {self.device.name} "
                          f"({self.pool_attribute('USED_MEM_CURRENT'):,} bytes in use by gpufuncs' "
                          "pool)")

    def allocator(self, nbytes: int) -> Callable[[int], tuple[Any, int]]:
        """``allocate(handle) -> (buffer, address)``: ``nbytes`` of device memory ordered on
        the stream ``handle``, for a call signature's new outputs and temporaries (``buffer``
        keeps it alive).

        In a process that has imported CuPy, CuPy's pool serves them: it keeps its books on the
        host, where each free into the driver's stream-ordered pool is an operation on the
        stream, which a synchronize then waits for (measured on the H100: a call on a Numba
        array with a new output took 0.80x CuPy's own call from CuPy's pool, 0.99x from the
        driver's), and the process keeps one pool's reserve instead of two. Otherwise the
        target's pool is asked directly, and :meth:`allocate` (which retries out of memory)
        only where that fails: the wrappers' frames were a sixth of a small call's allocation.
        """
        if cupy_loaded():
            from_cupy = self.cupy_allocator(nbytes)

            def allocate_from_cupy(handle: int) -> tuple[Any, int]:
                try:
                    return from_cupy(handle)
                except MemoryError:  # CuPy's OutOfMemoryError: ours, which says how much it holds
                    buffer = self.allocate(nbytes, self.stream(handle))
                    return buffer, int(buffer.handle)
            return allocate_from_cupy
        pool_allocate, streams, size = self.pool.allocate, self._streams, max(nbytes, 1)

        def allocate(handle: int) -> tuple[Any, int]:
            stream = streams.get(handle)
            try:
                buffer = pool_allocate(size, stream=stream if stream is not None else self.stream(handle))
            except Exception:  # out of memory: trimmed and tried again, or the error explained
                buffer = self.allocate(nbytes, self.stream(handle))
            return buffer, int(buffer.handle)

        return allocate

    def cupy_stream(self, handle: int) -> Any:
        """A CuPy stream over the raw ``handle`` (not owned), to use as CuPy's current one."""
        import cupy

        from_external = getattr(cupy.cuda.Stream, "from_external", None)  # CuPy 14 on
        if from_external is None:
            return cupy.cuda.ExternalStream(handle)
        return from_external(self.stream(handle))

    def cupy_allocator(self, nbytes: int) -> Callable[..., tuple[Any, int]]:
        """``allocate(handle, current=False) -> (memory, address)``: ``nbytes`` from CuPy's
        pool on this device, ordered on the stream ``handle`` (``current``: the caller knows it
        is CuPy's current stream). CuPy's arrays and the raw buffers of :meth:`allocator`."""
        import cupy

        alloc, current_stream = cupy.cuda.alloc, cupy.cuda.get_current_stream
        size = max(nbytes, 1)

        def on_stream(handle: int, current: bool) -> Any:
            # CuPy's pool hands a freed block out again only on the stream it was allocated on.
            if current or same_stream(handle, current_stream().ptr):
                return alloc(size)
            with self.cupy_stream(handle):
                return alloc(size)

        def allocate(handle: int, current: bool = False) -> tuple[Any, int]:
            if self.switching:  # CuPy allocates on its current device
                with cupy.cuda.Device(self.ordinal):
                    memory = on_stream(handle, current)
            else:
                memory = on_stream(handle, current)
            return memory, memory.ptr

        return allocate

    def trim(self) -> None:
        """Give the memory the pool keeps reserved but unused back to the device."""
        (err,) = self._driver.cuMemPoolTrimTo(self._pool_handle(self.pool), 0)
        check(err, "trimming the memory pool")

    def copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """Asynchronous copy between unified addresses (host<->device or device<->device)."""
        if nbytes:
            (err,) = self._driver.cuMemcpyAsync(dst, src, nbytes, stream.handle)
            check(err, f"copying {nbytes} bytes")

    def function(self, kernel: Any) -> Any:
        """The ``CUfunction`` of a loaded ``CUkernel`` in the current context."""
        found = self._functions.get(kernel)
        if found is None:
            with self.current():
                err, found = self._driver.cuKernelGetFunction(kernel)
            check(err, "getting a kernel's function")
            self._functions[kernel] = found
        return found

    def launcher(self, kernel: Any, blocks: int,
                 pack: Callable[[Sequence[Any]], int]) -> Callable[[Sequence[Any], int], None]:
        """``launch(values, handle)``: ``kernel`` on ``blocks`` blocks of :data:`BLOCK` threads
        on the stream ``handle``, its parameters ``pack(values)`` (the address of the packed
        parameter pointers, see ``launch.Packer``).

        Through CuPy's Cython ``launchKernel`` where CuPy is already imported (its arguments are
        C integers, converted for less than ``cuda.bindings``' wrapped handles: the cheapest
        launch measured from Python), else ``cuda.bindings``' ``cuLaunchKernel``. Both call the
        driver in the thread's current context, the primary one (see :meth:`bind_thread`)."""
        function = self.function(kernel)
        if cupy_loaded():
            from cupy.cuda import driver

            address, launch_kernel = int(function), driver.launchKernel

            def launch_cupy(values: Sequence[Any], handle: int) -> None:
                launch_kernel(address, blocks, 1, 1, BLOCK, 1, 1, 0, handle, pack(values), 0)
            return launch_cupy
        streams, new_stream, launch_kernel = self._handles, self._driver.CUstream, self._launch_kernel

        def launch_bindings(values: Sequence[Any], handle: int) -> None:
            stream = streams.get(handle)
            if stream is None:
                stream = streams[handle] = new_stream(handle)
            (err,) = launch_kernel(function, blocks, 1, 1, BLOCK, 1, 1, 0, stream, pack(values), 0)
            if err:
                check(err, "launching a kernel")
        return launch_bindings

    def pinned(self, nbytes: int) -> np.ndarray:
        """Page-locked host memory (DMA-able at full PCIe speed), as a byte array; portable:
        pinned for every GPU's context, so any device's copies run at full speed from it."""
        with self.current():
            return _portable_pinned(max(nbytes, 1))


_SIM_LAUNCHES = threading.Lock()
_FLAG_RINGS = threading.Lock()
_CORE_OBJECTS = threading.RLock()  # a runtime's cuda.core device and pool, made once


class SimRuntime(Runtime):
    """The same services over host memory, for ``NUMBA_ENABLE_CUDASIM=1``."""

    simulated = True
    multiprocessors = 1

    def __init__(self, device: int = 0) -> None:  # nothing of the real runtime is needed
        self._streams: dict[int, Any] = {}
        self.ordinal, self.switching = device, False
        self.bound = types.SimpleNamespace(here=True)  # nothing to bind, in any thread
        self._flag_ring = None

    def _mapped(self, nbytes: int) -> tuple[np.ndarray, int]:
        words = np.zeros(max(nbytes, 1), np.uint8)  # the kernels' pointers are host addresses
        return words, words.ctypes.data

    def bind_thread(self) -> None:
        """Nothing to bind."""

    def activate(self) -> None:
        """There are no contexts."""

    def restore(self, previous: Any) -> None:
        """There are no contexts."""

    def stream(self, handle: int) -> Any:
        return self._streams.setdefault(handle, _SimStream(handle))

    def new_stream(self) -> Any:
        return _SimStream(-1)

    def allocate(self, nbytes: int, stream: Any) -> HostBuffer:
        return HostBuffer(nbytes)

    def allocator(self, nbytes: int) -> Callable[[int], tuple[Any, int]]:
        def allocate(handle: int) -> tuple[Any, int]:
            buffer = HostBuffer(nbytes)
            return buffer, buffer.ptr
        return allocate

    def copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        ctypes.memmove(dst, src, nbytes)

    def launcher(self, kernel: Any, blocks: int,
                 pack: Callable[[Sequence[Any]], Any]) -> Callable[[Sequence[Any], int], None]:
        """``launch(values, handle)``: ``kernel`` is the ``cuda.jit`` dispatcher here, and
        ``pack(values)`` its logical arguments. The simulator swaps the kernel's ``cuda``
        global for its own during a launch, so launches from several threads run one at a time."""
        def launch(values: Sequence[Any], handle: int) -> None:
            with _SIM_LAUNCHES:
                kernel[blocks, BLOCK](*pack(values))
        return launch

    def pinned(self, nbytes: int) -> np.ndarray:
        return np.empty(max(nbytes, 1), np.uint8)


@functools.cache
def device_count() -> int:
    """The number of CUDA devices this process sees (1 under the simulator)."""
    if SIMULATED:
        return 1
    global _initialised_in
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    check(err, "initialising the driver")
    _initialised_in = os.getpid()
    err, count = driver.cuDeviceGetCount()
    check(err, "counting devices")
    return int(count)


def current_device() -> int:
    """The device of the calling thread's current context (0 when it has none), where host
    arrays run without ``device=``, as CuPy's and torch's current device."""
    if device_count() == 1:
        return 0
    from cuda.bindings import driver

    err, context = driver.cuCtxGetCurrent()
    if err or not int(context):  # err: no usable driver (a forked child): the work reports why
        return 0
    err, device = driver.cuCtxGetDevice()
    return int(device) if int(err) == 0 else 0


class Runtimes:
    """The runtime of each GPU, owned by the cuda target: made on a GPU's first use (never at
    import), one per GPU, from any thread."""

    def __init__(self) -> None:
        self._made: dict[int, Runtime] = {}
        self._lock = threading.Lock()

    def get(self, device: int = 0) -> Runtime:
        """The runtime of GPU ``device`` (created here on its first use)."""
        found = self._made.get(device)
        if found is None:
            with self._lock:
                found = self._made.get(device)
                if found is None:
                    found = self._made[device] = SimRuntime(device) if SIMULATED else Runtime(device)
        return found

    def existing(self) -> list[Runtime]:
        """The runtimes created so far (none before the first cuda call); creates none."""
        return list(self._made.values())
