"""Conformance against NumPy itself: the same generated call on a gpufuncs kernel and on a real
:class:`numpy.ufunc` of the same arity and dtype behaviour, on ``cpu``, ``parallel`` and ``cuda``
(the CUDA simulator, in a subprocess: ``NUMBA_ENABLE_CUDASIM`` must be set before Numba's CUDA
module is first imported).

The kernels are ``a + b``, ``a * b`` and ``-a``. The references are NumPy's ``add``,
``multiply`` and ``negative``, whose float16/float32/float64 loops select and compute exactly as
a gpufuncs kernel does (float16 computes in float32 and rounds), except where docs/semantics.md
lists a deliberate difference; there the reference is the call that the difference implies:

* calls without a float16 input select among the float32 and float64 loops only (the float16
  loop is for float16 inputs, where NumPy would also compute an int8 or a bool in float16), as
  a ufunc that Numba builds with those two loops does: that ufunc, itself a real
  :class:`numpy.ufunc`, is the reference (and raises NumPy's ``TypeError`` for longdouble).

Each example asserts the same result (bit for bit, NaN included), dtype, shape and type (a
masked array's mask too), or the same kind of exception with every ``out=`` left untouched.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import gpufuncs as gf

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
TARGETS = ["cuda"] if SIMULATED else ["cpu", "parallel"]
CI_PROFILE = settings.get_current_profile_name() == "ci"


def _examples(ci: int) -> int:
    """``ci`` examples under the CI profile (its time budget), the profile's count otherwise."""
    return ci if CI_PROFILE else settings().max_examples


# -- kernels and their references -------------------------------------------------------------
def _fd(func: Any, nin: int, loops: tuple[str, ...] = ("float32", "float64"), identity: Any = None) -> Any:
    """A real numpy.ufunc with exactly the given float loops (Numba builds it)."""
    sigs = [f"{t}({', '.join([t] * nin)})" for t in loops]
    built = numba.vectorize(sigs, identity=identity)(func)
    return getattr(built, "ufunc", built)


@dataclass(frozen=True)
class Op:
    """A kernel, NumPy's ufunc of the same arity and loops, and a ufunc with float32 and float64
    loops only (the reference where no loop exists)."""

    kernel: Any
    numpy: Any
    fd: Any

    @property
    def nin(self) -> int:
        return self.numpy.nin


# Module attributes under their registry names, so that they pickle by reference as the
# built-ins do (other tests pickle every registered kernel).
@gf.ufunc(signatures=gf.float_signatures(2), reference=np.add, identity=0.0, replace=True)
def conformance_add(a, b):
    return a + b


@gf.ufunc(signatures=gf.float_signatures(2), reference=np.multiply, identity=1.0, replace=True)
def conformance_multiply(a, b):
    return a * b


@gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative, replace=True)
def conformance_negative(a):
    return -a


OPS = {
    "add": Op(conformance_add, np.add, _fd(conformance_add.spec.pyfunc, 2, identity=0)),
    "multiply": Op(conformance_multiply, np.multiply, _fd(conformance_multiply.spec.pyfunc, 2, identity=1)),
    "negative": Op(conformance_negative, np.negative, _fd(conformance_negative.spec.pyfunc, 1)),
}

FLOATS = ("e", "f", "d")


def reference(op: Op, dtypes: list[np.dtype | type], dtype: Any) -> tuple[Any, dict[str, Any]]:
    """The real ufunc, and keywords to add, whose answer a kernel must give for ``dtypes``."""
    if dtype is not None:
        return (op.numpy if np.dtype(dtype).char in FLOATS else op.fd), {}  # no other loop exists
    if any(isinstance(d, np.dtype) and d.char == "e" for d in dtypes):
        return op.numpy, {}  # NumPy's float16 loop computes in float32, as the kernel's
    try:  # the loop of the float32 and float64 ones that NumPy selects, run by NumPy's ufunc
        # (Numba's own ufunc fails on where= without out=)
        given = tuple(np.dtype(np.bool_) if d is bool else d for d in dtypes)  # never weak
        loop = op.fd.resolve_dtypes((*given, *(None,) * op.numpy.nout))
    except TypeError:
        return op.fd, {}  # no loop (longdouble): NumPy's TypeError
    return op.numpy, {"signature": loop}


