"""Property testing of gpufuncs kernels against their declared references (public).

The same three helpers test the built-in kernels in gpufuncs' own suite and a user's kernels in
theirs:

- :func:`inputs` is a Hypothesis strategy of call arguments built from a kernel's declaration:
  mutually broadcastable arrays (with the gufunc layout), Python and NumPy scalars, the sizes of
  output-only core dimensions, and values that reach tails, zeros, subnormals, infinities and NaN
  while favouring each argument's declared domain (and probing just outside it).
- :func:`compare` checks one result against ``spec.reference`` with the kernel's declared
  per-dtype :class:`~gpufuncs.Tolerance`, plus exact checks that NaN and infinities land in the
  same places, and raises an ``AssertionError`` listing the worst points.
- :func:`check_kernel` runs both under Hypothesis on every requested target, the
  :func:`edge_grid` (every combination of the inputs' edge values) first, and checks that the
  targets agree with each other.
- :func:`check_fused` does the same for a fused function (:func:`gpufuncs.fuse`), whose
  reference is itself run eagerly with NumPy (see :mod:`gpufuncs.testing_fused`), and
  :func:`check_reduction` for a reduction kernel (:func:`gpufuncs.reduction`), against its
  parts run one after the other.

Models: SciPy's ``FuncData`` (per-dtype tolerances, separate NaN/inf placement checks, reports
of the worst points) and numba-scipy (one registry drives every test). Hypothesis is imported
here, so this module needs the ``test`` extra; ``import gpufuncs`` never imports it.

Examples
--------
>>> import math, numpy as np, gpufuncs as gf
>>> from gpufuncs.testing import check_kernel
>>> @gf.ufunc(signatures=gf.float_signatures(2), reference=np.hypot,
...           replace=True)
... def my_hypot(a, b):
...     return math.sqrt(a * a + b * b)
>>> check_kernel(my_hypot, max_examples=20)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, mutually_broadcastable_shapes

from .dispatch import Kernel
from .registry import get_kernel
from .spec import KernelSpec, Tolerance
from .testing_fused import assert_like_eager, check_fused, check_reduction
from .testing_layouts import memory_layouts, resolve_targets
from .testing_loops import check_loop, is_exact_loop, shape_signature

__all__ = [
    "Comparison",
    "assert_like_eager",
    "check_agreement",
    "check_fused",
    "check_kernel",
    "check_reduction",
    "compare",
    "edge_grid",
    "edge_values",
    "element_values",
    "inputs",
    "reference_values",
]

#: The "moderate" values most draws come from: where a kernel's result is neither trivially 0,
#: 1 nor inf, intersected with the argument's declared domain.
MODERATE = 8.0

#: Host targets compile the same LLVM code, so their results must agree bit for bit.
_BITWISE_TARGETS = frozenset({"cpu", "parallel"})

KernelLike = Kernel | str


# -- inputs ---------------------------------------------------------------------------------------
def inputs(
    kernel: KernelLike,
    dtype: Any = np.float64,
    *,
    max_dims: int = 3,
    min_side: int = 0,
    max_side: int = 8,
    scalars: bool = True,
    allow_nan: bool = True,
    allow_infinity: bool = True,
    allow_subnormal: bool = True,
) -> st.SearchStrategy[tuple[Any, ...]]:
    """A Hypothesis strategy of call arguments for ``kernel`` that compute in ``dtype``.

    Each example is a tuple ``args`` such that ``kernel(*args)`` is a valid call: one value per
    input, mutually broadcastable (for gufuncs, shaped by the kernel's layout through
    ``mutually_broadcastable_shapes(signature=...)``), followed by the sizes of the output-only
    core dimensions (``n`` of ``hermite_norm(x, n)``). Arrays are sometimes Fortran-ordered,
    strided or reversed views; 0-d inputs are sometimes Python floats or NumPy scalars (never
    all of them Python floats, which would compute in float64).

    Values mix three sources per argument (:func:`element_values`): moderate values
    (``|v| <= MODERATE``) inside the argument's declared domain, the whole domain in ``dtype``
    (tails, zeros, subnormals), and edge values (:func:`edge_values`: the dtype's specials
    inside the domain, the domain's bounds and the values just and well outside them, NaN).

    Parameters
    ----------
    kernel : Kernel or str
        A registered kernel, or its name.
    dtype : dtype, default float64
        Floating dtype of the generated arrays and NumPy scalars.
    max_dims : int, default 3
        Most loop (broadcast) dimensions of an input.
    min_side, max_side : int, default 0 and 8
        Smallest and largest size of a dimension, core and output-only dimensions included;
        ``min_side=0`` reaches empty arrays.
    scalars : bool, default True
        Sometimes pass 0-d inputs as Python floats or NumPy scalars.
    allow_nan, allow_infinity, allow_subnormal : bool, default True
        Whether NaN, infinities and subnormal values may be drawn.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Tuples of call arguments, usable in ``@given``.

    Examples
    --------
    >>> import gpufuncs as gf, numpy as np
    >>> from hypothesis import given
    >>> from gpufuncs.testing import compare, inputs
    >>> @given(inputs(gf.gaussian, np.float32))
    ... def test_gaussian(args):
    ...     compare(gf.gaussian, args, gf.gaussian(*args), dtype=np.float32)
    """
    spec = _resolve(kernel).spec
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"inputs(): dtype must be a floating dtype, got {dtype}")
    flags = {"allow_nan": allow_nan, "allow_infinity": allow_infinity,
             "allow_subnormal": allow_subnormal}
    elements = [element_values(dtype, spec.domains.get(name), **flags) for name in spec.input_names]
    shapes = mutually_broadcastable_shapes(
        signature=shape_signature(spec), max_dims=max_dims, min_side=min_side, max_side=max_side
    ) if spec.layout else mutually_broadcastable_shapes(
        num_shapes=spec.nin, max_dims=max_dims, min_side=min_side, max_side=max_side
    )
    return _call_args(spec, dtype, shapes, tuple(elements), scalars)


@st.composite
def _call_args(draw: Any, spec: KernelSpec, dtype: np.dtype, shapes: st.SearchStrategy,
               elements: tuple[st.SearchStrategy[float], ...], scalars: bool) -> tuple[Any, ...]:
    drawn = draw(shapes).input_shapes
    args = [draw(_argument(dtype, shape, values, scalars)) for shape, values in zip(drawn, elements)]
    if args and all(isinstance(a, float) for a in args):
        args[0] = dtype.type(args[0])  # Python floats alone would compute in float64 (NEP 50)
    output_only = len(spec.layout.output_only_dims) if spec.layout else 0
    sizes = drawn[spec.nin][-output_only:] if output_only else ()
    return (*args, *sizes)


def _argument(dtype: np.dtype, shape: tuple[int, ...], values: st.SearchStrategy[float],
              scalars: bool) -> st.SearchStrategy[Any]:
    array = arrays(dtype, shape, elements=values).flatmap(memory_layouts)
    if shape or not scalars:
        return array
    return st.one_of(array, values.map(dtype.type), values.map(float))


def element_values(
    dtype: Any,
    domain: tuple[float, float] | None = None,
    *,
    allow_nan: bool = True,
    allow_infinity: bool = True,
    allow_subnormal: bool = True,
) -> st.SearchStrategy[float]:
    """Scalar values for one argument: moderate, the whole domain, and its edges.

    Parameters
    ----------
    dtype : dtype
        Floating dtype the values must be exactly representable in.
    domain : (float, float), optional
        ``(low, high)`` where the argument is meaningful; ``None`` for the whole line.
    allow_nan, allow_infinity, allow_subnormal : bool
        Whether NaN, infinities and subnormals may be drawn.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of float
        Moderate values twice as often as each of the other two sources.
    """
    dtype = np.dtype(dtype)
    low, high = _inward(domain or (-math.inf, math.inf), dtype)
    width = 8 * dtype.itemsize
    infinite = math.isinf(low) or math.isinf(high)
    whole = st.floats(None if math.isinf(low) else low, None if math.isinf(high) else high,
                      width=width, allow_nan=False, allow_subnormal=allow_subnormal,
                      allow_infinity=allow_infinity and infinite)
    moderate = st.floats(*_moderate(low, high), width=width, allow_nan=False,
                         allow_infinity=False, allow_subnormal=allow_subnormal)
    edges = edge_values(dtype, domain, allow_nan=allow_nan, allow_infinity=allow_infinity,
                        allow_subnormal=allow_subnormal)
    return st.one_of(moderate, moderate, whole, st.sampled_from(edges))


def _moderate(low: float, high: float) -> tuple[float, float]:
    """``[-MODERATE, MODERATE]`` within the domain, or the domain's first ``2 * MODERATE``."""
    if max(low, -MODERATE) <= min(high, MODERATE):
        return max(low, -MODERATE), min(high, MODERATE)
    if low > MODERATE:
        return low, min(high, low + 2 * MODERATE)
    return max(low, high - 2 * MODERATE), high


def _inward(domain: tuple[float, float], dtype: np.dtype) -> tuple[float, float]:
    """The domain's bounds rounded inward to values representable in ``dtype``."""
    low, high = (float(b) for b in domain)
    if low > high:
        raise ValueError(f"empty domain {domain}")
    lo, hi = dtype.type(low), dtype.type(high)
    if float(lo) < low:
        lo = np.nextafter(lo, dtype.type(np.inf))
    if float(hi) > high:
        hi = np.nextafter(hi, dtype.type(-np.inf))
    return float(lo), float(hi)


def edge_values(
    dtype: Any,
    domain: tuple[float, float] | None = None,
    *,
    allow_nan: bool = True,
    allow_infinity: bool = True,
    allow_subnormal: bool = True,
) -> list[float]:
    """Special values for one argument: the dtype's specials inside its domain, and its edges.

    The specials are zeros, +-1, the smallest normal and subnormal values, the largest finite
    values and +-inf; those outside the declared domain are left out (a kernel declared for
    ``|x| <= 30`` is not probed at 1e38). The edges are, for a finite bound ``b``: ``b``, the
    nearest value outside it, and a value well outside (``b -/+ (1 + |b|)``); NaN is always
    included (as allowed). Parameters as for :func:`element_values`.

    Returns
    -------
    list of float
        Sorted, without duplicates, both signed zeros when zero is inside, NaN last.
    """
    dtype = np.dtype(dtype)
    info = np.finfo(dtype)
    low, high = domain or (-math.inf, math.inf)
    special = {0.0, 1.0, float(info.tiny), float(info.smallest_subnormal), float(info.max), math.inf}
    found = {v for s in special for v in (s, -s) if low <= v <= high}
    for bound, outward in zip((low, high), (-math.inf, math.inf)):
        found |= _bound_edges(float(bound), outward, dtype)
    keep = {v for v in found if (allow_infinity or math.isfinite(v))
            and (allow_subnormal or v == 0 or abs(v) >= info.tiny)}
    zeros = [0.0, -0.0] if 0.0 in keep else []  # -0.0 == 0.0 in a set: keep both signs
    return [*sorted(keep - {0.0}), *zeros, *([math.nan] if allow_nan else [])]


def _bound_edges(bound: float, outward: float, dtype: np.dtype) -> set[float]:
    if math.isinf(bound):
        return {bound}
    b = dtype.type(bound)
    step = math.copysign(1.0 + abs(bound), outward)
    with np.errstate(over="ignore"):
        return {float(b), float(np.nextafter(b, dtype.type(outward))), float(dtype.type(bound + step))}


def edge_grid(
    kernel: KernelLike,
    dtype: Any = np.float64,
    *,
    max_side: int = 8,
    allow_nan: bool = True,
    allow_infinity: bool = True,
    allow_subnormal: bool = True,
    **_: Any,
) -> tuple[Any, ...] | None:
    """Every combination of the inputs' edge values, as one call's arguments.

    Input ``i`` is a 1-d array holding its :func:`edge_values` repeated so that, element by
    element, the inputs run through their whole cartesian product (3 inputs of 15 edges: 3375
    points). :func:`check_kernel` runs it before the random examples, so a kernel wrong at an
    edge (``a * a`` overflowing at the largest float, ``nan`` where the reference gives ``inf``)
    fails on every run, not only when a draw happens to reach that edge.

    Parameters
    ----------
    kernel : Kernel or str
        A registered kernel, or its name.
    dtype : dtype, default float64
        Floating dtype of the arrays.
    max_side : int, default 8
        Size given to each output-only core dimension (``n`` of ``hermite_norm(x, n)``).
    allow_nan, allow_infinity, allow_subnormal : bool, default True
        As for :func:`edge_values`. Other :func:`inputs` options are accepted and ignored.

    Returns
    -------
    tuple or None
        The call arguments (inputs, then the sizes of output-only core dimensions); ``None``
        for a gufunc with an input that has core dimensions (its edges would need a shape).
    """
    spec = _resolve(kernel).spec
    layout = spec.layout
    if layout is not None and any(layout.inputs):
        return None
    dtype = np.dtype(dtype)
    edges = [edge_values(dtype, spec.domains.get(name), allow_nan=allow_nan,
                         allow_infinity=allow_infinity, allow_subnormal=allow_subnormal)
             for name in spec.input_names]
    grid = np.meshgrid(*(np.array(e, dtype) for e in edges), indexing="ij")
    sizes = (max_side,) * len(layout.output_only_dims) if layout else ()
    return (*(g.ravel() for g in grid), *sizes)


def _without_excluded(args: tuple[Any, ...], nin: int, dtype: np.dtype,
                      exclude: Callable[[tuple[Any, ...], np.dtype], bool]) -> tuple[Any, ...]:
    """``edge_grid``'s arguments without the points that ``exclude`` leaves out, one by one."""
    inputs_, sizes = args[:nin], args[nin:]
    keep = np.array([not exclude((*(a[i:i + 1] for a in inputs_), *sizes), dtype)
                     for i in range(inputs_[0].size)], dtype=bool)
    return (*(a[keep] for a in inputs_), *sizes)


# -- reference and comparison ---------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """Summary of a passed :func:`compare`: how close the result came to the reference.

    Attributes
    ----------
    kernel : str
        Kernel name.
    dtype : numpy.dtype
        The dtype the kernel computed in.
    target : str or None
        Where the result came from, if known.
    points : int
        Number of result elements compared.
    max_ulp : float
        Largest error in units in the last place of ``dtype`` (finite points).
    max_rel : float
        Largest error relative to the point's scale (``|ref|``, or the largest ``|ref|`` along
        the core dimensions for gufuncs).
    """

    kernel: str
    dtype: np.dtype
    target: str | None
    points: int
    max_ulp: float
    max_rel: float


def reference_values(kernel: KernelLike, args: Sequence[Any], dtype: Any) -> tuple[np.ndarray, ...]:
    """Evaluate the kernel's declared reference on float64 copies of ``dtype``-rounded inputs.

    Each input is first rounded to ``dtype`` (what the kernel computes with: a Python float
    passed with float32 arrays is rounded to float32), then converted to float64 and passed to
    ``spec.reference`` with the output-only core sizes. Floating-point warnings are silenced.

    Parameters
    ----------
    kernel : Kernel or str
        A registered kernel with a reference.
    args : sequence
        The call arguments, as given to the kernel.
    dtype : dtype
        The dtype the kernel computed in.

    Returns
    -------
    tuple of numpy.ndarray
        One float64 array per output of the kernel.

    Raises
    ------
    AssertionError
        If the kernel declares no reference.
    """
    spec = _resolve(kernel).spec
    reference = _require_reference(spec)
    rounded = [np.asarray(a, dtype=dtype).astype(np.float64) for a in args[: spec.nin]]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = reference(*rounded, *args[spec.nin:])
    refs = ref if spec.nout > 1 else (ref,)
    return tuple(np.asarray(r, dtype=np.float64) for r in refs)


def _require_reference(spec: KernelSpec) -> Callable[..., Any]:
    """The kernel's reference; ``AssertionError`` if it declares none to be tested against."""
    if spec.reference is None:
        raise AssertionError(
            f"kernel {spec.name!r} declares no reference, so it cannot be tested: pass "
            "reference=<the NumPy/SciPy function it must agree with> to its decorator"
        )
    return spec.reference


