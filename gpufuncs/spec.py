"""The declaration of a kernel: what it computes, for which dtypes, and how it is checked.

A :class:`KernelSpec` is pure data built from the public decorators
(:func:`gpufuncs.ufunc`, :func:`gpufuncs.gufunc`). It is validated once, at registration, so that
every later stage (compiling for a target, dispatching a call, testing, benchmarking) can trust it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numba.core import sigutils, types
from numba.np.numpy_support import as_dtype

from .errors import KernelDefinitionError

#: Kinds a loop may declare: bool, signed and unsigned integers, floating, complex. float16 is a
#: storage type only (NumPy's own float16 loops compute in float32): see :func:`half_loops`.
LOOP_KINDS = "biufc"
HALF = np.dtype(np.float16)


@dataclass(frozen=True)
class Tolerance:
    """How close a result must be to the reference, for one dtype.

    A point passes when ``|result - ref| <= atol + rtol * scale`` or when the two are at most
    ``ulps`` units in the last place apart. ``scale`` is ``|ref|`` for elementwise kernels and
    the largest ``|ref|`` along the output core dimensions for generalized kernels (a norm-wise
    error, since a recurrence's error follows the size of the whole vector, not of one entry).
    """

    rtol: float
    atol: float = 0.0
    ulps: int | None = None


def default_tolerance(dtype: np.dtype) -> Tolerance:
    """SciPy's ``FuncData`` default: five machine epsilons, relative (floating and complex
    results); integer and bool results are exact."""
    if np.dtype(dtype).kind not in "fc":
        return Tolerance(rtol=0.0)
    return Tolerance(rtol=5 * float(np.finfo(dtype).eps))


@dataclass(frozen=True)
class Loop:
    """One compiled loop: the dtype of each input and of each output.

    ``runs`` is the declared loop a float16 loop computes in (see :func:`half_loops`), ``None``
    for a declared loop.
    """

    signature: str  # the Numba signature string it is compiled from
    inputs: tuple[np.dtype, ...]
    outputs: tuple[np.dtype, ...]
    runs: Loop | None = None

    @property
    def dtype(self) -> np.dtype | None:
        """The dtype every argument shares, or ``None`` for a loop of several dtypes."""
        found = set(self.inputs + self.outputs)
        return found.pop() if len(found) == 1 else None

    @property
    def types(self) -> str:
        """NumPy's loop string, e.g. ``'fq->f'``."""
        return "".join(d.char for d in self.inputs) + "->" + "".join(d.char for d in self.outputs)

    @property
    def compiled(self) -> Loop:
        """The declared loop that runs: itself, or the one a float16 loop computes in."""
        return self.runs or self


@dataclass(frozen=True)
class Layout:
    """A parsed gufunc layout such as ``"()->(n)"`` or ``"(m),(m)->()"``."""

    text: str
    inputs: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]

    @property
    def output_only_dims(self) -> tuple[str, ...]:
        """Core dimensions that appear only in outputs; a call passes their sizes as integers."""
        seen = {d for dims in self.inputs for d in dims}
        found: list[str] = []
        for dims in self.outputs:
            found += [d for d in dims if d not in seen and d not in found]
        return tuple(found)

    @property
    def numba_layout(self) -> str:
        """The layout Numba compiles: outputs become writable inputs and no output is declared.

        Numba refuses output-only core dimensions (numba#2797) and numba-cuda fails on gufuncs
        without outputs, so the CPU targets compile every argument as an input and mark the
        outputs ``writable_args``; the dispatcher always allocates or validates ``out`` itself.
        """
        return ",".join(_format_dims(d) for d in self.inputs + self.outputs)


_DIMS = re.compile(r"\(([^()]*)\)")


def _format_dims(dims: tuple[str, ...]) -> str:
    return "(" + ",".join(dims) + ")"


def parse_layout(text: str) -> Layout:
    """Parse ``"(),(n)->(n)"`` into core dimension names per argument."""
    if "->" not in text:
        raise KernelDefinitionError(f"layout {text!r} needs '->' between inputs and outputs")
    left, right = (side.replace(" ", "") for side in text.split("->"))

    def side(part: str) -> tuple[tuple[str, ...], ...]:
        groups = _DIMS.findall(part)
        if ",".join(f"({g})" for g in groups) != part:
            raise KernelDefinitionError(f"layout {text!r} is not of the form '(i),(j)->(k)'")
        dims = tuple(tuple(d for d in g.split(",") if d) for g in groups)
        for name in (d for ds in dims for d in ds):
            if not name.isidentifier():
                raise KernelDefinitionError(f"layout {text!r}: {name!r} is not a dimension name")
        return dims

    layout = Layout(text=text.replace(" ", ""), inputs=side(left), outputs=side(right))
    if not layout.outputs:
        raise KernelDefinitionError(f"layout {text!r} declares no output")
    return layout