# -- array subclasses ---------------------------------------------------------------------------
class Tagged(np.ndarray):
    """A user's subclass that carries an attribute through __array_finalize__."""

    def __array_finalize__(self, obj: Any) -> None:
        self.tag = getattr(obj, "tag", "fresh")


class Loud(np.ndarray):
    """A user's subclass of higher priority than a masked array and np.matrix."""

    __array_priority__ = 30.0


# -- generated calls: a recipe, built afresh for each side -------------------------------------
DTYPES = ("e", "f", "d", "g", "?", "b", "q", "Q")
_VALUES = {
    "f": (0.0, -0.0, 1.0, -1.5, 0.1, 3.0, 65504.0, 1e-7, 1e30, math.inf, -math.inf, math.nan),
    "b": (0, 1, -1, 7, 127, -128),
    "q": (0, 1, -1, 7, 2**53 + 1, -(2**62)),
    "Q": (0, 1, 7, 2**53 + 1, 2**64 - 1),
    "?": (False, True),
}
KINDS = ("array", "array", "array", "numpy-scalar", "python", "list", "masked", "matrix", "tagged",
         "loud")
LAYOUTS = ("C", "F", "strided", "reversed")


def _pool(dtype: str) -> tuple[Any, ...]:
    return _VALUES.get(dtype, _VALUES["f"])


@dataclass
class Operand:
    kind: str
    dtype: str
    shape: tuple[int, ...]
    layout: str
    values: tuple[Any, ...]
    mask: tuple[bool, ...] = ()


@dataclass
class Alias:
    """``out=`` over the memory of input ``index``: the same array, or a view shifted by
    ``shift`` elements and/or reversed, inside one buffer of ``values``."""

    index: int
    shift: int
    reverse: bool
    values: tuple[float, ...]


@dataclass
class Recipe:
    op: str
    inputs: list[Operand]
    out: Operand | Alias | None = None
    out_style: str = "keyword"  # keyword, tuple, positional
    where: Any = None  # None (not given), a bool, or an Operand of dtype '?'
    where_list: bool = False
    keywords: dict[str, Any] = field(default_factory=dict)


@st.composite
def operands(draw: Any, shape: tuple[int, ...], kinds: tuple[str, ...] = KINDS,
             dtypes: tuple[str, ...] = DTYPES) -> Operand:
    kind = draw(st.sampled_from(kinds))
    if kind in ("numpy-scalar", "python"):
        shape = ()
    if kind == "matrix" and len(shape) != 2:
        kind = "masked"
    dtype = draw(st.sampled_from(dtypes))
    if kind == "python":
        dtype = draw(st.sampled_from(("?", "q", "d")))
    size = math.prod(shape)
    pool = _pool(dtype) if kind != "python" or dtype != "q" else (0, 1, -1, 3)
    values = tuple(draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size)))
    mask = tuple(draw(st.lists(st.booleans(), min_size=size, max_size=size))) if kind == "masked" else ()
    return Operand(kind, dtype, shape, draw(st.sampled_from(LAYOUTS)), values, mask)


