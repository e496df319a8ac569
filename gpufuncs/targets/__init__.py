"""Targets: where a kernel is compiled and run.

Each target compiles a :class:`~gpufuncs.spec.KernelSpec` (lazily, once, for the kernel that owns
it) and prepares an executor for each validated :class:`~gpufuncs.targets.base.Plan`. Targets
import nothing from dispatch; dispatch asks them which arguments are their arrays
(:data:`DEVICE_ARRAYS`) and which host target ``auto`` should pick (:func:`auto_host_target`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CudaUnavailableError, TargetUnavailableError
from .base import (
    DEVICE,
    HOST,
    NUMPY_SCALAR,
    SCALAR,
    UNKEYABLE,
    Arg,
    DeviceArrays,
    Executor,
    Plan,
    Target,
)
from .cpu import CpuTarget
from .cpu import auto_host_target as _auto_host_target
from .cpu.auto import AutoTarget
from .cuda.recognize import CudaArrays


class Targets:
    """The one registry of targets: every name ``target=`` accepts, each target object (made on
    first use: ``cuda`` must never need a GPU to import gpufuncs), and ``auto``'s host state."""

    #: The names accepted by ``target=``.
    names: tuple[str, ...] = ("auto", "cpu", "parallel", "cuda")

    def __init__(self) -> None:
        self._made: dict[str, Target] = {"cpu": CpuTarget("cpu"), "parallel": CpuTarget("parallel")}
        #: ``target="auto"`` on host arrays: what it learned of this machine and of each kernel.
        self.auto_host = AutoTarget(self._made["cpu"], self._made["parallel"])

    def check(self, kernel: str, name: Any) -> None:
        """Raise ``ValueError`` naming ``kernel`` unless ``target=name`` is valid (checked when a
        call is parsed, before anything else is decided)."""
        if not isinstance(name, str) or name not in self.names:
            raise ValueError(f"{kernel}: unknown target {name!r}; valid targets: {', '.join(self.names)}")

    def get(self, name: str) -> Target:
        """Return the target called ``name`` (``cpu``, ``parallel`` or ``cuda``)."""
        if name == "cuda" and "cuda" not in self._made:
            from .cuda import CudaTarget

            self._made["cuda"] = CudaTarget()
        try:
            return self._made[name]
        except KeyError:
            concrete = ", ".join(n for n in self.names if n != "auto")
            raise ValueError(f"unknown target {name!r}; compiled targets: {concrete} "
                             "('auto' chooses one of them per call)") from None


TARGETS = Targets()
TARGET_NAMES = Targets.names
AUTO_HOST = TARGETS.auto_host
get_target = TARGETS.get
check_target = TARGETS.check

#: How each device target recognises its arrays (a class check, without importing its runtime).
DEVICE_ARRAYS: tuple[DeviceArrays, ...] = (CudaArrays(),)


def auto_host_target(spec: Any, plan: Plan, compiled: Callable[[str], Any]) -> tuple[str, Executor | None]:
    """The host target ``auto`` picks for ``plan``: ``("cpu", None)``, or ``("auto", executor)``
    whose executor picks ``cpu`` or ``parallel`` per call (see :mod:`.cpu.auto`)."""
    return _auto_host_target(AUTO_HOST, spec, plan, compiled)


def set_parallel_min_size(size: int | None) -> None:
    """Run ``auto`` host calls on ``parallel`` from ``size`` loop elements up, for every kernel.

    Parameters
    ----------
    size : int or None
        The threshold; ``None`` goes back to what ``auto`` learned per kernel and dtype.

    Notes
    -----
    It applies at once to every call of ``auto.ALWAYS_CPU`` (4096) loop elements or more; a
    smaller call signature keeps the target it was first resolved with.
    """
    AUTO_HOST.set_parallel_min_size(size)


def measured_crossovers() -> dict[str, float]:
    """The crossovers ``auto`` learned so far, in loop elements, by ``"kernel dtype"``."""
    return AUTO_HOST.measured_crossovers()


def available_targets() -> tuple[str, ...]:
    """Names of the concrete targets that can run on this machine now."""
    names = ["cpu", "parallel"]
    if get_target("cuda").unavailable_reason() is None:
        names.append("cuda")
    return tuple(names)


__all__ = [
    "AUTO_HOST",
    "DEVICE",
    "DEVICE_ARRAYS",
    "HOST",
    "NUMPY_SCALAR",
    "SCALAR",
    "TARGETS",
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
    "check_target",
    "get_target",
    "measured_crossovers",
    "set_parallel_min_size",
]
