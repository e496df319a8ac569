"""Property tests of loops that :mod:`gpufuncs.testing`'s floating-point checks do not cover.

Those checks measure errors in ULPs against a float64 reference, for loops whose every argument
is float32 or float64. Every other loop (integers, bool, complex, mixed types), and every loop
of a kernel declared without a reference, is checked here by :func:`check_loop`:

* the reference is the kernel's declared one, called with the inputs cast to the loop's input
  dtypes (so NumPy's own integer semantics apply: wrapping, 0 for a division by zero), or,
  without one, the scalar function itself run as plain Python on NumPy scalars of those dtypes
  (elements where Python raises, ``math.exp(1000)`` say, are compared across targets only);
* integer and bool results must equal it exactly; floating and complex ones (each part) within
  the kernel's tolerance for the output dtype, with NaN and infinities in the same places;
* ``cpu`` and ``parallel`` must agree bit for bit, any other pair as the values do.

Values include each integer type's extremes and complex infinities and NaNs.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, from_dtype, mutually_broadcastable_shapes

from .dispatch import Kernel
from .spec import KernelSpec, Loop

#: Targets that run the same compiled code, and agree bit for bit.
_SAME_CODE = {"cpu", "parallel"}


def is_exact_loop(spec: KernelSpec, loop: Loop) -> bool:
    """Whether ``loop`` is checked here rather than by ULPs (see the module docstring)."""
    return spec.reference is None or loop.dtype is None or loop.dtype.kind != "f"


def values(dtype: np.dtype) -> st.SearchStrategy[Any]:
    """Values of ``dtype``: its whole range, with its extremes (integers) and its non-finite
    values (floating and complex, infinities and NaN in either part) drawn often."""
    drawn = from_dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        edges = [info.min, info.max, 0, 1, info.max // 2 + 1]
        edges += [-1, info.min + 1] if dtype.kind == "i" else []
        return st.one_of(st.sampled_from(edges), drawn)
    if dtype.kind == "c":
        part = st.sampled_from([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan])
        return st.one_of(st.builds(complex, part, part), drawn)
    return drawn


def shape_signature(spec: KernelSpec) -> str:
    """The layout with one extra input carrying the output-only core dimensions.

    Hypothesis refuses output-only dimensions (their size is not determined by any input), so
    ``"()->(n)"`` is drawn as ``"(),(n)->(n)"`` and the extra input's core sizes become ``n``.
    """
    layout = spec.layout
    assert layout is not None
    groups = [*layout.inputs, layout.output_only_dims] if layout.output_only_dims else layout.inputs
    text = ",".join("(" + ",".join(dims) + ")" for dims in groups)
    return text + "->" + ",".join("(" + ",".join(dims) + ")" for dims in layout.outputs)


@st.composite
def loop_arguments(draw: Any, spec: KernelSpec, loop: Loop) -> tuple[Any, ...]:
    """Call arguments whose dtypes select ``loop``: an array (or a NumPy scalar, for a 0-d
    input) of each input's loop dtype, then the output-only core sizes of a gufunc."""
    if spec.layout is None:
        shapes = draw(mutually_broadcastable_shapes(num_shapes=spec.nin, max_dims=2, max_side=4))
        drawn, sizes = shapes.input_shapes, ()
    else:
        shapes = draw(mutually_broadcastable_shapes(signature=shape_signature(spec), max_dims=2,
                                                    max_side=4))
        output_only = len(spec.layout.output_only_dims)
        drawn = shapes.input_shapes
        sizes = drawn[spec.nin][-output_only:] if output_only else ()
    args = []
    for shape, dtype in zip(drawn, loop.inputs):
        if not shape and draw(st.booleans()):
            args.append(dtype.type(draw(values(dtype))))
        else:
            args.append(draw(arrays(dtype, shape, elements=values(dtype))))
    return (*args, *sizes)


