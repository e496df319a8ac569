"""A trace as one scalar function: the body of the fused kernel.

The function is made from source text, as :func:`gpufuncs.targets.compose.storing_results`
makes its own: Numba compiles a ufunc's scalar function for an exact number of parameters, and
one straight-line function is one thing to compile (a closure per operation would be one Numba
function each, several times the compile time of the same body written by hand). The text holds
only generated names (``a0`` for arguments, ``v3`` for values, ``k0`` for constants, ``kernel1``
for called kernels) and the expressions of :mod:`.ops`; every name it reads is in its scope.
Each statement casts its value to the dtype NumPy's eager call gives it, so the body computes
what the eager call computes, one element at a time.
"""

from __future__ import annotations

import cmath
import functools
import math
import types
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba.np.numpy_support import from_dtype

from ..targets.cpu.loops import prefetch, scratch, scratch_from, wide_vectors
from .ops import HELPERS
from .reduction import (
    AHEAD,
    BLOCK,
    COMPENSATED,
    FOLDED,
    LANES,
    PAIRWISE_SUMS,
    PAIRWISE_TREE,
    STEP,
    Reduction,
    sums_rows_as_numpy,
)
from .trace import Operand, Trace

#: The cast to each dtype, by the name the expressions use (``t_float32(x)``).
_CASTS = {f"t_{np.dtype(c).name}": np.dtype(c).type for c in "?bBhHiIlLqQfdFD"}


