"""What the property checkers of :mod:`gpufuncs.testing` share: the targets a check runs on, and
the memory layouts its arrays come in."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from hypothesis import strategies as st

from .targets import available_targets


def resolve_targets(targets: str | Iterable[str], checker: str) -> tuple[str, ...]:
    """The target names ``targets`` means (``"available"``: :func:`gpufuncs.available_targets`);
    ``ValueError`` naming ``checker`` for an unknown one."""
    names = available_targets() if targets == "available" else (
        (targets,) if isinstance(targets, str) else tuple(targets))
    unknown = [t for t in names if t not in ("cpu", "parallel", "cuda")]
    if unknown or not names:
        raise ValueError(f"{checker}: unknown targets {unknown or names}; "
                         "valid: 'available' or any of 'cpu', 'parallel', 'cuda'")
    return names


def memory_layouts(a: np.ndarray) -> st.SearchStrategy[np.ndarray]:
    """The same values as C-, F-ordered, strided or negative-stride arrays."""
    if a.ndim == 0 or a.size == 0:
        return st.just(a)
    return st.sampled_from([a, np.asfortranarray(a), _strided(a), _reversed(a)])


def _strided(a: np.ndarray) -> np.ndarray:
    buf = np.empty((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    view = buf[..., ::2]
    view[...] = a
    return view


def _reversed(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a[::-1])[::-1]
