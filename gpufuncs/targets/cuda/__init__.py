"""The ``cuda`` target: the same scalar kernels, compiled with numba-cuda, launched on the GPU.

Modules:

* ``recognize`` -- which arguments are CUDA arrays (imported by dispatch; touches no GPU);
* ``kernels`` -- the two kernel templates (elementwise, generalized) for any arity;
* ``compile`` -- the scalar function as a device function, the templates compiled per argument
  types (cached on disk), and Numba's own CUDA ufunc objects for ``gpufuncs.get(name, "cuda")``;
* ``launch`` -- launch plans: indexing, grid and packed kernel parameters, decided per layout;
* ``device`` -- the executor of calls with device arrays;
* ``host`` -- the executor of calls on host NumPy arrays, moved in pinned, pipelined chunks;
* ``arrays`` -- Numba, CuPy, torch, ``__cuda_array_interface__`` and DLPack arrays: pointers,
  streams, and new outputs of the first input's kind;
* ``runtime`` -- streams, the memory pool, copies and ``cuLaunchKernel`` (or the CUDA simulator
  under ``NUMBA_ENABLE_CUDASIM=1``);
* ``compat`` -- the simulator's stand-ins and the private APIs used, in one place.

The call path never goes through Numba's CUDA ufunc dispatcher, which costs close to a
millisecond per call. Importing this package never initialises CUDA; the first call does.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from typing import Any

import numpy as np

from ...spec import KernelSpec
from ..base import DEVICE, Executor, Plan, Target, bounds_checked


@functools.cache
def _unavailable_reason() -> str | None:
    """Why the cuda target cannot run here, or ``None``. Asked of the driver through
    ``cuda.bindings``, without importing ``numba.cuda`` (0.3 s), which only a compilation needs
    (a process whose kernels are all in the disk cache never imports it)."""
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed; install gpufuncs[cuda]"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return None
    if os.environ.get("NUMBA_DISABLE_CUDA", "0") not in ("", "0"):
        return "CUDA is disabled (NUMBA_DISABLE_CUDA is set)"
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if int(err) == 0:
            err, count = driver.cuDeviceGetCount()
    except Exception as exc:  # no libcuda: cuda.bindings cannot load the driver
        return f"no CUDA driver was found ({type(exc).__name__} loading libcuda)"
    if int(err) != 0:
        return f"CUDA could not be initialised ({err!r})"
    if count == 0:
        return "no CUDA GPU was found"
    if importlib.util.find_spec("cuda.core") is None:  # (not imported: 0.1 s, see runtime.py)
        return "cuda-core is not installed; install gpufuncs[cuda]"
    return None


def call_devices(spec: KernelSpec, plan: Plan, count: int) -> tuple[int, ...] | None:
    """The GPUs a call runs on: where its device arrays live, else ``device=`` (an ordinal, or
    ``'all'``: every GPU, for host arrays), else ``None``: the calling thread's current GPU,
    read on each call.

    Raises ``ValueError`` naming the kernel and the devices for arrays on different GPUs, an
    ``out=`` on another GPU than the inputs, and a ``device=`` that is not a visible GPU or not
    where the arrays are.
    """
    names = (*spec.input_names, *(f"out[{k}]" if spec.nout > 1 else "out" for k in range(spec.nout)))
    named = [(name, arg) for name, arg in zip(names, (*plan.inputs, *(plan.outs or ())))]
    if plan.where is not None:
        named.append(("where", plan.where))
    placed = [(name, arg.device) for name, arg in named if arg.role == DEVICE and arg.device is not None]
    wanted = plan.device
    if wanted is not None and wanted != "all":
        if isinstance(wanted, bool) or not isinstance(wanted, int | np.integer):
            raise ValueError(f"{spec.name}: device must be a GPU ordinal or 'all', got {wanted!r}")
        if not 0 <= wanted < count:
            raise ValueError(f"{spec.name}: device={wanted} is not a visible GPU "
                             f"({count} visible: 0 to {count - 1})")
    if not placed:
        if wanted is None:
            return None
        return tuple(range(count)) if wanted == "all" else (int(wanted),)
    first_name, first = placed[0]
    for name, device in placed[1:]:
        if device != first:
            what = "out= is" if name.startswith("out") else f"{name!r} is"
            raise ValueError(f"{spec.name}: {what} on cuda:{device} but {first_name!r} is on "
                             f"cuda:{first}; a call runs on one GPU (move the arrays to one device)")
    if wanted == "all":
        raise ValueError(f"{spec.name}: device='all' splits host arrays across the GPUs; device "
                         f"arrays run where they live (cuda:{first}), so leave device= out")
    if wanted is not None and int(wanted) != first:
        raise ValueError(f"{spec.name}: device={wanted} but the device arrays are on cuda:{first}")
    return (first,)


class CudaTarget(Target):
    """Kernels compiled with numba-cuda and launched on the GPU through ``cuda.core``.

    The target owns the state it keeps between calls: :attr:`runtimes`, each GPU's runtime
    (memory pool, streams, loaded kernels' functions), made on a GPU's first use; and the host
    pipeline's lanes, threads and pinned result pool (:meth:`host_resources`). Tests and
    benchmarks reach them through the registered target, ``gpufuncs.targets.get_target("cuda")``.
    """

    name = "cuda"
    options = ("stream", "device")

    def __init__(self) -> None:
        from .runtime import Runtimes  # (numpy and ctypes only: no CUDA before the first call)

        #: Each GPU's :class:`~.runtime.Runtime` (``runtimes.get(device)``), made on first use.
        self.runtimes: Runtimes = Runtimes()
        self._host_resources: Any = None  # host.Resources, made on the first host-array call
        self._lock = threading.Lock()

    def unavailable_reason(self) -> str | None:
        return _unavailable_reason()

    def compile(self, spec: KernelSpec) -> Any:
        """The :class:`~.compile.CudaKernels` of ``spec`` (kernels compile per call types)."""
        from .compile import CudaKernels

        return CudaKernels(spec)

    def public_object(self, compiled: Any) -> Any:
        """Numba's ``@vectorize`` / ``@guvectorize`` (``target="cuda"``) object, built on request:
        the call path never uses it, so a first cuda call does not pay for it."""
        return compiled.numba_object()

    def host_resources(self) -> Any:
        """The host pipeline's :class:`~.host.Resources` (each GPU's lanes, the copy threads,
        the pinned result pool), made on first need."""
        with self._lock:  # one set per target: the lanes and the pool's budget are per GPU / process
            if self._host_resources is None:
                from .host import Resources  # imported on the first call

                self._host_resources = Resources(self.runtimes)
            return self._host_resources

    def prepare(self, spec: KernelSpec, compiled: Any, plan: Plan) -> Executor:
        """Device arrays run in place, on their GPU; host arrays go through pinned, pipelined
        chunks, on ``device=`` (one GPU or all) or the current GPU."""
        from . import device, host  # imported on the first call: they need the GPU's libraries
        from .runtime import device_count
        if bounds_checked(spec):
            raise TypeError(f"{spec.name}: bounds checks are on (boundscheck=True, or "
                            "GPUFUNCS_BOUNDSCHECK/NUMBA_BOUNDSCHECK), and numba-cuda cannot check "
                            "indices in a GPU kernel; run it with target='cpu' or 'parallel' to "
                            "find an out-of-range index")
        devices = call_devices(spec, plan, device_count())
        arrays = [*plan.inputs, *(plan.outs or ()), *((plan.where,) if plan.where else ())]
        if not any(a.role == DEVICE for a in arrays):
            return host.prepare(spec, compiled, plan, devices, self.host_resources())
        # A call signature may first be seen in a thread that never used CUDA (a Dask worker
        # thread): loading kernels and allocating need the context current there too.
        runtime = self.runtimes.get(devices[0])
        with runtime.current():
            return device.prepare(spec, compiled, plan, runtime)
