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
import importlib
import os
from typing import Any

from ...spec import KernelSpec
from ..base import DEVICE, Executor, Plan, Target


@functools.cache
def _unavailable_reason() -> str | None:
    try:
        from numba import cuda
    except ImportError as exc:  # pragma: no cover - depends on the install
        return f"numba-cuda is not installed ({exc}); install gpufuncs[cuda]"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return None
    try:
        if not cuda.is_available():
            return "no CUDA driver or no CUDA GPU was found (numba.cuda.is_available() is False)"
        cuda.get_current_device()
    except Exception as exc:  # driver present but broken, device busy, ...
        return f"CUDA could not be initialised: {exc}"
    try:
        importlib.import_module("cuda.core")  # the launch layer
    except ImportError as exc:  # pragma: no cover - depends on the install
        return f"cuda-core is not installed ({exc}); install gpufuncs[cuda]"
    return None


class CudaTarget(Target):
    """Kernels compiled with numba-cuda and launched on the GPU through ``cuda.core``."""

    name = "cuda"
    options = ("stream",)

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

    def prepare(self, spec: KernelSpec, compiled: Any, plan: Plan) -> Executor:
        """Device arrays run in place; host arrays go through pinned, pipelined chunks."""
        from . import device, host  # imported on the first call: they need numba.cuda
        from .runtime import get_runtime

        # A call signature may first be seen in a thread that never used CUDA (a Dask worker
        # thread): loading kernels and allocating need the context current there too.
        get_runtime().bind_thread()
        arrays = [*plan.inputs, *(plan.outs or ()), *((plan.where,) if plan.where else ())]
        on_device = any(a.role == DEVICE for a in arrays)
        return (device if on_device else host).prepare(spec, compiled, plan)
