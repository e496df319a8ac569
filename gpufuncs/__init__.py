"""gpufuncs: NumPy-compatible ufuncs and gufuncs from one scalar kernel, on cpu, parallel and cuda.

Write a scalar kernel once (``@gpufuncs.ufunc`` / ``@gpufuncs.gufunc``); call it like a NumPy
ufunc on host arrays or GPU arrays. Importing this package compiles nothing: each kernel is
compiled for a target on its first use there.
"""

import importlib
from typing import Any

from .dispatch import Kernel
from .errors import (
    CudaCompileError,
    CudaUnavailableError,
    DiskCacheWarning,
    FusionError,
    KernelCompileError,
    KernelDefinitionError,
    TargetUnavailableError,
)
from .fuse import Fused, fuse
from .fuse.declared import ReductionKernel, reduction
from .registry import float_signatures, get, gufunc, names, registry, ufunc
from .scalar import as_type, muladd
from .spec import Benchmark, CupyFormula, Tolerance
from .targets import available_targets
from .targets import set_parallel_min_size as set_auto_parallel_min_size

__version__ = "0.1.0"

from .kernels import builtin_names as _builtin_names  # importing it registers the built-ins

# Named for static tools and IDEs; every other built-in kernel becomes an attribute below, so a
# new kernel module needs no edit here.
gaussian = registry["gaussian"]
exp = registry["exp"]
clamp = registry["clamp"]
hermite_norm = registry["hermite_norm"]
globals().update({name: registry[name] for name in _builtin_names() if name not in globals()})


def __getattr__(name: str) -> Any:
    """``gpufuncs.testing`` on first access, as ``numpy.testing``: importing gpufuncs does not
    import Hypothesis or SciPy, which that module needs (the ``check`` or ``test`` extra)."""
    if name == "testing":
        try:
            return importlib.import_module(".testing", __name__)
        except ModuleNotFoundError as exc:
            raise ImportError(f"gpufuncs.testing needs {exc.name}, which is not installed: "
                              'pip install "gpufuncs[check]"') from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "testing"})


__all__ = [
    "Benchmark",
    "CudaCompileError",
    "CudaUnavailableError",
    "CupyFormula",
    "DiskCacheWarning",
    "Fused",
    "FusionError",
    "Kernel",
    "KernelCompileError",
    "KernelDefinitionError",
    "ReductionKernel",
    "TargetUnavailableError",
    "Tolerance",
    "__version__",
    "as_type",
    "available_targets",
    "clamp",
    "exp",
    "float_signatures",
    "fuse",
    "gaussian",
    "get",
    "gufunc",
    "hermite_norm",
    "muladd",
    "names",
    "reduction",
    "registry",
    "set_auto_parallel_min_size",
    "ufunc",
]
__all__ += sorted(set(_builtin_names()) - set(__all__))