def _arg_dtype(t: types.Type, signature: str) -> np.dtype:
    scalar = t.dtype if isinstance(t, types.Array) else t
    try:
        dtype = as_dtype(scalar)
    except NotImplementedError:
        dtype = None
    if dtype is None or dtype.kind not in LOOP_KINDS or dtype.itemsize > 16:
        raise KernelDefinitionError(
            f"signature {signature!r}: {scalar} is not a loop type; loops take bool, integers, "
            "float32, float64, complex64 and complex128")
    if dtype == HALF:
        raise KernelDefinitionError(
            f"signature {signature!r}: float16 is a storage type; declare the float32 loop, in "
            "which float16 inputs compute (with float16 results, as NumPy's float16 loops)")
    return dtype


def _returned(ret: types.Type | None, signature: str, is_gufunc: bool) -> tuple[types.Type, ...]:
    """The output types a signature declares: a gufunc's are among its arguments (``void``), an
    elementwise kernel returns one value or a tuple of values (several outputs)."""
    if is_gufunc:
        if ret not in (None, types.void):
            raise KernelDefinitionError(f"gufunc signature {signature!r} must return void")
        return ()
    if ret is None or ret == types.void:
        raise KernelDefinitionError(f"signature {signature!r} declares no return type")
    if isinstance(ret, types.BaseTuple):
        if len(ret) == 0:
            raise KernelDefinitionError(f"signature {signature!r} returns an empty tuple")
        return tuple(ret)  # type: ignore[arg-type]  # iterable (its types); numba's stubs omit it
    return (ret,)


def parse_loop(signature: str, nargs: int, is_gufunc: bool, nout: int = 0) -> Loop:
    """Check one Numba signature string and return its :class:`Loop` (``nout``: a gufunc's
    number of outputs, its last arguments)."""
    try:
        args, ret = sigutils.normalize_signature(signature)
    except Exception as exc:
        hint = (" (a tuple of several types is written Tuple((float64, int64)), or "
                "UniTuple(float64, 2) for one type)") if "Tuple(" in signature else ""
        raise KernelDefinitionError(f"cannot parse signature {signature!r}: {exc}{hint}") from exc
    if len(args) != nargs:
        raise KernelDefinitionError(
            f"signature {signature!r} has {len(args)} arguments, the function takes {nargs}"
        )
    returned = _returned(ret, signature, is_gufunc)
    inputs = args[: nargs - nout] if is_gufunc else args
    outputs = args[nargs - nout:] if is_gufunc else returned
    for t in returned:
        if isinstance(t, types.Array):
            raise KernelDefinitionError(f"signature {signature!r}: an elementwise kernel returns "
                                        "scalars; declare a gufunc to write arrays")
    return Loop(signature=signature, inputs=tuple(_arg_dtype(t, signature) for t in inputs),
                outputs=tuple(_arg_dtype(t, signature) for t in outputs))


def check_loops(loops: tuple[Loop, ...], name: str) -> None:
    """Every loop must be selectable: NumPy picks the first loop that the inputs cast to safely,
    so a loop whose inputs all cast safely to an earlier loop's is never picked (declare
    narrower loops first), and two loops of the same inputs are ambiguous."""
    if len({len(lp.outputs) for lp in loops}) > 1:
        raise KernelDefinitionError(f"kernel {name!r}: every signature must return the same number "
                                    f"of outputs, got {[lp.signature for lp in loops]}")
    for i, later in enumerate(loops):
        for earlier in loops[:i]:
            if earlier.inputs == later.inputs:
                raise KernelDefinitionError(
                    f"kernel {name!r}: duplicate loops for inputs ({later.types.split('->')[0]}): "
                    f"{earlier.signature!r} and {later.signature!r}")
            if all(np.can_cast(a, b, "safe") for a, b in zip(later.inputs, earlier.inputs)):
                raise KernelDefinitionError(
                    f"kernel {name!r}: loop {later.signature!r} is never selected: its inputs cast "
                    f"safely to those of {earlier.signature!r} before it (NumPy picks the first loop "
                    "that fits); declare narrower loops first, e.g. float32 before float64")