def _array(o: Operand) -> np.ndarray:
    """The values of ``o`` as a plain array laid out as ``o.layout`` says."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a = np.array(o.values, dtype=o.dtype).reshape(o.shape)
    if o.layout == "F" and a.ndim:  # (np.asfortranarray makes a 0-d array 1-d)
        return np.asfortranarray(a)
    if o.layout == "strided" and a.ndim:
        wide = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
        wide[..., ::2] = a
        return wide[..., ::2]
    if o.layout == "reversed" and a.ndim:
        return np.ascontiguousarray(a[::-1])[::-1]
    return a


def build_operand(o: Operand) -> Any:
    if o.kind == "python":
        return {"?": bool, "q": int, "d": float}[o.dtype](o.values[0])
    a = _array(o)
    if o.kind == "numpy-scalar":
        return a[()]
    if o.kind == "list":
        return a.tolist()
    if o.kind == "masked":
        return np.ma.masked_array(a, mask=np.array(o.mask, bool).reshape(o.shape))
    if o.kind == "matrix":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            return np.asmatrix(a)
    if o.kind == "tagged":
        tagged = a.view(Tagged)
        tagged.tag = "input"
        return tagged
    return a.view(Loud) if o.kind == "loud" else a


@st.composite
def recipes(draw: Any, op_names: tuple[str, ...] = tuple(OPS)) -> Recipe:
    name = draw(st.sampled_from(op_names))
    nin = OPS[name].nin
    shapes = draw(mutually_broadcastable_shapes(num_shapes=nin, min_dims=0, max_dims=3, min_side=0,
                                                max_side=3))
    recipe = Recipe(name, [draw(operands(s)) for s in shapes.input_shapes])
    _draw_out(draw, recipe, shapes.result_shape)
    _draw_where(draw, recipe, shapes.result_shape)
    keywords: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        keywords["dtype"] = draw(st.sampled_from((np.float16, np.float32, np.float64, np.longdouble,
                                                  np.int64)))
    if draw(st.integers(0, 2)) == 0:
        # Python ints and floats beside other inputs under 'no' and 'equiv': a deliberate
        # difference, tested on its own.
        weak = nin > 1 and any(o.kind in ("python", "list") and not o.shape and o.dtype != "?"
                               for o in recipe.inputs)  # a 0-d array's tolist() is a Python scalar
        rules = ("safe", "same_kind", "unsafe") if weak else ("no", "equiv", "safe", "same_kind", "unsafe")
        keywords["casting"] = draw(st.sampled_from(rules))
    if draw(st.integers(0, 3)) == 0:
        keywords["order"] = draw(st.sampled_from("KACF"))
    recipe.keywords = keywords
    return recipe


def _draw_out(draw: Any, recipe: Recipe, shape: tuple[int, ...]) -> None:
    mode = draw(st.sampled_from(("none", "none", "new", "new", "alias")))
    if mode == "new":
        kinds = ("array", "array", "masked", "tagged")
        # Mostly the result's shape, sometimes a wrong one (a ValueError, out untouched).
        wrong = draw(st.integers(0, 5)) == 0
        out_shape = (*shape, 2) if wrong else shape
        recipe.out = draw(operands(out_shape, kinds, ("e", "f", "d", "g", "q", "?")))
    elif mode == "alias":
        candidates = [i for i, o in enumerate(recipe.inputs)
                      if o.kind in ("array", "tagged") and o.shape == shape and o.dtype in "efd"]
        if not candidates:
            return
        index = draw(st.sampled_from(candidates))
        n = math.prod(shape)
        shift = draw(st.sampled_from((0, 0, 1, -1, 2)))
        values = tuple(draw(st.lists(st.sampled_from(_VALUES["f"]), min_size=n + abs(shift),
                                     max_size=n + abs(shift))))
        recipe.out = Alias(index, shift, draw(st.booleans()), values)
    if recipe.out is not None:
        recipe.out_style = draw(st.sampled_from(("keyword", "tuple", "positional")))


def _draw_where(draw: Any, recipe: Recipe, shape: tuple[int, ...]) -> None:
    mode = draw(st.sampled_from(("none", "none", "none", "bool", "array", "array", "bad")))
    if mode == "bool":
        recipe.where = draw(st.booleans())
    elif mode in ("array", "bad"):
        dims = draw(st.integers(0, len(shape)))
        where_shape = shape[len(shape) - dims:]
        if mode == "bad":
            where_shape = (*where_shape[:-1], where_shape[-1] + 2) if where_shape else (2,)
        recipe.where = draw(operands(where_shape, ("array",), ("?",)))
        recipe.where_list = draw(st.integers(0, 3)) == 0


def build(recipe: Recipe) -> tuple[list[Any], dict[str, Any], list[np.ndarray]]:
    """Fresh arguments and keywords for one side, and the buffers ``out=`` lives in."""
    args = [build_operand(o) for o in recipe.inputs]
    kwargs = dict(recipe.keywords)
    buffers: list[np.ndarray] = []
    out = None
    if isinstance(recipe.out, Alias):
        out = _alias(recipe.out, args, recipe.inputs[recipe.out.index], buffers)
    elif recipe.out is not None:
        out = build_operand(recipe.out)
        buffers.append(np.asarray(out))
    if out is not None:
        if recipe.out_style == "positional":
            args.append(out)
        else:
            kwargs["out"] = (out,) if recipe.out_style == "tuple" else out
    if isinstance(recipe.where, bool):
        kwargs["where"] = recipe.where
    elif recipe.where is not None:
        mask = _array(recipe.where)
        kwargs["where"] = mask.tolist() if recipe.where_list else mask
    return args, kwargs, buffers


def _alias(alias: Alias, args: list[Any], source: Operand, buffers: list[np.ndarray]) -> np.ndarray:
    n = math.prod(source.shape)
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        base = np.array(alias.values, dtype=source.dtype)
    start_in, start_out = (0, alias.shift) if alias.shift >= 0 else (-alias.shift, 0)
    view_in = base[start_in:start_in + n]
    view_out = base[start_out:start_out + n]
    if alias.reverse:
        view_out = view_out[::-1]
    wrap = Tagged if source.kind == "tagged" else np.ndarray
    args[alias.index] = view_in.reshape(source.shape).view(wrap)
    buffers.append(base)
    return view_out.reshape(source.shape)


# -- running one side ---------------------------------------------------------------------------
@dataclass
class Outcome:
    result: Any = None
    error: BaseException | None = None
    buffers: list[np.ndarray] = field(default_factory=list)
    untouched: bool = True
    out: Any = None


def run(call: Any, recipe: Recipe, **extra: Any) -> Outcome:
    args, kwargs, buffers = build(recipe)
    before = [b.tobytes() for b in buffers]
    out = kwargs.get("out", args[OPS[recipe.op].nin] if len(args) > OPS[recipe.op].nin else None)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = call(*args, **kwargs, **extra)
    except Exception as exc:  # compared with the reference's exception below
        return Outcome(error=exc, buffers=buffers,
                       untouched=[b.tobytes() for b in buffers] == before)
    return Outcome(result=result, buffers=buffers, out=out)


_KINDS_OF_ERROR = (np.exceptions.AxisError, TypeError, ValueError, IndexError, OverflowError)


def check(recipe: Recipe, target: str) -> None:
    """Run ``recipe`` on the kernel and on its reference; assert they agree."""
    op = OPS[recipe.op]
    dtypes = [_dtype_of(build_operand(o)) for o in recipe.inputs]
    ref, extra = reference(op, dtypes, recipe.keywords.get("dtype"))
    note(f"reference: {ref.__name__} {ref.types} {extra}")
    theirs = run(ref, recipe, **extra)
    ours = run(op.kernel, recipe, target=target)
    if theirs.error is not None:
        note(f"NumPy: {type(theirs.error).__name__}: {theirs.error}")
        kind = next(k for k in _KINDS_OF_ERROR if isinstance(theirs.error, k))
        assert ours.error is not None, f"NumPy raised {theirs.error!r}, gpufuncs returned {ours.result!r}"
        assert isinstance(ours.error, kind), f"{ours.error!r} is not a {kind.__name__} ({theirs.error!r})"
        assert ours.untouched, f"out= was written before {ours.error!r}"
        return
    if ours.error is not None:
        raise AssertionError(f"gpufuncs raised {ours.error!r}; NumPy returned {theirs.result!r}") \
            from ours.error
    same_result(ours.result, theirs.result, _where_mask(recipe, theirs))
    assert (ours.result is ours.out) == (theirs.result is theirs.out)
    for mine, numpys in zip(ours.buffers, theirs.buffers):
        assert same_values(mine, numpys), f"out= buffer differs:\n{mine}\n{numpys}"
    order = recipe.keywords.get("order")
    if order in ("C", "F") and recipe.out is None and np.ndim(theirs.result) > 1:
        flag = "C_CONTIGUOUS" if order == "C" else "F_CONTIGUOUS"
        assert ours.result.flags[flag] == theirs.result.flags[flag]


def _dtype_of(value: Any) -> np.dtype | type:
    if type(value) in (bool, int, float):
        return type(value)
    return np.asarray(value).dtype


def _where_mask(recipe: Recipe, theirs: Outcome) -> Any:
    """Where a result without ``out=`` is defined (``where=`` leaves the rest uninitialized)."""
    if recipe.out is not None or recipe.where is None or recipe.where is True:
        return None
    if isinstance(recipe.where, bool):
        mask = np.asarray(recipe.where)
    else:  # as passed: a list of an empty 2-d array is an empty 1-d one
        mask = np.asarray(_array(recipe.where).tolist() if recipe.where_list else _array(recipe.where),
                          dtype=bool)
    full = np.broadcast_shapes(mask.shape, *(np.shape(build_operand(o)) for o in recipe.inputs))
    return np.broadcast_to(mask, full).reshape(np.shape(theirs.result))  # np.matrix drops 1s


def same_result(mine: Any, numpys: Any, defined: Any = None) -> None:
    assert type(mine) is type(numpys), f"type {type(mine).__name__}, NumPy's {type(numpys).__name__}"
    assert np.shape(mine) == np.shape(numpys) and np.result_type(mine) == np.result_type(numpys), \
        f"{np.shape(mine)} {np.result_type(mine)}, NumPy's {np.shape(numpys)} {np.result_type(numpys)}"
    if isinstance(numpys, np.ma.MaskedArray):
        np.testing.assert_array_equal(np.ma.getmaskarray(mine), np.ma.getmaskarray(numpys))
        mine, numpys = mine.data, numpys.data
    if isinstance(numpys, Tagged):
        assert mine.tag == numpys.tag
    mine, numpys = np.asarray(mine), np.asarray(numpys)
    if defined is not None:
        mine, numpys = mine[defined], numpys[defined]
    assert same_values(mine, numpys), f"values differ:\n{mine!r}\n{numpys!r}"


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (NaN payloads included); longdouble by value (its padding bytes are junk)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f" or a.dtype.itemsize > 8:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    unsigned = f"u{a.dtype.itemsize}"
    return bool((a.view(unsigned) == b.view(unsigned)).all())


# -- the tests ------------------------------------------------------------------------------------
if not SIMULATED:

    @pytest.mark.slow
    def test_cuda_target_conforms_on_the_simulator() -> None:
        """The call suite again with ``target="cuda"`` on the CUDA simulator (few examples: the
        simulator runs every GPU thread in Python)."""
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=_examples(60 if SIMULATED else 200))
@given(recipe=recipes())
def test_calls_agree_with_numpy(recipe: Recipe, target: str) -> None:
    check(recipe, target)


# -- ufunc methods: reduce and accumulate against the same loops in a real ufunc -----------------
@dataclass
class Reduction:
    op: str
    method: str
    values: Operand
    keywords: dict[str, Any]
    out: tuple[tuple[int, ...], str] | None = None  # (shape, dtype) of a new out=


@st.composite
def reductions(draw: Any) -> Reduction:
    op = draw(st.sampled_from(("add", "multiply")))
    method = draw(st.sampled_from(("reduce", "accumulate")))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    values = draw(operands(shape, ("array", "array", "masked", "tagged", "loud"), ("f", "d")))
    ndim = len(shape)
    axes = [None, 0, -1, ndim, -ndim - 1, *range(ndim)]
    if method == "reduce":
        axes += [(), tuple(range(ndim)), (0, 0)]
    keywords: dict[str, Any] = {"axis": draw(st.sampled_from(axes))}
    if draw(st.booleans()):
        keywords["dtype"] = draw(st.sampled_from((np.float32, np.float64)))
    if method == "reduce":
        if draw(st.booleans()):
            keywords["keepdims"] = True
        if draw(st.integers(0, 2)) == 0:
            keywords["initial"] = draw(st.sampled_from((0.0, 2.5, -math.inf)))
        if draw(st.integers(0, 2)) == 0:
            keywords["where"] = _array(draw(operands(shape[draw(st.integers(0, ndim)):], ("array",), ("?",))))
    out = None
    if draw(st.integers(0, 2)) == 0:
        out = (tuple(draw(st.lists(st.integers(0, 3), max_size=3))), draw(st.sampled_from("fdq")))
    return Reduction(op, method, values, keywords, out)


def run_reduction(ufunc: Any, r: Reduction, **extra: Any) -> Outcome:
    out = np.full(r.out[0], 7, r.out[1]) if r.out is not None else None
    values = build_operand(r.values)
    if r.method == "accumulate" and out is not None and np.ndim(values) and out.shape != np.shape(values):
        # NumPy 2.4 crashes on a 0-d out= and accepts an empty one; the answer: ValueError.
        return Outcome(error=ValueError("out= of the wrong shape"))
    before = out.tobytes() if out is not None else b""
    kwargs = {**r.keywords, **({"out": out} if out is not None else {}), **extra}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = getattr(ufunc, r.method)(values, **kwargs)
    except Exception as exc:
        return Outcome(error=exc, untouched=out is None or out.tobytes() == before)
    return Outcome(result=result, out=out, buffers=[out] if out is not None else [])


@pytest.mark.skipif(SIMULATED, reason="host methods; the cuda reduce runs in tests/test_cuda_sim.py")
@settings(max_examples=_examples(120))
@given(r=reductions())
def test_reduce_and_accumulate_agree_with_numpy(r: Reduction) -> None:
    """Numba's ufunc with the kernel's float32/float64 loops and identity is a real numpy.ufunc:
    its methods are NumPy's (axis, out=, where=, initial, keepdims, 0-d, subclasses)."""
    op = OPS[r.op]
    theirs, ours = run_reduction(op.fd, r), run_reduction(op.kernel, r, target="cpu")
    if theirs.error is not None:
        kind = next(k for k in _KINDS_OF_ERROR if isinstance(theirs.error, k))
        assert isinstance(ours.error, kind), f"{ours.error!r}, {ours.result!r}: NumPy: {theirs.error!r}"
        assert ours.untouched, f"out= was written before {ours.error!r}"
        return
    assert ours.error is None, f"gpufuncs raised {ours.error!r}, NumPy returned {theirs.result!r}"
    same_result(ours.result, theirs.result)
    assert (ours.result is ours.out) == (theirs.result is theirs.out)


