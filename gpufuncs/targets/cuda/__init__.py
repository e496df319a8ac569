"""The ``cuda`` target: the same scalar kernels, compiled with numba-cuda, launched on the GPU.

Modules:

* ``compile`` -- the scalar function as a device function, one ``cuda.jit`` kernel per arity
  (cached on disk), and Numba's own CUDA ufunc objects for ``gpufuncs.get(name, "cuda")``;
* ``launch`` -- a validated call on device arrays: streams, operands, outputs, strides, launch;
* ``arrays`` -- Numba, CuPy, torch, ``__cuda_array_interface__`` and DLPack arrays, and new
  outputs of the first input's kind;
* ``host`` -- host NumPy arrays, moved in pinned, pipelined chunks;
* ``runtime`` -- streams, the memory pool, copies and launches through ``cuda.core`` (or the
  CUDA simulator under ``NUMBA_ENABLE_CUDASIM=1``).

The public call path never goes through Numba's CUDA ufunc dispatcher, which costs close to a
millisecond per call. Importing this package never initialises CUDA; the first call does.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from ...spec import KernelSpec
from ..base import Plan, Target


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

    def execute(
        self,
        spec: KernelSpec,
        compiled: Any,
        plan: Plan,
        inputs: list[Any],
        outs: tuple[Any, ...] | None,
        where: Any,
        stream: Any = None,
        **options: Any,
    ) -> tuple[Any, ...]:
        """Run ``plan``: on device arrays in place, on host arrays through pinned chunks."""
        from . import host, launch  # imported on the first call: they need numba.cuda

        on_device = launch._is_device_array
        run = launch.run if any(on_device(a) for a in (*inputs, *(outs or ()))) else host.run
        return run(spec, compiled, plan, inputs, outs, where, stream)
