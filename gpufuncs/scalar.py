"""Helpers that scalar kernels may call, on every target.

Numba types a Python float literal as float64, so ``0.5 * x`` silently turns a float32 kernel's
arithmetic into float64 (slower on GPUs, and not what float32 users expect), and an integer
literal promotes float32 the same way. :func:`as_type` writes a constant in the dtype of the
loop being compiled, so one scalar function serves every signature in its own precision.
"""

from __future__ import annotations

from typing import Any

from numba.core import types
from numba.extending import overload


def as_type(value: float, like: Any) -> Any:
    """Return ``value`` converted to the numeric type of ``like``.

    Parameters
    ----------
    value : float or int
        The constant (or integer, such as a loop counter) to convert.
    like : scalar
        A value whose type the result takes: usually one of the kernel's arguments.

    Returns
    -------
    scalar
        ``value`` as ``like``'s type: float32 in a float32 loop, float64 in a float64 loop.
    """
    return type(like)(value)


def _as_type_typing(value, like):  # unannotated: Numba compares the parameters
    # Shared by the CPU overload here and the CUDA one in ``targets/cuda``.
    if isinstance(like, types.Number):
        cast = like

        def impl(value, like):
            return cast(value)

        return impl
    return None


overload(as_type)(_as_type_typing)
