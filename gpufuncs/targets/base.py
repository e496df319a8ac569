"""What every target provides, and the validated call it receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec import KernelSpec, Loop


class TargetUnavailableError(RuntimeError):
    """The requested target cannot run on this machine."""


class CudaUnavailableError(TargetUnavailableError):
    """``target="cuda"`` was asked for, but no usable GPU, driver or numba-cuda is present."""


@dataclass(frozen=True)
class Plan:
    """A call that the dispatcher has fully validated; targets only execute it.

    Attributes
    ----------
    loop : Loop
        The dtype loop to run; every input is cast to ``loop.dtype``.
    result_dtype : numpy.dtype
        The dtype of newly allocated outputs (``float16`` for float16 inputs, else the loop's).
    loop_shape : tuple of int
        The broadcast shape of the inputs' loop (non-core) dimensions.
    out_shapes : tuple of tuple of int
        Full shape of each output: ``loop_shape`` plus its core dimensions.
    core_sizes : dict
        Size of every core dimension, by name (empty for elementwise kernels).
    order : str
        Memory order for allocated outputs (``'C'`` or ``'F'``).
    """

    loop: Loop
    result_dtype: np.dtype
    loop_shape: tuple[int, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    core_sizes: dict[str, int]
    order: str = "C"


class Target:
    """Interface of a compilation and execution target."""

    name: str

    def unavailable_reason(self) -> str | None:
        """``None`` when the target can run here, else a sentence saying why not."""
        return None

    def compile(self, spec: KernelSpec) -> Any:
        """Build this target's compiled object for ``spec`` (called once per kernel)."""
        raise NotImplementedError

    def public_object(self, compiled: Any) -> Any:
        """What ``gpufuncs.get`` returns for ``compiled``: the Numba object (default: itself)."""
        return compiled

    def execute(
        self,
        spec: KernelSpec,
        compiled: Any,
        plan: Plan,
        inputs: list[Any],
        outs: tuple[Any, ...] | None,
        where: Any,
        **options: Any,
    ) -> tuple[Any, ...]:
        """Run ``plan`` and return the outputs (``outs`` if given, else newly allocated)."""
        raise NotImplementedError
