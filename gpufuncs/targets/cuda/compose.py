"""The cuda target's copy of a scalar function: the kernels and helpers it calls as device functions.

See :mod:`gpufuncs.targets.compose`. A gpufuncs elementwise kernel or an ``@numba.njit`` helper
that a kernel's body calls becomes a device function of a copy of its own Python function, made
the same way (numba-cuda compiles a bare ``@njit`` helper as a device function itself, but from
its own globals, where a kernel it calls would stay a kernel object). Device functions are
force-inlined into their callers, as the kernel's own is into the templates of :mod:`.kernels`.
"""

from __future__ import annotations

import functools
import math
import types
from typing import Any

import numpy as np
from numba import cuda
from numba.core.registry import CPUDispatcher

from ...spec import KernelSpec, kernel_spec
from ..compose import Copies, rebind
from ..numpy_complex import cuda_rounded_multiply, numpy_arithmetic, register_cuda, rounded_multiply
from ..numpy_complex import swapped as numpy_cmath
from .compat import SIMULATED

#: ``cuda.jit`` options of every device function (the simulator takes no ``forceinline``).
DEVICE_OPTIONS: dict[str, Any] = {"device": True} if SIMULATED else {"device": True, "forceinline": True}


def for_device(pyfunc: types.FunctionType) -> types.FunctionType:
    """A copy of ``pyfunc`` that calls the device-function copies of the kernels and ``@njit``
    helpers it calls (see :func:`~gpufuncs.targets.compose.rebind`), and computes complex ``*``
    and ``/`` as NumPy does (see :mod:`~gpufuncs.targets.numpy_complex`; the simulator runs the
    copy as Python)."""
    if not SIMULATED:
        register_cuda()
    return numpy_arithmetic(rebind(pyfunc, _swapped))


def device_function(pyfunc: types.FunctionType) -> Any:
    """The ``cuda.jit`` device function of :func:`for_device` of ``pyfunc``."""
    return cuda.jit(**DEVICE_OPTIONS)(for_device(pyfunc))


def kernel_device_function(spec: KernelSpec) -> Any:
    """The device function a kernel's CUDA kernels call: :func:`device_function` of its scalar
    function (for a kernel of several outputs too: the elementwise template stores the tuple it
    returns, see ``launch.runs_elementwise``), or of a gufunc's."""
    return device_function(spec.pyfunc)


def _swapped(value: Any) -> Any:
    if value is rounded_multiply and not SIMULATED:
        return cuda_rounded_multiply()
    if isinstance(value, CPUDispatcher) or kernel_spec(value) is not None:
        return _device_copy(value)
    if SIMULATED and value is math:
        return _simulator_math()
    return numpy_cmath(value)  # NumPy's cmath.exp, on the simulator too


#: ``math`` functions that raise in Python (``exp(1000)``, ``log(0)``, ``sqrt(-1)``) where
#: compiled code gives ``inf`` or NaN, by NumPy's function of the same values.
_RAISING = {"exp": "exp", "expm1": "expm1", "log": "log", "log2": "log2", "log10": "log10",
            "log1p": "log1p", "sqrt": "sqrt", "pow": "power", "sinh": "sinh", "cosh": "cosh",
            "asin": "arcsin", "acos": "arccos", "acosh": "arccosh", "atanh": "arctanh",
            "sin": "sin", "cos": "cos", "tan": "tan"}


@functools.cache
def _simulator_math() -> types.ModuleType:
    """``math`` as a kernel runs it on the simulator: Python's functions, except those that
    raise where a GPU gives ``inf`` or NaN, which are NumPy's (on NumPy scalars, keeping their
    type, as a compiled ``float32`` call does)."""
    module = types.ModuleType("math", math.__doc__)
    vars(module).update({k: v for k, v in vars(math).items() if not k.startswith("_")})
    vars(module).update({name: getattr(np, numpy_name) for name, numpy_name in _RAISING.items()})
    return module


def _callee_function(callee: Any) -> types.FunctionType:
    spec = kernel_spec(callee)
    return spec.pyfunc if spec is not None else callee.py_func


#: Device-function copies by kernel or helper.
_device_copy = Copies(lambda callee: device_function(_callee_function(callee)))