class _Body:
    """The statements of the fused function and the scope they read."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.scope: dict[str, Any] = {"math": math, "cmath": cmath, **HELPERS, **_CASTS}
        self.values = [f"a{i}" for i in range(len(trace.arguments))]  # the name of each symbol
        self.lines: list[str] = []
        self._constants = 0

    def constant(self, value: Any, prefix: str) -> str:
        name = f"{prefix}{self._constants}"
        self._constants += 1
        self.scope[name] = value
        return name

    def cast(self, expression: str, dtype: np.dtype) -> str:
        if dtype == np.bool_:  # truth, as NumPy's cast to bool (NaN is true)
            return f"({expression}) != 0"
        return f"t_{dtype.name}({expression})"

    def read(self, operand: Operand) -> str:
        if isinstance(operand.value, np.generic):  # a constant, of its loop dtype already
            return self.constant(operand.value, "k")
        name = self.values[operand.value]
        return name if self.trace.dtypes[operand.value] == operand.to else self.cast(name, operand.to)

    def step(self, expression: str, operands: list[str], results: tuple[np.dtype, ...],
             kernel: Any) -> None:
        first = len(self.values)
        if kernel is not None:
            expression = f"{self.constant(kernel, 'kernel')}({', '.join(operands)})"
        else:
            expression = expression.format(*operands)
        if len(results) == 1:
            self.lines.append(f"v{first} = {self.cast(expression, results[0])}")
        else:
            self.lines.append(f"t{first} = {expression}")
            self.lines += [f"v{first + k} = {self.cast(f't{first}[{k}]', dtype)}"
                           for k, dtype in enumerate(results)]
        self.values += [f"v{first + k}" for k in range(len(results))]


def scalar_function(trace: Trace, like: types.FunctionType, arguments: tuple[int, ...],
                    outputs: tuple[int, ...]) -> types.FunctionType:
    """The fused scalar function of ``trace``'s symbols ``outputs`` (which depend on the
    ``arguments`` only: its parameters), named as ``like`` (the user's function)."""
    body = _Body(trace)
    needed = _needed(trace, outputs)
    for step, first in zip(trace.steps, _firsts(trace)):
        if first in needed:
            body.step(step.expression, [body.read(op) for op in step.operands], step.results,
                      step.kernel)
        else:  # a value no output reads: no statement
            body.values += [""] * len(step.results)
    returned = ", ".join(body.values[i] for i in outputs)
    parameters = ", ".join(f"a{i}" for i in arguments)
    lines = [f"def fused({parameters}):", *(f"    {line}" for line in body.lines), f"    return {returned}"]
    scope = dict(body.scope, __name__=like.__module__)
    exec(compile("\n".join(lines), f"<gpufuncs fused {like.__qualname__}>", "exec"), scope)
    fused = scope["fused"]
    fused.__name__, fused.__qualname__, fused.__module__ = like.__name__, like.__qualname__, like.__module__
    fused.__doc__ = like.__doc__
    fused.source = "\n".join(lines)  # what the targets compile, for errors and curious users
    return fused


def _firsts(trace: Trace) -> list[int]:
    """The symbol index of each step's first result."""
    firsts, index = [], len(trace.arguments)
    for step in trace.steps:
        firsts.append(index)
        index += len(step.results)
    return firsts


def _needed(trace: Trace, outputs: tuple[int, ...]) -> set[int]:
    """The first results of the steps that ``outputs`` read, directly or not."""
    steps = dict(zip(_firsts(trace), trace.steps))
    owner = {first + k: first for first, step in steps.items() for k in range(len(step.results))}
    needed: set[int] = set()
    pending = [i for i in outputs if i in owner]
    while pending:
        first = owner[pending.pop()]
        if first not in needed:
            needed.add(first)
            pending += [op.value for op in steps[first].operands
                        if not isinstance(op.value, np.generic) and op.value in owner]
    return needed


def signature(trace: Trace, arguments: tuple[int, ...], outputs: tuple[int, ...]) -> str:
    """The Numba signature of the fused scalar function: its arguments' and results' types."""
    parameters = ", ".join(str(from_dtype(trace.dtypes[i])) for i in arguments)
    results = [str(from_dtype(trace.dtypes[i])) for i in outputs]
    returned = results[0] if len(results) == 1 else f"Tuple(({', '.join(results)}))"
    return f"{returned}({parameters})"


def reduction_function(trace: Trace, like: types.FunctionType, arguments: tuple[int, ...],
                       reduction: Reduction, arrays: tuple[bool, ...],
                       blocked: bool = True, columns: bool = False,
                       one_row: bool = False) -> types.FunctionType:
    """The body of the generalized kernel computing ``reduction`` of ``trace``: for each element
    of its two-dimensional core, the fused value (the scalar function of the reduced symbol,
    called as an ``@njit`` helper), added into the accumulator. Its parameters are the
    ``arguments`` (a ``(m, n)`` core array where ``arrays`` says so, else a scalar) and the
    one-element output. ``blocked``: the host's loops (values in blocks of :data:`BLOCK`, or
    in lanes: see :func:`_in_lanes`); a GPU thread adds one value at a time.
    ``columns``: the body of ``(m,k)->(k)`` instead (see :func:`_columns`). ``one_row``: the
    host body of a sum whose core is one row, ``(n)`` (only where
    :func:`.reduction.sums_rows_as_numpy`), summed as NumPy sums it (see
    :func:`_row_as_numpy`), its parameters followed by ``lo`` and ``length``: the part of the
    row it sums, ``[lo, lo + length)``; the body of ``(m, n)`` cores, and of the pieces of one reduction,
    keeps compensated sums, more accurate than NumPy's. (Two kernels, not one body with a
    branch on ``m``: a call compiles only the one its cores need, and each copy of the
    values' code is a part of a fused sum's first call.)"""
    acc, name = reduction.dtype, reduction.name
    mapped = numba.njit(scalar_function(trace, like, arguments, (reduction.symbol,)))
    start = reduction.start if name == "reduce" else _initial(name, acc)
    scope = {"mapped": mapped, "math": math, "np": np, **HELPERS, **_CASTS, **COMPENSATED,
             "combine": reduction.combine, "k_init": acc.type(start), "k_type": acc.type,
             "k_wide": (np.complex128 if acc.kind == "c" else np.float64)(0), "__name__": like.__module__,
             "wide_vectors": wide_vectors, "scratch": scratch, "scratch_from": scratch_from,
             "prefetch": prefetch}
    params = [f"a{i}" for i in arguments]
    first = params[arrays.index(True)]
    # Indices as unsigned integers: a signed index is tested for wrapping around (NumPy's
    # negative indices) at every load, and that branch keeps the loops from vectorizing.
    index = "[uj]" if one_row else "[ui, uj]"
    value = f"mapped({', '.join(f'{p}{index}' if a else p for p, a in zip(params, arrays))})"
    cast = f"({value}) != 0" if name in ("any", "all") or acc.kind == "b" else f"t_{acc.name}({value})"
    loops = [f"    for i in range({first}.shape[0]):", "        ui = t_uint64(i)",
             f"        for j in range({first}.shape[1]):", "            uj = t_uint64(j)"]
    read = [(p, trace.dtypes[i].itemsize) for p, i, a in zip(params, arguments, arrays) if a]
    fetch = functools.partial(_ahead, read, "{}" if one_row else "(ui, {})")
    if one_row:
        assert blocked and sums_rows_as_numpy(reduction), "a one-row body is a host sum's"
        lines = _row_as_numpy(cast, fetch)
    elif columns:
        lines = _columns(name, acc, cast, first)
    elif blocked and name == "reduce":
        lines = _pairwise(acc, cast, first, loops, fetch)
    elif blocked and name in ("min", "max"):
        lines = _extreme_in_lanes(name, cast, first, loops, fetch)
    elif name in ("sum", "mean") and acc.kind in "fc":
        lines = _compensated(acc, cast, first, loops, blocked, fetch)
    else:
        lines = ["    s = k_init", *loops, f"            v = {cast}",
                 f"            s = {_COMBINE[name].format(acc=acc.name, s='s')}", "    out[0] = s"]
    if blocked:  # (the loops are this function's own: the flat loops' vector width, see wide_vectors)
        lines.insert(0, "    wide_vectors()")
    extra = ["lo", "length"] if one_row else []  # (the part of the row to sum: see _row_as_numpy)
    lines.insert(0, f"def reduce_{name}({', '.join([*params, *extra])}, out):")
    exec(compile("\n".join(lines), f"<gpufuncs fused {like.__qualname__}, {name}>", "exec"), scope)
    body = scope[f"reduce_{name}"]
    body.__qualname__, body.__module__ = f"{like.__qualname__}.{name}", like.__module__
    body.source = "\n".join(lines) + "\n\n" + mapped.py_func.source
    if blocked and not columns:
        # A host body is compiled without Numba's reference counting (it allocates nothing; the
        # columns' body does, and the GPU's ignore the options): its core views' counts, an
        # atomic increment and decrement a row, were left in wherever Numba's pruning gave up
        # on the body's branches (a row of 10 float32 values: 3x NumPy's time).
        body.numba_options = {"_nrt": False}
    return body


#: Each reduction's step, of the running value ``s`` and the next value ``v``.
_COMBINE = {"sum": "{s} + v", "mean": "{s} + v", "prod": "t_{acc}({s} * v)", "min": "minimum({s}, v)",
            "max": "maximum({s}, v)", "any": "{s} | v", "all": "{s} & v",
            "reduce": "t_{acc}(combine({s}, v))"}


def _columns(name: str, acc: np.dtype, cast: str, first: str) -> list[str]:
    """A reduction over the first axis of a ``(m, k)`` core into its ``k`` columns: row after
    row, each row's values added into ``k`` running values (a loop over contiguous columns,
    which vectorizes), NumPy's own order for a reduction over a leading axis of a C array.
    Floating sums run in ``float64`` (``complex128``), rounded once into the output."""
    wide = acc
    if name in ("sum", "mean") and acc.kind in "fc":
        wide = np.dtype(np.complex128 if acc.kind == "c" else np.float64)
    step = _COMBINE[name].format(acc=acc.name, s="run[uj]")
    kind, start, value = "k_type", "k_init", cast  # (k_type: the accumulation dtype's scalar type)
    if wide != acc:
        kind, start, value = f"t_{wide.name}", f"t_{wide.name}(k_init)", f"t_{wide.name}({cast})"
    return [f"    k = {first}.shape[1]", f"    run = np.empty(k, {kind})",
            "    for j in range(k):", f"        run[t_uint64(j)] = {start}",
            f"    for i in range({first}.shape[0]):", "        ui = t_uint64(i)",
            "        for j in range(k):", "            uj = t_uint64(j)",
            f"            v = {value}", f"            run[uj] = {step}",
            "    for j in range(k):", "        out[t_uint64(j)] = run[t_uint64(j)]"]


def _ahead(read: list[tuple[str, int]], index: str, start: str, end: str, count: int,
           indent: int) -> list[str]:
    """The statements that prefetch the ``count`` values :data:`.reduction.AHEAD` past
    ``start`` of each array of ``read`` (its name and item size; ``index`` formats the index
    of the core, a row's value or ``(ui, value)``), where that is before ``end``, a cache
    line at a time, at ``indent``."""
    lines = [f"if {start} + {AHEAD} < {end}:"]
    for name, itemsize in read:
        lines += [f"    for k in range(0, {count}, {max(1, 64 // itemsize)}):",
                  f"        prefetch({name}, {index.format(f't_uint64({start} + {AHEAD} + k)')})"]
    return [" " * indent + line for line in lines]


def _blocks(cast: str, first: str, loops: list[str], fetch: Callable[..., list[str]]) -> list[str]:
    """The statements that fill ``buf`` with each block of :data:`BLOCK` values of a row of
    the core, the last one padded with ``k_init`` (its arrays fetched ahead by ``fetch``, see
    :func:`_ahead`); the block's own statements follow, at the indentation of the fill loop."""
    return [f"    buf = scratch({BLOCK}, k_type)", f"    n = {first}.shape[1]", *loops[:2],
            f"        for j0 in range(0, n, {BLOCK}):", *fetch("j0", "n", BLOCK, 12),
            f"            m = min({BLOCK}, n - j0)",
            "            for k in range(m):", "                uj = t_uint64(j0 + k)",
            f"                buf[t_uint64(k)] = {cast}",
            f"            for k in range(m, {BLOCK}):", "                buf[t_uint64(k)] = k_init"]


def _pairwise(acc: np.dtype, cast: str, first: str, loops: list[str],
              fetch: Callable[..., list[str]]) -> list[str]:
    """A host reduction by a combining kernel, in NumPy's pairwise order: each block (see
    :func:`_blocks`) combined in halves (a loop over contiguous values, which vectorizes
    where the kernel does), and the blocks' values in a binary cascade: every value goes
    through about ``log2(n)`` combinations, as in NumPy's pairwise summation, not ``n``."""
    step = _COMBINE["reduce"].format(acc=acc.name, s="{a}")
    halves = [f"            half = {BLOCK // 2}", "            while half:",
              "                for k in range(half):", "                    uk = t_uint64(k)",
              "                    v = buf[uk + half]",
              "                    buf[uk] = " + step.format(a="buf[uk]"), "                half >>= 1"]
    return ["    stack = scratch(64, k_type)", "    blocks = 0", *_blocks(cast, first, loops, fetch),
            *halves, "            v = buf[0]", "            level = 0", "            count = blocks",
            "            while count & 1:", "                v = " + step.format(a="stack[level]"),
            "                level += 1", "                count >>= 1",
            "            stack[level] = v", "            blocks += 1",
            "    s = k_init", "    level = 0", "    while blocks:", "        if blocks & 1:",
            "            v = s", "            s = " + step.format(a="stack[level]"),
            "        level += 1", "        blocks >>= 1", "    out[0] = s"]


def _in_lanes(cast: str, first: str, loops: list[str], update: str,
              fetch: Callable[..., list[str]]) -> list[str]:
    """The statements that take each row of the core as rows of :data:`.reduction.LANES`
    values, value ``j`` of each into lane ``j`` by ``update`` (a statement of ``lane`` and the
    value ``v``), the last, partial row into the first lanes: a loop over contiguous lanes
    that computes the values where it combines them, which vectorizes (through a buffer of
    values, a copy and the lanes' loads and stores per block took as long again)."""
    step = [f"v = {cast}", update]
    return [f"    n = {first}.shape[1]", f"    whole = n - n % {LANES}", *loops[:2],
            f"        for j0 in range(0, whole, {LANES}):", *fetch("j0", "n", LANES, 12),
            f"            for j in range({LANES}):",
            "                uj = t_uint64(j0 + j)", "                lane = t_uint64(j)",
            *(f"                {line}" for line in step),
            "        for j in range(whole, n):", "            uj = t_uint64(j)",
            "            lane = t_uint64(j - whole)", *(f"            {line}" for line in step)]


def _extreme_in_lanes(name: str, cast: str, first: str, loops: list[str],
                      fetch: Callable[..., list[str]]) -> list[str]:
    """A host ``min`` or ``max``: each lane (see :func:`_in_lanes`) keeps its own extreme,
    then the lanes' extremes are combined. NaN propagates as in NumPy's
    (``minimum``/``maximum``)."""
    step = "minimum" if name == "min" else "maximum"
    return [f"    run = scratch({LANES}, k_type)", f"    for j in range({LANES}):",
            "        run[t_uint64(j)] = k_init",
            *_in_lanes(cast, first, loops, f"run[lane] = {step}(run[lane], v)", fetch),
            *_folded(f"run[lane] = {step}(run[lane], run[other])"),
            "    s = k_init", "    for j in range(used):", f"        s = {step}(s, run[t_uint64(j)])",
            "    out[0] = s"]


def _folded(*update: str) -> list[str]:
    """The statements that fold the ``used`` lanes of a row of ``n`` values (the first
    ``min(n, LANES)``; the others hold nothing) into :data:`.reduction.FOLDED`: the upper half
    into the lower by the ``update`` statements (of lanes ``lane`` and ``other``), a loop over
    contiguous lanes that vectorizes, then the next half. All 64 lanes combined one after the
    other took 130 ns of a float64 sum of a row of 10 values (NumPy's whole sum of it: 14 ns)."""
    return [f"    used = min(n, {LANES})", f"    half = {LANES // 2}", f"    while half >= {FOLDED}:",
            "        if used > half:", "            for j in range(used - half):",
            "                lane, other = t_uint64(j), t_uint64(j + half)",
            *(f"                {line}" for line in update), "            used = half", "        half //= 2"]


def _sum_in_lanes(cast: str, first: str, loops: list[str], fetch: Callable[..., list[str]]) -> list[str]:
    """A host float64 (complex128) sum's statements: the values added into
    :data:`.reduction.LANES` running compensated sums (see :func:`_in_lanes` and
    :func:`.reduction.lane_add`), folded (:func:`_folded`) and added up at the end."""
    return [f"    lane_s = scratch({LANES}, k_type)", f"    lane_e = scratch({LANES}, k_type)",
            f"    for j in range({LANES}):", "        lane_s[t_uint64(j)] = lane_e[t_uint64(j)] = k_init",
            *_in_lanes(cast, first, loops, "lane_add(lane_s, lane_e, lane, v, k_init)", fetch),
            *_folded("lane_add(lane_s, lane_e, lane, lane_s[other], k_init)",  # (its error kept too)
                     "lane_e[lane] += lane_e[other]"),
            "    out[0] = lanes_total(lane_s, lane_e, k_init, used)"]


def _row_as_numpy(cast: str, fetch: Callable[..., list[str]]) -> list[str]:
    """A host floating sum's statements for a core of one row, ``(n)``, its values ``lo`` to
    ``lo + length`` (parameters) summed as NumPy sums them, in its pairwise order (see
    :func:`.reduction.pairwise_next`): NumPy's bits, where NumPy reduces the row in one inner
    loop (a C-ordered array's rows, strided or not, and a 1-D array; along another order, rows
    of a Fortran array, it is at least as accurate; a part of NumPy's tree, see
    :func:`.reduction.numpy_subtrees`, is summed as NumPy sums that part). The
    helpers sum the tree's blocks (:func:`.reduction.numpy_block_sum`, its eight running sums
    one vector) from a buffer that the values fill :data:`.reduction.BLOCK` at a time, each
    computed once, whatever the blocks' lengths (120 values, or 97): a loop of a block's own
    length left the vectorized loop's remainder, up to 63 float32 values, to scalar code. The
    unread values move to the front where the buffer is full. A fill whose remainder past its
    last whole :data:`.reduction.STEP` is a quarter step or more computes its last ``STEP``
    values in a loop of that constant length first (the values computed twice are the same).
    One loop of the values' code otherwise: each copy makes a fused sum's first call longer
    (the measurements are in the commits that made this)."""
    return [f"    row = scratch({4 * BLOCK}, k_type)", f"    tree = scratch({PAIRWISE_TREE}, t_int64)",
            f"    sums = scratch({PAIRWISE_SUMS}, k_type)",
            "    done = lo", "    end = lo + length", "    at = 0", "    held = 0",
            "    m = pairwise_begin(tree, sums, length)", "    while m:",
            "        if held < m:", *fetch("done", "end", BLOCK, 12),
            f"            if at + held + {BLOCK} > {4 * BLOCK}:",
            "                for k in range(held):",
            "                    row[t_uint64(k)] = row[t_uint64(at + k)]",
            "                at = 0",
            f"            step = min({BLOCK}, end - done)",
            f"            if step > {STEP} and step % {STEP} >= {STEP // 4}:",
            f"                for k in range({STEP}):",
            f"                    uj = t_uint64(done + step - {STEP} + k)",
            f"                    row[t_uint64(at + held + step - {STEP} + k)] = {cast}",
            f"                step_first = step - step % {STEP}",
            "            else:",
            "                step_first = step",
            "            for k in range(step_first):",
            "                uj = t_uint64(done + k)",
            f"                row[t_uint64(at + held + k)] = {cast}",
            "            held += step", "            done += step",
            "        pairwise_leaf(tree, sums, scratch_from(row, at), m)",
            "        at += m", "        held -= m",
            "        m = pairwise_next(tree, sums)",
            "    out[0] = pairwise_total(tree, sums, k_init)"]


def _compensated(acc: np.dtype, cast: str, first: str, loops: list[str], blocked: bool,
                 fetch: Callable[..., list[str]]) -> list[str]:
    """A floating sum's statements: each value (or, ``blocked``, each block's sum, see
    :func:`.reduction.wide_block_sum`) added with Neumaier's compensation, real and imaginary
    parts apart; float64 (complex128) values on the host go :func:`_sum_in_lanes` instead.
    On the host, ``float32`` and ``complex64`` values are summed in ``float64`` (a block's
    plain sum there loses less than the compensated float32 one, and vectorizes), the total
    rounded once to the accumulation dtype (a core of one row has a body of its own:
    :func:`_row_as_numpy`)."""
    part = np.dtype(acc.char.lower()) if acc.kind == "c" else acc
    wide = np.dtype(np.float64) if blocked else part  # (a GPU thread sums in the dtype itself)
    if blocked and part.itemsize == wide.itemsize:
        return _sum_in_lanes(cast, first, loops, fetch)
    parts = ("r", "i") if acc.kind == "c" else ("r",)
    lines = [f"    s{k} = c{k} = t_{wide.name}(0)" for k in parts]
    if blocked:  # float32 (complex64) values, summed in float64 (complex128)
        lines += [*_blocks(cast, first, loops, fetch), "            v = wide_block_sum(buf, m, k_wide)"]
    else:
        lines += [*loops, f"            v = {cast}"]
    for k in parts:
        component = ("v.real" if k == "r" else "v.imag") if acc.kind == "c" else "v"
        lines += [f"            p, q = compensated_add(s{k}, c{k}, t_{wide.name}({component}))",
                  f"            s{k} = p", f"            c{k} = q"]
    totals = [f"t_{part.name}(compensated_total(s{k}, c{k}))" for k in parts]
    lines.append(f"    out[0] = {'complex(' + ', '.join(totals) + ')' if acc.kind == 'c' else totals[0]}")
    return lines


def _initial(name: str, dtype: np.dtype) -> Any:
    """The value a reduction starts from (its ufunc's identity; the extreme of the dtype for
    ``min`` and ``max``, which have none: an empty reduction of them is refused before)."""
    if name in ("sum", "mean", "any"):
        return 0
    if name in ("prod", "all"):
        return 1
    extreme = (np.inf if dtype.kind == "f" else True if dtype.kind == "b" else np.iinfo(dtype).max)
    return extreme if name == "min" else (-extreme if dtype.kind == "f" else
                                           False if dtype.kind == "b" else np.iinfo(dtype).min)
