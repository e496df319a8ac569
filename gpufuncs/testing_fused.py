"""Property testing of fused functions (:func:`gpufuncs.fuse`) against the same function run
eagerly with NumPy (public, through :mod:`gpufuncs.testing`).

A fused function has no declared reference: its reference is itself, called on NumPy arrays
(``fused.func``). :func:`check_fused` draws arguments like the example ones the caller gives
(arrays of the same dtypes in mutually broadcastable shapes and memory layouts, Python scalars of
the same types) and checks every result of every target with :func:`assert_like_eager`: the
eager call's dtype and shape, and its values bit for bit (NaN where NaN, the signs of zeros),
or within ``ulps`` units in the last place where the function computes transcendental functions
(``np.exp``, kernels declared with a tolerance), which each target computes in its own way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .testing_layouts import memory_layouts, resolve_targets

__all__ = ["assert_like_eager", "check_fused", "check_reduction"]


def check_fused(
    fused: Any,
    *like: Any,
    targets: str | Iterable[str] = "available",
    ulps: int = 0,
    max_examples: int | None = None,
    shapes: st.SearchStrategy[hnp.BroadcastableShapes] | None = None,
) -> None:
    """Property-test a fused function against itself run eagerly with NumPy, on every target.

    Parameters
    ----------
    fused : gpufuncs.Fused
        A function decorated with :func:`gpufuncs.fuse`.
    *like : array or scalar
        Example arguments: each array stands for arrays of its dtype (any values, infinities and
        NaN included; any broadcastable shapes, C- or F-ordered, strided or reversed), each Python or
        NumPy scalar for scalars of its type.
    targets : "available" or iterable of str
        Targets to test; ``"available"`` means :func:`gpufuncs.available_targets`.
    ulps : int
        Accepted distance from the eager result, in units in the last place of its dtype, for
        floating and complex results; 0 (the default): bit for bit.
    max_examples : int, optional
        Hypothesis examples; default: the active Hypothesis profile's.
    shapes : strategy of BroadcastableShapes, optional
        The arrays' shapes (one per array argument); default: up to 2 dimensions of up to 5.
        A fixed shape bounds the compilations on ``cuda``, where each new layout compiles.

    Raises
    ------
    AssertionError
        On the first (shrunk) disagreement: the target, the result's position, both values.
    """
    names = resolve_targets(targets, "check_fused")
    arrays, shapes, options = _drawing(like, shapes, max_examples)

    @settings(**options)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        drawn = data.draw(shapes, label="shapes").input_shapes
        args = [data.draw(_like(a, drawn[arrays.index(i)] if i in arrays else ()), label=f"argument {i}")
                for i, a in enumerate(like)]
        for target in names:
            assert_like_eager(fused, args, target, ulps)

    check.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{getattr(fused, '__qualname__', fused)}/{','.join(names)}/{ulps}".encode())
    check()


def check_reduction(
    kernel: Any,
    *like: Any,
    targets: str | Iterable[str] = "available",
    ulps: int = 0,
    max_examples: int | None = None,
    shapes: st.SearchStrategy[hnp.BroadcastableShapes] | None = None,
) -> None:
    """Property-test a reduction kernel (:func:`gpufuncs.reduction`) against the same
    reduction run eagerly (:meth:`~gpufuncs.ReductionKernel.eager`), on every target.

    Arguments are drawn as by :func:`check_fused`, with an ``axis`` (all, the last, the first and
    the last) and ``keepdims``. The reduction before its finishing step is checked: integers,
    booleans and NumPy's ``maximum``/``minimum`` bit for bit, sums within NumPy's own summation
    error, other combines within ``ulps`` (the order of combination is the reduction's own);
    and the result is the finish applied to it, bit for bit.

    Parameters
    ----------
    kernel : gpufuncs.ReductionKernel
        The reduction kernel.
    *like : array or scalar
        Example arguments, as for :func:`check_fused`.
    targets : "available" or iterable of str
        Targets to test; ``"available"`` means :func:`gpufuncs.available_targets`.
    ulps : int
        Accepted distance of a floating reduction by a combine other than ``np.add``,
        ``np.maximum``, ``np.minimum`` from the eager one, in units in its last place.
    max_examples : int, optional
        Hypothesis examples; default: the active Hypothesis profile's.
    shapes : strategy of BroadcastableShapes, optional
        The arrays' shapes; default: up to 2 dimensions of up to 5.

    Raises
    ------
    AssertionError
        On the first (shrunk) disagreement.
    """
    names = resolve_targets(targets, "check_reduction")
    arrays, shapes, options = _drawing(like, shapes, max_examples)

    @settings(**options)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        drawn = data.draw(shapes, label="shapes")
        args = [data.draw(_like(a, drawn.input_shapes[arrays.index(i)] if i in arrays else ()),
                          label=f"argument {i}") for i, a in enumerate(like)]
        ndim = len(drawn.result_shape)
        axis = data.draw(st.sampled_from([None, *([-1, (0, -1)] if ndim >= 2 else [-1] * ndim)]),
                         label="axis")
        keepdims = data.draw(st.booleans(), label="keepdims")
        for target in names:
            assert_like_eager_reduction(kernel, args, axis, keepdims, target, ulps)

    check.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{kernel.__name__}/{','.join(names)}/{ulps}".encode())
    check()


def assert_like_eager_reduction(kernel: Any, args: Sequence[Any], axis: Any, keepdims: bool,
                                target: str, ulps: int = 0) -> None:
    """Check one call of a reduction kernel on ``target`` against its eager run (see
    :func:`check_reduction`)."""
    where = f"{kernel.__name__}(axis={axis!r}, keepdims={keepdims}) on {target!r}"
    try:
        with np.errstate(all="ignore"):
            want = kernel.eager(*args, axis=axis, keepdims=keepdims, finish=False)
    except (ArithmeticError, ValueError, TypeError) as exc:  # NumPy's: the call raises it too
        try:
            with np.errstate(all="ignore"):
                kernel(*args, axis=axis, keepdims=keepdims, target=target)
        except type(exc):
            return
        raise AssertionError(f"{where}: did not raise {type(exc).__name__} ({exc}), as eagerly") from None
    with np.errstate(all="ignore"):
        got = kernel.reduced(*args, axis=axis, keepdims=keepdims, target=target)
        final = kernel(*args, axis=axis, keepdims=keepdims, target=target)
    got, want = _host(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), \
        f"{where}: {got.dtype} {got.shape}, eagerly {want.dtype} {want.shape}"
    combine = kernel.combine
    if want.dtype.kind in "fc" and combine is np.add:
        with np.errstate(all="ignore"):
            values = kernel.values(*args)
        from .fuse.reduction import Reduction

        axes = None if axis is None else tuple(np.atleast_1d(axis))
        reduction = Reduction("sum", 0, axes, keepdims, want.dtype)
        _assert_reduced(got, want, reduction, values, 0, f"{where} (sum)")
    elif want.dtype.kind == "c":
        _assert_close(got.real, want.real, ulps, f"{where} (real part)")
        _assert_close(got.imag, want.imag, ulps, f"{where} (imaginary part)")
    else:
        exact = combine is np.maximum or combine is np.minimum or want.dtype.kind != "f"
        _assert_close(got, want, 0 if exact else ulps, where)
    with np.errstate(all="ignore"):
        finished = _host(kernel.finished(got))
    _assert_close(_host(final), finished, 0, f"{where}, finished")


def _host(value: Any) -> np.ndarray:
    """A result as a NumPy array (device arrays copied to the host)."""
    if hasattr(value, "copy_to_host"):
        return value.copy_to_host()
    if hasattr(value, "get"):  # CuPy
        return value.get()
    return np.asarray(value)


def assert_like_eager(fused: Any, args: Sequence[Any], target: str, ulps: int = 0) -> None:
    """Check one call of ``fused`` on ``target`` against ``fused.func(*args)`` run with NumPy.

    The eager call reads C-ordered copies of the arrays: NumPy's own answer depends on the
    layout in places (a complex64 array read backwards takes its scalar multiply loop, four
    rounded products: docs/semantics.md), and a fused function gives its array loop's on every
    layout.

    Parameters
    ----------
    fused : gpufuncs.Fused
        The fused function.
    args : sequence
        Its arguments.
    target : str
        Where to run it.
    ulps : int
        Accepted distance in units in the last place for floating and complex results (0: bit
        for bit; NaN must meet NaN either way).

    Raises
    ------
    AssertionError
        Naming the function, the target, the result and the first differing elements.
    """
    where = f"{getattr(fused, '__name__', fused)} on {target!r}"
    try:
        with np.errstate(all="ignore"):  # on C-ordered copies: see below
            expected = fused.func(*[np.array(a, order="C") if isinstance(a, np.ndarray) else a
                                    for a in args])
    except (ArithmeticError, ValueError, TypeError) as exc:  # NumPy's: the fused call raises it too
        _assert_raises(fused, args, target, type(exc), where)
        return
    with np.errstate(all="ignore"):
        got = fused(*args, target=target)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected), f"{where}: {len(got)} results, eagerly {len(expected)}"
    reduced: Sequence[tuple[Any, Any]] = fused.reduced(*args) if hasattr(fused, "reduced") else ()
    for k, (g, e) in enumerate(zip(got, expected)):
        g = g.copy_to_host() if hasattr(g, "copy_to_host") else np.asarray(g)
        e = np.asarray(e)
        assert (g.dtype, g.shape) == (e.dtype, e.shape), \
            f"{where}, result {k}: {g.dtype} {g.shape}, eagerly {e.dtype} {e.shape}"
        if reduced and e.dtype.kind in "fc" and reduced[k][0].name in ("sum", "mean", "prod"):
            reduction, values = reduced[k]
            _assert_reduced(g, e, reduction, values, ulps, f"{where}, result {k} ({reduction.name})")
        elif e.dtype.kind == "c":
            _assert_close(g.real, e.real, ulps, f"{where}, result {k} (real part)")
            _assert_close(g.imag, e.imag, ulps, f"{where}, result {k} (imaginary part)")
        else:
            _assert_close(g, e, ulps if e.dtype.kind == "f" else 0, f"{where}, result {k}")


def _assert_reduced(got: np.ndarray, want: np.ndarray, reduction: Any, values: np.ndarray, ulps: int,
                    where: str) -> None:
    """A floating sum, mean or product against NumPy's: NumPy's pairwise sum is itself off by up
    to about ``log2(n) eps`` times the sum of the magnitudes, where a fused (compensated) sum
    is within a few ``eps`` of it; a product's order of multiplications is its own."""
    from .fuse.reduction import _axes

    values = np.asarray(values)
    axes = _axes(reduction.axis, values.ndim)
    count = int(np.prod([values.shape[a] for a in axes]))
    eps = np.finfo(want.dtype).eps
    with np.errstate(all="ignore"):
        if reduction.name == "prod":
            bound = (count + ulps + 2) * eps * np.abs(want)
        else:
            wide = np.complex128 if values.dtype.kind == "c" else np.float64
            magnitude = np.sum(np.abs(values.astype(wide)), axis=axes, keepdims=reduction.keepdims)
            if reduction.name == "mean":
                magnitude = magnitude / max(count, 1)
            bound = (ulps + 3 + np.log2(count + 1)) * eps * magnitude
        bound = np.broadcast_to(bound, want.shape)
        for part in ((np.real, np.imag) if want.dtype.kind == "c" else (np.asarray,)):
            g, w = part(got).astype(np.float64), part(want).astype(np.float64)
            ok = (g == w) | (np.isnan(g) & np.isnan(w)) | (np.isfinite(w) & (np.abs(g - w) <= bound))
            if not np.all(ok):
                bad = [tuple(int(i) for i in p) for p in np.argwhere(~np.asarray(ok))[:5]]
                shown = ", ".join(f"{p}: {g[p]!r}, eagerly {w[p]!r} (bound {bound[p]:.3g})" for p in bad)
                raise AssertionError(f"{where}: beyond NumPy's summation error: {shown}")


def _assert_raises(fused: Any, args: Sequence[Any], target: str, kind: type[BaseException],
                   where: str) -> None:
    try:
        with np.errstate(all="ignore"):
            fused(*args, target=target)
    except kind:
        return
    except Exception as exc:
        raise AssertionError(f"{where}: raised {type(exc).__name__} ({exc}); eagerly "
                             f"{kind.__name__}") from exc
    raise AssertionError(f"{where}: returned; eagerly {kind.__name__}")


def _assert_close(got: np.ndarray, want: np.ndarray, ulps: int, where: str) -> None:
    if want.dtype.kind != "f":
        ok = got == want
    else:
        same = (got == want) & (np.signbit(got) == np.signbit(want))
        nan = np.isnan(got) & np.isnan(want)
        with np.errstate(all="ignore"):
            spacing = np.abs(np.spacing(np.where(np.isfinite(want), want, 0).astype(want.dtype)))
            near = np.isfinite(want) & (np.abs(got.astype(np.float64) - want) <= ulps * spacing)
        ok = same | nan | (near if ulps else False)
    if not np.all(ok):
        bad = [tuple(int(i) for i in p) for p in np.argwhere(~np.asarray(ok))[:5]]
        shown = ", ".join(f"{p}: {got[p]!r}, eagerly {want[p]!r}" for p in bad)
        how = f"beyond {ulps} ULP" if ulps else "bit for bit"
        raise AssertionError(f"{where}: {np.size(ok) - np.count_nonzero(ok)} of {np.size(ok)} "
                             f"elements differ ({how}): {shown}")


def _drawing(like: Sequence[Any], shapes: st.SearchStrategy[hnp.BroadcastableShapes] | None,
             max_examples: int | None) -> tuple[list[int], st.SearchStrategy[Any], dict[str, Any]]:
    """What :func:`check_fused` and :func:`check_reduction` draw from: the positions of the
    array arguments among ``like``, their shapes' strategy, and Hypothesis' settings."""
    arrays = [i for i, a in enumerate(like) if isinstance(a, np.ndarray)]
    shapes = shapes or hnp.mutually_broadcastable_shapes(num_shapes=max(1, len(arrays)), max_dims=2,
                                                          max_side=5)
    options: dict[str, Any] = {"deadline": None,
                               "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
    if max_examples is not None:
        options["max_examples"] = max_examples
    return arrays, shapes, options


def _like(example: Any, shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    """Values like ``example``: an array of its dtype in ``shape`` (in one of three layouts), or
    a scalar of its type."""
    if isinstance(example, np.ndarray):
        return hnp.arrays(example.dtype, shape, elements=_elements(example.dtype)).flatmap(memory_layouts)
    if isinstance(example, np.generic):
        return hnp.from_dtype(example.dtype, **_limits(example.dtype)).map(example.dtype.type)
    if isinstance(example, bool):
        return st.booleans()
    if isinstance(example, int):
        return st.integers(-(2**31), 2**31 - 1)
    if isinstance(example, float):
        return st.floats(allow_nan=True, allow_infinity=True)
    if isinstance(example, complex):
        return st.complex_numbers(max_magnitude=1e10)
    raise TypeError(f"check_fused: no values like {example!r} (arrays and numeric scalars only)")


def _elements(dtype: np.dtype) -> st.SearchStrategy[Any] | None:
    return hnp.from_dtype(dtype, **_limits(dtype)) if dtype.kind in "fc" else None


def _limits(dtype: np.dtype) -> dict[str, Any]:
    """Complex parts of moderate size: NumPy's own complex arithmetic differs from itself by loop
    near overflow (see docs/semantics.md); the kernels' complex tests cover those edges."""
    return {"max_magnitude": 1e10, "allow_nan": False} if dtype.kind == "c" else {}
