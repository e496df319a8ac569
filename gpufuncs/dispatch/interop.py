"""What calls handed to another library's ``__array_ufunc__`` need beyond NumPy's protocol."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..targets.base import library_of


def gufunc_keywords(obj: Any, sizes: dict[str, int]) -> dict[str, Any]:
    """What an override needs to run a gufunc with output-only core dimensions: Dask's
    ``apply_gufunc`` takes their sizes as ``output_sizes`` (others get the bound kernel only)."""
    if sizes and library_of(type(obj)) == "dask":
        return {"output_sizes": dict(sizes)}
    return {}


def finish_gufunc(obj: Any, result: Any) -> Any:
    """pandas hands a gufunc's result back as a bare array: for a Series, whose rows are the
    loop dimension, the rows keep its index in a DataFrame (one column per core index)."""
    if (library_of(type(obj)) == "pandas" and getattr(obj, "ndim", None) == 1
            and isinstance(result, np.ndarray) and result.ndim == 2 and result.shape[0] == len(obj)):
        import pandas

        return pandas.DataFrame(result, index=obj.index)
    return result


def refuse_lazy_out(name: str, outs: tuple[Any, ...] | None) -> None:
    """``out=`` a Dask array is refused: it has no memory to write into, and Dask would instead
    rebind that array to the lazy result, which reads as a write that never happens."""
    for out in outs or ():
        if library_of(type(out)) == "dask":
            raise TypeError(f"{name}: out= cannot be a Dask array ({type(out).__name__} is lazy and "
                            "immutable); use the returned array")
