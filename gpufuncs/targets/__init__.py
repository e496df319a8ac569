"""Targets: where a kernel is compiled and run.

Each target knows how to compile a :class:`~gpufuncs.spec.KernelSpec` (lazily, once, by the
kernel that owns it) and how to execute a validated :class:`~gpufuncs.targets.base.Plan`. Kernel
modules never import a target: a new target slots in here without touching them.
"""

from __future__ import annotations

from .base import CudaUnavailableError, Plan, Target, TargetUnavailableError
from .cpu import CpuTarget

#: Targets by name. ``cuda`` is imported lazily (importing gpufuncs must never need a GPU).
_TARGETS: dict[str, Target] = {"cpu": CpuTarget("cpu"), "parallel": CpuTarget("parallel")}

#: The names accepted by ``target=``.
TARGET_NAMES: tuple[str, ...] = ("auto", "cpu", "parallel", "cuda")


def get_target(name: str) -> Target:
    """Return the target called ``name`` (``cpu``, ``parallel`` or ``cuda``)."""
    if name == "cuda" and "cuda" not in _TARGETS:
        from .cuda import CudaTarget

        _TARGETS["cuda"] = CudaTarget()
    try:
        return _TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; valid targets: {', '.join(TARGET_NAMES)}") from None


def available_targets() -> tuple[str, ...]:
    """Names of the concrete targets that can run on this machine now."""
    names = ["cpu", "parallel"]
    if get_target("cuda").unavailable_reason() is None:
        names.append("cuda")
    return tuple(names)


__all__ = [
    "TARGET_NAMES",
    "CudaUnavailableError", "Plan", "Target", "TargetUnavailableError", "available_targets", "get_target"]