def half_loops(loops: tuple[Loop, ...]) -> tuple[Loop, ...]:
    """The loops a call selects from: before each declared loop with float32 arguments, its
    float16 twin (float32 replaced by float16), computing in it, as NumPy's float16 loops
    compute in float32 and round the results to float16. A loop that an earlier declared
    loop's float16 twin already covers gets none."""
    f32 = np.dtype(np.float32)
    result: list[Loop] = []
    for lp in loops:
        if f32 in lp.inputs + lp.outputs:
            twin = Loop(lp.signature, tuple(HALF if d == f32 else d for d in lp.inputs),
                        tuple(HALF if d == f32 else d for d in lp.outputs), runs=lp)
            if all(t.inputs != twin.inputs for t in result):
                result.append(twin)
        result.append(lp)
    return tuple(result)


@dataclass(frozen=True)
class CupyFormula:
    """A CuPy ``ElementwiseKernel`` computing what the kernel computes: the GPU benchmark's anchor.

    The three strings are ``cupy.ElementwiseKernel(in_params, out_params, operation, name)``'s
    arguments, with ``T`` the benchmarked dtype. The benchmark calls it with the sample arrays
    and the scalar arguments of :class:`Benchmark` (cast to ``T``), then, for a generalized
    kernel, each output-only core size as ``int32`` and the number of samples ``N`` as ``int64``,
    and one ``raw`` output buffer of shape ``sizes + (N,)`` (order-major, as the cuda target
    writes: ``out[k * N + i]``); for an elementwise kernel CuPy allocates the output, or is
    given ``out``.
    """

    in_params: str
    out_params: str
    operation: str


@dataclass(frozen=True, eq=False)
class Benchmark:
    """How the benchmarks time a kernel, and what they compare it with.

    Optional for any kernel (the library never reads it); ``python -m benchmarks`` refuses to
    run while a registered kernel has none, as NumPy's ``bench_ufunc.py`` does.

    Attributes
    ----------
    expressions : mapping of str to callable
        Label -> NumPy/SciPy function called with the kernel's call arguments (sample arrays,
        scalars, output-only sizes); the first is the CPU anchor every ratio ``/np`` divides by.
    scalars : tuple of float
        Representative values of the inputs after the sample arrays, cast to the benchmarked
        dtype (``gaussian``: ``x0`` and ``sigma``).
    sizes : tuple of int
        The output-only core dimension sizes a generalized kernel is called with
        (``hermite_norm``: 32 orders, so each sample writes 32 values).
    arrays : int
        How many leading inputs are sample arrays of ``n`` elements; the others are scalars.
    cupy : CupyFormula or None
        The same formula as a CuPy ``ElementwiseKernel``, the GPU anchor (needed by the GPU
        suite only).
    """

    expressions: Mapping[str, Callable[..., Any]]
    scalars: tuple[float, ...] = ()
    sizes: tuple[int, ...] = ()
    arrays: int = 1
    cupy: CupyFormula | None = None

    def outputs_per_sample(self, nout: int = 1) -> int:
        """Output elements written per sample: ``nout`` times the output-only sizes' product."""
        return nout * int(np.prod(self.sizes, dtype=np.int64))

    def bytes_per_sample(self, itemsize: int, nout: int = 1) -> int:
        """Bytes read plus written per sample (scalars are passed by value)."""
        return itemsize * (self.arrays + self.outputs_per_sample(nout))