def compare(
    kernel: KernelLike,
    args: Sequence[Any],
    result: Any,
    *,
    dtype: Any = None,
    target: str | None = None,
    max_report: int = 5,
) -> Comparison:
    """Check ``result = kernel(*args)`` against the kernel's reference and declared tolerance.

    The reference is evaluated by :func:`reference_values`. A finite point passes when
    ``|result - ref| <= atol + rtol * scale`` or, if the tolerance declares ``ulps``, when it is
    at most ``ulps`` units in the last place of ``dtype`` from ``ref`` (the error is measured to
    ``ref`` or to ``ref`` rounded to the result's dtype, whichever is closer, so a correctly
    rounded result always passes); ``scale`` is ``|ref|`` for
    elementwise kernels and the largest ``|ref|`` along the output's core dimensions for gufuncs
    (in both, only where ``ref`` is finite in the result's dtype).

    NaN must appear exactly where the reference is NaN, and +-inf exactly where the reference
    rounded to the result's dtype is +-inf (an inf is also accepted, either way, where the
    reference lies within its tolerance of the overflow threshold). Signed zeros compare equal,
    as in the declared ``|result - ref| <= ...`` (NumPy's own ``clip`` returns either zero at
    ties depending on the memory layout of its bounds). The result's shape must be the
    broadcast shape of the inputs (plus the core dimensions).

    Parameters
    ----------
    kernel : Kernel or str
        The registered kernel that produced ``result``.
    args : sequence
        The call arguments (inputs, then output-only core sizes).
    result : array_like or tuple
        What the kernel returned (a tuple for several outputs).
    dtype : dtype, optional
        The dtype the kernel computed in; defaults to the result's dtype.
    target : str, optional
        Where ``result`` was computed; only used in the report.
    max_report : int, default 5
        How many of the worst points the failure message lists.

    Returns
    -------
    Comparison
        The largest errors found, when every point passes.

    Raises
    ------
    AssertionError
        When any point fails, or the kernel has no reference, or the result's shape is wrong;
        the message names the kernel, dtype and target and lists the worst points (inputs,
        result, reference, error in ULP and relative, NaN/inf placement).
    """
    k = _resolve(kernel)
    spec = k.spec
    results = tuple(np.asarray(r) for r in (result if spec.nout > 1 else (result,)))
    dtype = np.dtype(results[0].dtype if dtype is None else dtype)
    shapes = _expected_shapes(spec, args)
    if len(results) != len(shapes):
        raise AssertionError(f"{spec.name} ({dtype}, target {target!r}): {len(results)} result(s) "
                             f"for {len(shapes)} output(s)")
    for res, shape in zip(results, shapes):
        if res.shape != shape:
            raise AssertionError(f"{spec.name} ({dtype}, target {target!r}): result has shape "
                                 f"{res.shape}, expected {shape} from the inputs' shapes")
    if all(r.size == 0 for r in results):
        return Comparison(spec.name, dtype, target, 0, 0.0, 0.0)
    refs = tuple(_fit(r, shape, spec.name)
                 for r, shape in zip(reference_values(k, args, dtype), shapes, strict=True))
    tol = spec.tolerance(dtype, target)
    checks = [_check_points(spec, res, ref, tol) for res, ref in zip(results, refs)]
    failing = [(i, c) for i, c in enumerate(checks) if c.failed.any()]
    if failing:
        raise AssertionError(_report(spec, args, dtype, target, tol, results, refs, failing, max_report))
    return Comparison(spec.name, dtype, target, sum(r.size for r in results),
                      max(c.max_ulp for c in checks), max(c.max_rel for c in checks))


