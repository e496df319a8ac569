"""Reductions on the GPU in pieces: enough threads for a reduction to few results.

A reduction kernel (a generalized kernel ``(m,n),...->()``) runs one GPU thread per result. A
reduction to one value would then run in one thread. :func:`in_pieces` cuts the longer core
axis into pieces, a thread each, and returns their results, which the caller combines (they
are fewer by a factor of :data:`GPU_PIECE` at least). The pieces depend on the shape only, so
every run adds the same values in the same order: the same bits.

Device arrays are cut by CuPy's ``as_strided`` (the callers pass no other device arrays), host
arrays (which a ``cuda`` call copies to the GPU) by NumPy's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: A GPU reduction cuts its longer core axis into pieces until its loop has about this many
#: threads (an H100 keeps 2048 a multiprocessor resident, 132 of them), each piece of at least
#: :data:`GPU_PIECE` elements.
GPU_THREADS = 1 << 18
GPU_PIECE = 64


def in_pieces(kernel: Any, operands: list[Any], arrays: tuple[bool, ...], options: dict[str, Any],
              dtype: np.dtype) -> Any:
    """``kernel``'s results for ``operands`` (core views ``(..., m, n)`` where ``arrays`` says
    so, else scalars), of ``dtype``: ``(*lead)``, or ``(*lead, pieces)`` where its loop has fewer
    threads than :data:`GPU_THREADS` and the longer core axis is cut into pieces (see
    :func:`cut`), the rest of that axis an element a thread."""
    view = next(v for v, a in zip(operands, arrays) if a)
    *lead, m, n = view.shape
    axis = -1 if n >= m else -2
    pieces = count(view.shape)
    if pieces < 2:
        return kernel(*operands, **options)
    length = view.shape[axis]
    size = length // pieces
    rest = length - pieces * size  # each element of the rest a piece of its own
    parts = np.empty_like(view, shape=(*lead, pieces + rest), dtype=dtype)
    kernel(*(cut(v, axis, pieces, size) if a else v for v, a in zip(operands, arrays)),
           out=parts[..., :pieces], **options)
    if rest:
        start = (Ellipsis, slice(pieces * size, None)) + ((slice(None),) if axis == -2 else ())
        kernel(*(cut(v[start], axis, rest, 1) if a else v for v, a in zip(operands, arrays)),
               out=parts[..., pieces:], **options)
    return parts


def count(shape: tuple[int, ...]) -> int:
    """The pieces :func:`in_pieces` cuts core views of ``shape`` into (below 2: none, a thread
    each result)."""
    *lead, m, n = shape
    return min(GPU_THREADS // max(math.prod(lead), 1), max(m, n) // GPU_PIECE)


def cut(view: Any, axis: int, pieces: int, size: int) -> Any:
    """``view`` (a core view ``(..., m, n)``) as ``pieces`` pieces of ``size`` elements of its
    core ``axis`` (-1 or -2): a view ``(..., pieces, m', n')``. A host array's pieces are
    contiguous chunks (a host loop's cache lines; they also copy to a GPU as they lie); a
    device array's are interleaved, piece ``p`` holding elements ``p, p + pieces, ...``, so
    that the threads of a warp, a piece each, read neighbouring addresses at every step."""
    device = not isinstance(view, np.ndarray)
    *lead, m, n = view.shape
    *strides, sm, sn = view.strides
    step = sn if axis == -1 else sm
    shape = (*lead, pieces, m, size) if axis == -1 else (*lead, pieces, size, n)
    within = step * pieces if device else step
    core = (sm, within) if axis == -1 else (within, sn)
    between = step if device else step * size
    if device:
        from cupy.lib.stride_tricks import as_strided

        return as_strided(view, shape, (*strides, between, *core))
    # The host's pieces split the cut axis in two, which a reshape always does as a view (a
    # tenth of as_strided's cost, 2 us of a reduction in pieces on the 2-core machine).
    if axis == -2:
        return view[..., :pieces * size, :].reshape(shape)
    lead_axes = tuple(range(len(lead)))
    split = view[..., :pieces * size].reshape(*lead, m, pieces, size)
    return split.transpose(*lead_axes, len(lead) + 1, len(lead), len(lead) + 2)