@pytest.mark.skipif(SIMULATED, reason="host methods; the cuda reduce runs in tests/test_cuda_sim.py")
@pytest.mark.parametrize("out_dtype", [np.float64, np.float16, np.int64])
@pytest.mark.parametrize("method", ["reduce", "accumulate"])
def test_reduce_and_accumulate_compute_in_a_floating_outs_dtype(method: str, out_dtype: type) -> None:
    """NumPy's rule, found by the property test above: without dtype=, a floating out= sets the
    loop (float32 values summed into a float64 out= in float64: 1 + 1e-7, not 1.00000012);
    an integer one does not, and receives the cast result."""
    op = OPS["add"]
    x = np.array([0.0, 1.0, 1e-7], np.float32)
    shape = () if method == "reduce" else x.shape
    results = []
    for ufunc, extra in ((op.fd, {}), (op.kernel, {"target": "cpu"})):
        out = np.zeros(shape, out_dtype)
        assert getattr(ufunc, method)(x, out=out, **extra) is out
        results.append(out)
    np.testing.assert_array_equal(results[1], results[0])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shift", [0, 1, -1, 3])
def test_one_input_viewing_its_out_is_read_before_writing(target: str, shift: int) -> None:
    """A single array input that is a view of the same memory as ``out=`` (neither owns its
    memory), repeated so that the resolved call's own overlap check decides: the values of the
    same call on a copy of the input, as NumPy's rule has it."""
    n = 1001
    for _ in range(3):
        base = np.linspace(-2.0, 2.0, n + abs(shift)) + 0.0
        x, out = base[max(0, -shift):][:n], base[max(0, shift):][:n]
        expected = base.copy()
        expected[max(0, shift):][:n] = gf.exp(x.copy(), target=target)
        assert gf.exp(x, out=out, target=target) is out
        assert same_values(base, expected)


@pytest.mark.skipif(SIMULATED, reason="large arrays: the host targets' threads and chunks")
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shift", [0, 1, -1, 4097, -70001])
@pytest.mark.parametrize("reverse", [False, True])
def test_out_overlapping_inputs_of_large_arrays(target: str, shift: int, reverse: bool) -> None:
    """NumPy's rule for any overlap: as if every input were read before anything is written,
    here where the parallel loop splits the work between threads and chunks."""
    n = 300_001
    results = []
    for call in (np.add, OPS["add"].kernel):
        base = np.linspace(-2.0, 2.0, n + abs(shift))
        a = base[max(0, -shift):max(0, -shift) + n]
        out = base[max(0, shift):max(0, shift) + n]
        extra = {} if call is np.add else {"target": target}
        call(a[::-1] if reverse else a, a, out=out, **extra)
        results.append(base)
    assert same_values(*results)
