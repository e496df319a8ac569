"""Targets: where a kernel is compiled and run.

Each target compiles a :class:`~gpufuncs.spec.KernelSpec` (lazily, once, for the kernel that owns
it) and prepares an executor for each validated :class:`~gpufuncs.targets.base.Plan`. Targets
import nothing from dispatch; dispatch asks them which arguments are their arrays
(:data:`DEVICE_ARRAYS`) and which host target ``auto`` should pick (:func:`auto_host_target`).
"""

from __future__ import annotations

from .base import (
    DEVICE,
    HOST,
    NUMPY_SCALAR,
    SCALAR,
    UNKEYABLE,
    Arg,
    CudaUnavailableError,
    DeviceArrays,
    Executor,
    Plan,
    Target,
    TargetUnavailableError,
)
from .cpu import CpuTarget, auto_host_target
from .cpu.auto import set_parallel_min_size
from .cuda.recognize import CudaArrays

#: Targets by name. ``cuda`` is created on first use (importing gpufuncs must never need a GPU).
_TARGETS: dict[str, Target] = {"cpu": CpuTarget("cpu"), "parallel": CpuTarget("parallel")}

#: The names accepted by ``target=``.
TARGET_NAMES: tuple[str, ...] = ("auto", "cpu", "parallel", "cuda")

#: How each device target recognises its arrays (a class check, without importing its runtime).
DEVICE_ARRAYS: tuple[DeviceArrays, ...] = (CudaArrays(),)


def get_target(name: str) -> Target:
    """Return the target called ``name`` (``cpu``, ``parallel`` or ``cuda``)."""
    if name == "cuda" and "cuda" not in _TARGETS:
        from .cuda import CudaTarget

        _TARGETS["cuda"] = CudaTarget()
    try:
        return _TARGETS[name]
    except KeyError:
        concrete = ", ".join(n for n in TARGET_NAMES if n != "auto")
        raise ValueError(f"unknown target {name!r}; compiled targets: {concrete} "
                         "('auto' chooses one of them per call)") from None


def available_targets() -> tuple[str, ...]:
    """Names of the concrete targets that can run on this machine now."""
    names = ["cpu", "parallel"]
    if get_target("cuda").unavailable_reason() is None:
        names.append("cuda")
    return tuple(names)


__all__ = [
    "DEVICE",
    "DEVICE_ARRAYS",
    "HOST",
    "NUMPY_SCALAR",
    "SCALAR",
    "TARGET_NAMES",
    "UNKEYABLE",
    "Arg",
    "CudaUnavailableError",
    "DeviceArrays",
    "Executor",
    "Plan",
    "Target",
    "TargetUnavailableError",
    "auto_host_target",
    "available_targets",
    "get_target",
    "set_parallel_min_size",
]
