"""The exceptions and warnings gpufuncs raises, in one place (all exported by ``gpufuncs``).

Every message names the kernel and the problem. Errors of a call's arguments are NumPy's
(``TypeError``, ``ValueError``), as a :class:`numpy.ufunc` raises them; these classes cover what
NumPy has no class for.
"""

from __future__ import annotations


class KernelDefinitionError(ValueError):
    """A kernel declaration is malformed (bad signatures, layout, or arguments)."""


class KernelCompileError(RuntimeError):
    """Numba could not compile a kernel for a target; the message keeps Numba's."""


class CudaCompileError(KernelCompileError):
    """A kernel could not be compiled for the cuda target; the message names the kernel."""


class FusionError(TypeError):
    """A function given to :func:`gpufuncs.fuse` does something fusion does not compile; the
    message names the function, the line and what it does."""


class TargetUnavailableError(RuntimeError):
    """The requested target cannot run on this machine."""


class CudaUnavailableError(TargetUnavailableError):
    """``target="cuda"`` was asked for, but no usable GPU, driver or numba-cuda is present."""


class DiskCacheWarning(RuntimeWarning):
    """Numba's disk cache could not be used; kernels are compiled in memory instead."""


__all__ = [
    "CudaCompileError",
    "CudaUnavailableError",
    "DiskCacheWarning",
    "FusionError",
    "KernelCompileError",
    "KernelDefinitionError",
    "TargetUnavailableError",
]