def _expected_shapes(spec: KernelSpec, args: Sequence[Any]) -> list[tuple[int, ...]]:
    """Output shapes NumPy's rules give for these inputs (independently of the reference)."""
    layout = spec.layout
    in_cores = layout.inputs if layout else ((),) * spec.nin
    core = dict(zip(layout.output_only_dims, args[spec.nin:])) if layout else {}
    loops = []
    for a, dims in zip(args[: spec.nin], in_cores):
        shape = np.shape(a)
        split = len(shape) - len(dims)
        core.update(zip(dims, shape[split:]))
        loops.append(shape[:split])
    loop = np.broadcast_shapes(*loops)
    outs = layout.outputs if layout else ((),) * spec.nout
    return [tuple(loop) + tuple(int(core[d]) for d in dims) for dims in outs]


def _fit(ref: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Broadcast the reference to the result's shape.

    Extra leading length-1 axes are dropped first: NumPy's polynomial helpers (``hermevander``)
    return at least 1-d arrays for 0-d input.
    """
    while ref.ndim > len(shape) and ref.shape[0] == 1:
        ref = ref[0]
    try:
        return np.broadcast_to(ref, shape)
    except ValueError:
        raise AssertionError(f"{name}: the reference returned shape {ref.shape}, which does not "
                             f"broadcast to the result's shape {shape}") from None


@dataclass(frozen=True)
class _Points:
    """Per-point outcome of one output's comparison."""

    failed: np.ndarray  # bool, the result's shape
    placement: np.ndarray  # bool: NaN/inf placement mismatch
    err: np.ndarray  # absolute error (inf at placement mismatches)
    ulp: np.ndarray  # error in ULP of the dtype
    rel: np.ndarray  # error relative to scale
    allowed: np.ndarray  # atol + rtol * scale
    max_ulp: float
    max_rel: float


def _check_points(spec: KernelSpec, res: np.ndarray, ref: np.ndarray, tol: Tolerance) -> _Points:
    got = res.astype(np.float64)
    rounded = _round(ref, res.dtype)
    scale = _scale(ref, rounded, spec)
    allowed = tol.atol + tol.rtol * scale
    both = np.isfinite(got) & np.isfinite(rounded)
    with np.errstate(all="ignore"):
        # Distance to the reference or to its value rounded to the dtype, whichever is
        # smaller: the correctly rounded result always passes (subnormal results included).
        err = np.where(both, np.minimum(np.abs(got - ref), np.abs(got - rounded)), 0.0)
        ulp = err / _ulp(ref, res.dtype)
        rel = np.where(scale > 0, err / scale, np.where(err > 0, np.inf, 0.0))
    ok = (err <= allowed) | (ulp <= tol.ulps if tol.ulps is not None else False)
    placement = _placement_mismatch(got, ref, rounded, allowed, tol, res.dtype)
    failed = placement | (both & ~ok)
    err = np.where(placement, np.inf, err)
    finite = both & ~placement
    return _Points(failed, placement, err, ulp, rel, allowed,
                   float(ulp[finite].max(initial=0.0)), float(rel[finite].max(initial=0.0)))


def _round(ref: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The reference rounded to ``dtype`` and back (overflowing to inf where it should)."""
    with np.errstate(over="ignore"):
        return ref.astype(dtype).astype(np.float64)


def _scale(ref: np.ndarray, rounded: np.ndarray, spec: KernelSpec) -> np.ndarray:
    """``|ref|``, or its largest value along the core dimensions; 0 where ``ref`` overflows."""
    magnitude = np.where(np.isfinite(rounded), np.abs(ref), 0.0)
    core = len(spec.layout.outputs[0]) if spec.layout else 0
    if core == 0 or magnitude.size == 0:
        return magnitude
    axes = tuple(range(ref.ndim - core, ref.ndim))
    return np.broadcast_to(magnitude.max(axis=axes, keepdims=True, initial=0.0), ref.shape)


def _ulp(ref: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The unit in the last place of ``dtype`` in the binade of each (float64) ``ref``."""
    info = np.finfo(dtype)
    _, exponent = np.frexp(np.where(np.isfinite(ref), ref, 0.0))
    unit = np.ldexp(1.0, exponent - (info.nmant + 1))
    return np.where(ref == 0, float(info.smallest_subnormal),
                    np.maximum(unit, float(info.smallest_subnormal)))


def _placement_mismatch(got: np.ndarray, ref: np.ndarray, rounded: np.ndarray, allowed: np.ndarray,
                        tol: Tolerance, dtype: np.dtype) -> np.ndarray:
    nan = np.isnan(got) != np.isnan(ref)
    inf = (np.isinf(got) | np.isinf(rounded)) & ~np.isnan(got) & ~np.isnan(ref) & (got != rounded)
    return nan | (inf & ~_near_overflow(got, ref, allowed, tol, dtype))


def _near_overflow(got: np.ndarray, ref: np.ndarray, allowed: np.ndarray, tol: Tolerance,
                   dtype: np.dtype) -> np.ndarray:
    """Where an inf against a finite value (either way) is within the tolerance of overflow."""
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        threshold = float(info.max) + 0.5 * float(np.spacing(info.max))
        threshold = threshold if math.isfinite(threshold) else float(info.max)  # float64
        slack = np.maximum(allowed, (tol.ulps or 0) * _ulp(ref, dtype))
        return (np.isfinite(ref) & (np.abs(ref) + slack >= threshold)
                & (np.isinf(got) | (np.abs(got) + slack >= threshold))
                & (np.sign(got) == np.sign(ref)))


# -- the failure report ---------------------------------------------------------------------------
def _report(spec: KernelSpec, args: Sequence[Any], dtype: np.dtype, target: str | None, tol: Tolerance,
            results: tuple[np.ndarray, ...], refs: tuple[np.ndarray, ...],
            failing: list[tuple[int, _Points]], max_report: int) -> str:
    total = sum(int(c.failed.sum()) for _, c in failing)
    placed = sum(int(c.placement.sum()) for _, c in failing)
    lines = [f"{spec.name} (dtype {dtype}, target {target!r}): {total} of "
             f"{sum(r.size for r in results)} points disagree with the reference beyond {tol}"
             f" ({placed} NaN/inf placement mismatch(es)); worst points:"]
    for out, check in failing:
        for index in _worst(check, max_report):
            lines.append("  " + _describe(spec, args, dtype, out, index, results[out], refs[out], check))
    return "\n".join(lines)


def _worst(check: _Points, count: int) -> list[tuple[int, ...]]:
    with np.errstate(all="ignore"):
        badness = np.where(check.placement, np.inf,
                           np.where(check.allowed > 0, check.err / check.allowed, np.inf))
    flat = np.flatnonzero(check.failed)
    keys = (-check.ulp.ravel()[flat], -badness.ravel()[flat], ~check.placement.ravel()[flat])
    order = np.lexsort(keys)  # placement mismatches first, then by excess over the tolerance
    return [np.unravel_index(i, check.failed.shape) for i in flat[order][:count]]


def _describe(spec: KernelSpec, args: Sequence[Any], dtype: np.dtype, out: int, index: tuple[Any, ...],
              res: np.ndarray, ref: np.ndarray, check: _Points) -> str:
    where = tuple(int(i) for i in index)
    values = ", ".join(f"{name}={_show(v, dtype)}" for name, v in _inputs_at(spec, args, dtype, where))
    head = f"at {where}" + (f" of output {out}" if spec.nout > 1 else "")
    got, want = _show(res[index], res.dtype), _show(ref[index], np.dtype(np.float64))
    if check.placement[index]:
        return f"{head}: {values} -> result {got}, reference {want} [NaN/inf placement]"
    return (f"{head}: {values} -> result {got}, reference {want}: error {check.err[index]:.3g} = "
            f"{check.ulp[index]:.3g} ULP, relative {check.rel[index]:.3g} "
            f"(allowed {check.allowed[index]:.3g})")


def _inputs_at(spec: KernelSpec, args: Sequence[Any], dtype: np.dtype,
               where: tuple[int, ...]) -> list[tuple[str, Any]]:
    """The (dtype-rounded) input values that produced result element ``where``."""
    layout = spec.layout
    in_cores = layout.inputs if layout else ((),) * spec.nin
    loop_index = where[: len(where) - (len(layout.outputs[0]) if layout else 0)]
    shown = []
    for name, a, dims in zip(spec.input_names, args, in_cores):
        value = np.asarray(a, dtype=dtype)
        loop = value.shape[: value.ndim - len(dims)]
        aligned = loop_index[len(loop_index) - len(loop):] if loop else ()
        shown.append((name, value[tuple(i if n > 1 else 0 for i, n in zip(aligned, loop))]))
    sizes = layout.output_only_dims if layout else ()
    return shown + list(zip(sizes, args[spec.nin:]))


def _show(value: Any, dtype: np.dtype) -> str:
    """The shortest text that reads back as exactly this value of ``dtype`` (NumPy's unique
    repr in that dtype: a float32 shown as ``1e-45`` is ``np.float32("1e-45")``)."""
    if isinstance(value, int | np.integer):
        return str(value)
    arr = np.asarray(value, dtype=dtype)
    if arr.ndim == 0:
        return str(arr[()])
    return np.array2string(arr, threshold=8, separator=", ", floatmode="unique")


# -- check_kernel ---------------------------------------------------------------------------------
def check_kernel(
    kernel: KernelLike,
    *,
    targets: str | Iterable[str] = "available",
    dtypes: Iterable[Any] | None = None,
    max_examples: int | None = None,
    exclude: Callable[[tuple[Any, ...], np.dtype], bool] | None = None,
    **input_options: Any,
) -> None:
    """Property-test a registered kernel against its reference on every requested target.

    For each dtype, Hypothesis draws call arguments with :func:`inputs` (after an explicit
    example of :func:`edge_grid`, so an edge is checked on every run), calls the kernel on
    every target, checks each result with :func:`compare` (the kernel's declared tolerance) and
    checks that the targets agree with each other: ``cpu`` and ``parallel`` bit for bit (they
    run the same compiled code), any other pair on the placement of NaN and infinities (their
    values are each within tolerance of the reference already). Loops of integers, bool,
    complex or mixed types, and every loop of a kernel declared without a reference, are
    checked by :func:`gpufuncs.testing_loops.check_loop` instead: exactly (integers, bool), or
    within the tolerance (floating, complex), against the reference on the loop's own dtypes or
    the kernel run as plain Python.

    Parameters
    ----------
    kernel : Kernel or str
        A registered kernel, or its name.
    targets : "available" or iterable of str
        Targets to test; ``"available"`` means :func:`gpufuncs.available_targets`.
    dtypes : iterable of dtype, optional
        Loop dtypes to test; default: every dtype the kernel declares.
    max_examples : int, optional
        Hypothesis examples per dtype; default: the active Hypothesis profile's.
    exclude : callable, optional
        ``exclude(args, dtype) -> bool``: examples for which it is true are skipped
        (``hypothesis.assume``). Only for known disagreements that a strict ``xfail`` test
        pins elsewhere; never instead of a tolerance.
    **input_options
        Passed to :func:`inputs` (``max_dims``, ``max_side``, ``allow_nan``, ...).

    Raises
    ------
    AssertionError
        On the first (shrunk) disagreement, with :func:`compare`'s report.
    ValueError
        For an unknown target or a dtype the kernel has no loop for.
    """
    k = _resolve(kernel)
    names = resolve_targets(targets, "check_kernel")
    for loop in k.spec.loops:
        if is_exact_loop(k.spec, loop) and (dtypes is None or loop.dtype in {np.dtype(d) for d in dtypes}):
            check_loop(k, loop, names, max_examples)  # integers, bool, complex, no reference
    for dtype in _dtypes(k.spec, dtypes):
        _property(k, dtype, names, max_examples, exclude, input_options)()


def _dtypes(spec: KernelSpec, dtypes: Iterable[Any] | None) -> list[np.dtype]:
    """The floating dtypes whose loops are checked in ULPs (the others: see :mod:`.testing_loops`)."""
    loops = [lp.dtype for lp in spec.loops]
    floating = [lp.dtype for lp in spec.loops if lp.dtype is not None and not is_exact_loop(spec, lp)]
    chosen = floating if dtypes is None else [d for d in map(np.dtype, dtypes) if d in floating]
    missing = [str(d) for d in map(np.dtype, dtypes or ()) if d not in loops]
    if missing:
        raise ValueError(f"check_kernel: kernel {spec.name!r} has no loop for {missing}; "
                         f"loops: {[str(d) for d in loops]}")
    return chosen


def _property(kernel: Kernel, dtype: np.dtype, targets: tuple[str, ...], max_examples: int | None,
              exclude: Callable[[tuple[Any, ...], np.dtype], bool] | None,
              input_options: Mapping[str, Any]) -> Callable[[], None]:
    """The Hypothesis test for one dtype, ready to call."""
    options: dict[str, Any] = {"deadline": None,
                               "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
    if max_examples is not None:
        options["max_examples"] = max_examples

    @settings(**options)
    @given(inputs(kernel, dtype, **input_options))
    @_edge_example(kernel, dtype, exclude, input_options)
    def check(args: tuple[Any, ...]) -> None:
        assume(exclude is None or not exclude(args, dtype))
        results = {t: _call(kernel, args, t) for t in targets}
        for target, result in results.items():
            _check_dtype(kernel, result, dtype, target)
            compare(kernel, args, result, dtype=dtype, target=target)
        check_agreement(kernel, results)

    # Distinguish each kernel/dtype/targets run in Hypothesis' example database and seeds
    # (they share one source); the same hook Hypothesis' own stateful tests use.
    check.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{kernel.full_name}/{dtype}/{','.join(targets)}".encode())
    return check


def _edge_example(kernel: Kernel, dtype: np.dtype,
                  exclude: Callable[[tuple[Any, ...], np.dtype], bool] | None,
                  input_options: Mapping[str, Any]) -> Callable[[Callable], Callable]:
    """``@example`` of :func:`edge_grid` (minus excluded points); no-op where there is none."""
    grid = edge_grid(kernel, dtype, **input_options)
    if grid is None:
        return lambda test: test
    if exclude is not None:
        grid = _without_excluded(grid, kernel.nin, dtype, exclude)
    shown = f"edge_grid({kernel.__name__!r}, {dtype.name!r})" + (" minus excluded points" if exclude else "")
    return example(_Shown(grid, shown))


class _Shown(tuple):
    """Call arguments that Hypothesis reports by how they were made, not as thousands of values."""

    shown: str

    def __new__(cls, args: tuple[Any, ...], shown: str) -> _Shown:
        self = super().__new__(cls, args)
        self.shown = shown
        return self

    def __repr__(self) -> str:
        return self.shown

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # Hypothesis' pretty printer
        printer.text(self.shown)


def _call(kernel: Kernel, args: tuple[Any, ...], target: str) -> Any:
    with np.errstate(all="ignore"):
        return kernel(*args, target=target)


def _check_dtype(kernel: Kernel, result: Any, dtype: np.dtype, target: str) -> None:
    for r in result if kernel.nout > 1 else (result,):
        if np.asarray(r).dtype != dtype:
            raise AssertionError(f"{kernel.__name__} (target {target!r}): {dtype} inputs gave a "
                                 f"{np.asarray(r).dtype} result")


def check_agreement(kernel: KernelLike, results: Mapping[str, Any]) -> None:
    """Check that results of one call on several targets agree.

    ``cpu`` and ``parallel`` must agree bit for bit (any NaN matches any NaN); any other pair
    must put NaN and +-inf in the same places.

    Parameters
    ----------
    kernel : Kernel or str
        The kernel that produced the results.
    results : mapping of target name to result
        One result per target, from the same arguments.

    Raises
    ------
    AssertionError
        Naming the two targets and the first point where they differ.
    """
    name = _resolve(kernel).__name__
    items = [(t, np.asarray(r)) for t, r in results.items()]
    for (t0, r0), (t1, r1) in itertools.pairwise(items):
        if r0.shape != r1.shape or r0.dtype != r1.dtype:
            raise AssertionError(f"{name}: target {t0!r} gave {r0.dtype}{r0.shape}, target {t1!r} "
                                 f"gave {r1.dtype}{r1.shape}")
        bitwise = {t0, t1} <= _BITWISE_TARGETS
        differ = _bits_differ(r0, r1) if bitwise else _nonfinite_differ(r0, r1)
        if differ.any():
            at = tuple(int(i) for i in np.argwhere(differ)[0])
            kind = "bit for bit" if bitwise else "on NaN/inf placement"
            raise AssertionError(f"{name}: targets {t0!r} and {t1!r} disagree {kind} at {at}: "
                                 f"{r0[at]!r} vs {r1[at]!r} ({int(differ.sum())} point(s))")


def _bits_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    uint = f"u{a.itemsize}"
    return ~((a.view(uint) == b.view(uint)) | (np.isnan(a) & np.isnan(b)))


def _nonfinite_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.isnan(a) != np.isnan(b)) | (np.isinf(a) & ~(a == b)) | (np.isinf(b) & ~(a == b))


def _resolve(kernel: KernelLike) -> Kernel:
    if isinstance(kernel, str):
        return get_kernel(kernel)
    if not isinstance(kernel, Kernel):
        raise TypeError(f"expected a gpufuncs kernel or its registered name, got {type(kernel).__name__}")
    return kernel