def check_benchmark(benchmark: Benchmark, name: str, nin: int, layout: Layout | None) -> None:
    """Raise :class:`KernelDefinitionError` unless ``benchmark`` fits the kernel's arguments."""
    def fail(message: str) -> None:
        raise KernelDefinitionError(f"kernel {name!r}: benchmark {message}")

    if not isinstance(benchmark, Benchmark):
        fail(f"must be a gpufuncs.Benchmark, got {type(benchmark).__name__}")
    if not benchmark.expressions:
        fail("needs at least one NumPy/SciPy expression")
    if not 1 <= benchmark.arrays <= nin or benchmark.arrays + len(benchmark.scalars) != nin:
        fail(f"gives {benchmark.arrays} sample arrays and {len(benchmark.scalars)} scalars for "
             f"{nin} inputs")
    wanted = len(layout.output_only_dims) if layout else 0
    if len(benchmark.sizes) != wanted:
        fail(f"gives {len(benchmark.sizes)} output-only sizes, the layout has {wanted}")
    if layout is not None and any(layout.inputs):
        fail(f"covers gufuncs with scalar inputs per sample only, not layout {layout.text!r}")


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """Everything declared about one kernel.

    Attributes
    ----------
    name : str
        Short name: ``__name__`` of the public callable (the function's, or ``name=``).
    pyfunc : callable
        The scalar Python function (``math`` only). For gufuncs it receives the output arrays as
        trailing arguments and writes into them.
    loops : tuple of Loop
        The declared loops, in the order calls select them (see :meth:`selectable`).
    layout : Layout or None
        Core dimensions of a generalized kernel; ``None`` for an elementwise one.
    reference : callable
        NumPy/SciPy function the kernel must agree with, called with float64 NumPy inputs (and
        the output-only core dimension sizes, for gufuncs).
    tolerances : mapping of dtype (or ``(target, dtype)``) to Tolerance
        Accepted error per loop dtype, optionally per target (CUDA's ``expf`` is within 2 ULP
        where the CPU's libm is within 1).
    doc : str
        The docstring of the public callable.
    identity : float or None
        The value ``reduce`` starts from, for binary kernels that have one.
    domains : mapping of argument name to (low, high)
        Where each input is meaningful; test inputs favour it and probe its edges.
    benchmark : Benchmark or None
        The benchmarks' declaration (anchors and arguments); ``None`` for most user kernels.
    lazy : bool
        Declared without signatures: calls add loops for new input types (see
        :mod:`gpufuncs.dispatch.lazy`).
    boundscheck : bool
        Compile the body with Numba's bounds checks: an out-of-range index is an
        ``IndexError`` naming the kernel (see :func:`gpufuncs.targets.base.bounds_checked`).
    tuple_results : bool
        This is the gufunc form of an elementwise kernel of several outputs (see
        :attr:`executed`): ``pyfunc`` returns the outputs' values as a tuple, which the targets
        store into the one-element outputs.
    """

    name: str
    pyfunc: Callable[..., Any]
    loops: tuple[Loop, ...]
    layout: Layout | None
    reference: Callable[..., Any] | None
    tolerances: Mapping[Any, Tolerance]
    doc: str
    identity: float | None = None
    domains: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    arg_names: tuple[str, ...] = ()
    benchmark: Benchmark | None = None
    lazy: bool = False
    boundscheck: bool = False
    tuple_results: bool = False

    def __post_init__(self) -> None:
        if self.nin == 0:
            # NumPy's typed ufuncs all take inputs (only np.frompyfunc's object ufuncs may
            # not): with none, no loop can be selected from the inputs' dtypes, and Numba's
            # @vectorize of a function without arguments crashes the process when called.
            raise KernelDefinitionError(
                f"kernel {self.name!r} takes no inputs; a kernel needs at least one input "
                "(pass a dummy input, or fill an array with numpy.full)")
        if "." in self.name:  # the registry tells short names from full names by the dot
            raise KernelDefinitionError(f"kernel {self.name!r}: a kernel's name cannot contain '.'")

    @property
    def full_name(self) -> str:
        """``module.qualname`` of the definition, its last part the kernel's name (``name=``
        renames the function in its scope): ``"gpufuncs.kernels.exp.exp"``, ``"__main__.act"``,
        ``"mod.make.<locals>.act"``. The registry's key."""
        module = getattr(self.pyfunc, "__module__", None) or "?"
        scope = getattr(self.pyfunc, "__qualname__", "").rpartition(".")[0]
        return ".".join(part for part in (module, scope, self.name) if part)

    @property
    def is_gufunc(self) -> bool:
        return self.layout is not None

    @property
    def nin(self) -> int:
        return len(self.layout.inputs) if self.layout else len(self.arg_names)

    @property
    def nout(self) -> int:
        if self.layout is not None:
            return len(self.layout.outputs)
        return len(self.loops[0].outputs) if self.loops else 1  # (a lazy kernel's: one value)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.arg_names[: self.nin]

    @functools.cached_property
    def executed(self) -> KernelSpec:
        """The spec that calls are planned with and targets compile: this one, or for an
        elementwise kernel of several outputs (``return q, r``) the gufunc ``(),()->(),()`` of
        the same loops, whose outputs are one-element rows the targets store each returned
        value into. Numba's ``@vectorize`` cannot compile such a kernel, its ``@guvectorize`` can,
        and every target's gufunc paths (flat loops, Numba's objects, the CUDA templates) then
        serve it; NumPy's rules for the two are the same (broadcasting, ``out=`` tuples)."""
        if self.layout is not None or self.nout == 1:
            return self
        nin, nout = self.nin, self.nout
        layout = parse_layout(",".join(["()"] * nin) + "->" + ",".join(["()"] * nout))
        loops = tuple(replace(lp, signature=_gufunc_signature(lp.signature))
                      for lp in self.loops)
        return replace(self, layout=layout, loops=loops, tuple_results=True)

    def tolerance(self, dtype: np.dtype, target: str | None = None) -> Tolerance:
        """The declared tolerance for ``dtype`` on ``target`` (a per-target entry, keyed
        ``(target, dtype)``, wins over the dtype's), else :func:`default_tolerance`."""
        dtype = np.dtype(dtype)
        return (self.tolerances.get((target, dtype)) or self.tolerances.get(dtype)
                or default_tolerance(dtype))

    @functools.cached_property
    def selectable(self) -> tuple[Loop, ...]:
        """The loops a call selects from, in order: the declared ones and their float16 twins
        (see :func:`half_loops`)."""
        return half_loops(self.loops)

    def loop_for(self, dtype: np.dtype) -> Loop | None:
        """The declared loop whose every argument is ``dtype``, if any."""
        return next((lp for lp in self.loops if lp.dtype == dtype), None)

    @functools.cached_property
    def array_args(self) -> tuple[bool, ...]:
        """Which arguments the scalar function receives as arrays (a gufunc's core operands, and
        ``()`` outputs, which arrive as one-element arrays the way Numba passes them)."""
        args, _ = sigutils.normalize_signature(self.loops[0].signature)
        return tuple(isinstance(t, types.Array) for t in args)

    @functools.cached_property
    def source_key(self) -> str | None:
        """What compiled code of this kernel depends on, for disk caches: a digest of the module
        that defines the scalar function (its helpers and constants included) and its name;
        for a function gpufuncs generated (a fused function's: its text in ``source``, compiled
        with the Numba options in ``numba_options``), of that text and those options; ``None``
        for a function with no source file (a REPL or notebook cell)."""
        generated = getattr(self.pyfunc, "source", None)
        if isinstance(generated, str):
            options = repr(sorted(getattr(self.pyfunc, "numba_options", {}).items()))
            return hashlib.sha256(f"{generated}\0{options}\0{self.pyfunc.__qualname__}".encode()).hexdigest()
        try:
            path = inspect.getsourcefile(self.pyfunc)
            if path is None:
                return None
            source = Path(path).read_bytes()
        except (TypeError, OSError):
            return None
        return hashlib.sha256(source + self.pyfunc.__qualname__.encode()).hexdigest()


