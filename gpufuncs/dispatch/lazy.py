"""Lazy kernels: loops compiled for the input types a call brings, as Numba's ``DUFunc`` does.

A kernel declared without signatures (``@gf.ufunc`` bare, or with options but no
``signatures=``) starts with no loop. A call whose inputs fit no loop it has (NumPy's selection,
:func:`.plan.resolve_loop`) adds one for exactly their types: Numba types the scalar function
for them (an array by its dtype, a Python ``int``/``float``/``complex`` as int64, float64,
complex128, as ``DUFunc`` types them; float16 as float32, whose float16 twin then serves float16
inputs with float16 results, as a declared float32 loop's does), and its return type is the
loop's output. ``kernel.types`` lists the loops learned so far.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba.core import types
from numba.np.numpy_support import from_dtype

from ..errors import KernelCompileError, KernelDefinitionError
from ..spec import HALF, KernelSpec, Loop, parse_loop
from .plan import resolve_loop

#: How ``DUFunc`` types a Python scalar.
_PYTHON = {bool: types.boolean, int: types.int64, float: types.float64, complex: types.complex128}


def needs_loop(spec: KernelSpec, dtypes: list[Any], requested: Any, casting: str) -> bool:
    """Whether a call with inputs of ``dtypes`` finds no loop among those ``spec`` has."""
    if not spec.loops:
        return True
    try:
        resolve_loop(spec, dtypes, requested, casting)
    except TypeError:
        return True
    return False


def call_loop(spec: KernelSpec, dtypes: list[Any], requested: Any = None) -> Loop:
    """The loop a call with inputs of ``dtypes`` (and ``dtype=`` ``requested``) runs: the
    spec's own, or for a lazy kernel without one that fits, the loop the call would add (not
    added here: what tracing and reductions need to know before any call)."""
    if spec.lazy and needs_loop(spec, dtypes, requested, "same_kind"):
        return loop_for(spec, dtypes)
    return resolve_loop(spec, dtypes, requested)


def loop_for(spec: KernelSpec, dtypes: list[Any]) -> Loop:
    """The loop of exactly ``dtypes``' types, its output typed by Numba (``KernelCompileError``
    when the scalar function does not compile for them)."""
    argtypes = tuple(_argtype(d) for d in dtypes)
    typed = numba.njit(spec.pyfunc)
    try:
        typed.compile(argtypes)
    except Exception as exc:
        from ..targets.cpu.typecheck import numba_message

        raise KernelCompileError(f"kernel {spec.name!r} failed to compile for inputs "
                                 f"{', '.join(map(str, argtypes))}: {numba_message(exc)}") from exc
    returned = typed.overloads[argtypes].signature.return_type
    if isinstance(returned, types.BaseTuple):
        raise KernelDefinitionError(f"kernel {spec.name!r} returns {returned}: a kernel without "
                                    "signatures returns one value; declare signatures for several")
    return parse_loop(f"{returned}({', '.join(map(str, argtypes))})", spec.nin, False)


def _argtype(dtype: Any) -> types.Type:
    if isinstance(dtype, type):
        return _PYTHON[dtype]
    return from_dtype(np.dtype(np.float32) if dtype == HALF else dtype)