def expected(kernel: Kernel, loop: Loop, args: Sequence[Any]
             ) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
    """The results ``kernel(*args)`` must give in ``loop`` (see the module docstring), one per
    output, and a mask of the elements they are known at (``None``: everywhere)."""
    spec = kernel.spec
    inputs = [np.asarray(a, dtype=d) for a, d in zip(args, loop.inputs)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if spec.reference is not None:
            ref = spec.reference(*inputs, *args[spec.nin:])
            refs = ref if spec.nout > 1 else (ref,)
            return tuple(np.asarray(r, dtype=d) for r, d in zip(refs, loop.outputs)), None
        return _run_in_python(spec, loop, inputs)


def _run_in_python(spec: KernelSpec, loop: Loop, inputs: list[np.ndarray]
                   ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The scalar function run as plain Python on NumPy scalars, element by element."""
    if spec.layout is not None:
        raise AssertionError(f"kernel {spec.name!r}: a gufunc without a reference cannot be run "
                             "as plain Python here; declare reference=")
    shape = np.broadcast_shapes(*(a.shape for a in inputs))
    results = tuple(np.zeros(shape, d) for d in loop.outputs)
    known = np.zeros(shape, bool)
    broadcast = [np.broadcast_to(a, shape) for a in inputs]
    for index in np.ndindex(shape):
        try:
            value = spec.pyfunc(*(b[index] for b in broadcast))
            for result, v in zip(results, value if spec.nout > 1 else (value,)):
                result[index] = v
            known[index] = True
        except (ArithmeticError, ValueError):  # Python raises where a kernel returns inf/NaN
            pass
    return results, known


def assert_matches(kernel: Kernel, loop: Loop, target: str, got: Any, want: np.ndarray,
                   known: np.ndarray | None, output: int = 0) -> None:
    """``got``, the kernel's ``output``, equals ``want`` (integers, bool) or is within the
    tolerance for its dtype."""
    got = np.asarray(got)
    name = f"{kernel.__name__} ({loop.types} loop, target {target!r}" + (
        f", output {output})" if kernel.spec.nout > 1 else ")")
    if got.dtype != loop.outputs[output] or got.shape != want.shape:
        raise AssertionError(f"{name}: gave {got.dtype}{got.shape}, expected "
                             f"{loop.outputs[output]}{want.shape}")
    bad = ~_close(kernel.spec, target, got, want)
    if known is not None:
        bad &= known
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{name}: {int(bad.sum())} wrong value(s); first at {at}: got "
                             f"{got[at]!r}, expected {want[at]!r}")


def _close(spec: KernelSpec, target: str, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if got.dtype.kind not in "fc":
        return got == want
    tol = spec.tolerance(got.dtype, target)
    wide = np.complex128 if got.dtype.kind == "c" else np.float64
    with np.errstate(all="ignore"):  # complex: norm-wise (a*c - b*d cancels within a part)
        near = np.abs(got.astype(wide) - want) <= tol.atol + tol.rtol * np.abs(want)
    if got.dtype.kind == "c":  # an infinite part makes the norm-wise test NaN: see _placed
        return np.where(np.isfinite(want), near, _placed(got.real, want.real) & _placed(got.imag, want.imag))
    return near | (got == want) | (np.isnan(got) & np.isnan(want))


def _placed(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """A part of a complex result whose other part is not finite: its infinities and NaN where
    the reference has them, finite where it is finite (its value is then not compared: with an
    infinite part there is no norm to scale the error by, and a part's own value may come from
    a cancellation, as ``a*a - b*b`` does)."""
    return np.where(np.isfinite(want), np.isfinite(got), (got == want) | (np.isnan(got) & np.isnan(want)))


def assert_targets_agree(kernel: Kernel, results: dict[str, tuple[np.ndarray, ...]]) -> None:
    """``cpu`` and ``parallel`` bit for bit; integer results everywhere exactly (each output)."""
    items = list(results.items())
    for (t0, outs0), (t1, outs1) in itertools.pairwise(items):
        for r0, r1 in zip(outs0, outs1):
            if {t0, t1} <= _SAME_CODE or r0.dtype.kind not in "fc":
                if r0.tobytes() != r1.tobytes():
                    raise AssertionError(f"{kernel.__name__}: targets {t0!r} and {t1!r} "
                                         f"disagree: {r0!r} vs {r1!r}")


def check_loop(kernel: Kernel, loop: Loop, targets: tuple[str, ...], max_examples: int | None) -> None:
    """Property-test ``kernel``'s ``loop`` on ``targets`` (see the module docstring)."""
    options: dict[str, Any] = {"deadline": None,
                               "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
    if max_examples is not None:
        options["max_examples"] = max_examples

    @settings(**options)
    @given(loop_arguments(kernel.spec, loop))
    def check(args: tuple[Any, ...]) -> None:
        wants, known = expected(kernel, loop, args)
        results = {}
        for target in targets:
            with np.errstate(all="ignore"):
                got = kernel(*args, target=target)
            results[target] = tuple(np.asarray(g) for g in (got if kernel.nout > 1 else (got,)))
            for output, (g, want) in enumerate(zip(results[target], wants)):
                assert_matches(kernel, loop, target, g, want, known, output)
        assert_targets_agree(kernel, results)

    check.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{kernel.__name__}/{loop.types}/{','.join(targets)}".encode())
    check()