def _gufunc_signature(signature: str) -> str:
    """``"UniTuple(float64, 2)(float64)"`` as the gufunc's ``"void(float64, float64[:], float64[:])"``."""
    args, returned = sigutils.normalize_signature(signature)
    return f"void({', '.join([*map(str, args), *(f'{t}[:]' for t in returned)])})"


def kernel_spec(value: Any) -> KernelSpec | None:
    """The :class:`KernelSpec` of a gpufuncs kernel object (``gpufuncs.clamp``), else ``None``.

    Targets and caches meet kernels as values a scalar function reads (a kernel calling
    another); they import nothing from dispatch, so a kernel is known by the spec it carries.
    """
    try:
        spec = getattr(value, "spec", None)
    except Exception:  # an object whose attribute lookup fails in its own way
        return None
    return spec if isinstance(spec, KernelSpec) else None


def _identity(x):
    return x


#: ``x -> x`` in float32 and float64: casting copies between device arrays, and new copies.
IDENTITY = KernelSpec(
    name="identity", pyfunc=_identity, layout=None, reference=None, tolerances={}, doc="x -> x",
    loops=tuple(parse_loop(f"{t}({t})", 1, False) for t in ("float32", "float64")),
    arg_names=("x",),
)

#: ``x -> x`` for every numeric dtype: the device copies of ``reduce`` (a result into ``out=``,
#: an array reduced over no axis, the identity put where ``where=`` is false), which keep the
#: array's dtype, as NumPy's do (IDENTITY's float loops would turn integers into floats).
COPY = KernelSpec(
    name="copy", pyfunc=_identity, layout=None, reference=None, tolerances={}, doc="x -> x",
    loops=tuple(parse_loop(f"{t}({t})", 1, False) for t in (
        "boolean", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float32", "float64", "complex64", "complex128")),
    arg_names=("x",),
)
