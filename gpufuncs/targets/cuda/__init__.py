"""The ``cuda`` target (in progress): availability detection.

Importing this package never initialises CUDA; :meth:`CudaTarget.unavailable_reason` does, once.
"""

from __future__ import annotations

import functools
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
    return None


class CudaTarget(Target):
    """Kernels compiled with numba-cuda and launched on the GPU."""

    name = "cuda"

    def unavailable_reason(self) -> str | None:
        return _unavailable_reason()

    def compile(self, spec: KernelSpec) -> Any:
        raise NotImplementedError("the cuda target is not implemented yet")

    def execute(self, spec, compiled, plan: Plan, inputs, outs, where, **options) -> tuple[Any, ...]:
        raise NotImplementedError("the cuda target is not implemented yet")
