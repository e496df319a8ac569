"""CPU benchmark: every registered kernel on ``cpu``, ``parallel`` and ``auto`` against NumPy/SciPy.

The ``cpu`` and ``overhead`` suites of ``python -m benchmarks`` (which runs them: ``--quick``
for n up to 10^6, fewer repetitions, no crossover sweep; ``--large`` adds n = 10^8
for ``gaussian`` float64, 1.6 GB per call, for machines with many cores). Needs SciPy
(``pip install ".[bench]"``).

Three tables, saved with ``--save`` (:func:`harness.save_results`) under ``benchmarks/results/``:

- ``cpu``: times (µs) and ratios at n = 10, 10^4, 10^6, 10^7 for float32 and float64, against
  the NumPy expression of each kernel (and ``scipy.stats.norm.pdf`` for ``gaussian``).
  ``hermite_norm`` runs with 32 orders, so n counts samples and each call writes 32n values
  (up to 10^6 samples).
- ``cpu_overhead``: the public call at n = 10 against the bare Numba ufunc of the ``cpu``
  target (``gf.get(name, "cpu")``) called with the same arguments; with ``out=`` and with
  ``where=`` against the bare call with ``out=``.
- ``cpu_crossover``: ``cpu`` against ``parallel`` on a finer size grid (float64), and the
  crossover ``auto`` measured for itself on this machine (``gpufuncs.targets.cpu.auto``).

The main table also times Numba's own ``@vectorize``/``@guvectorize`` object of the kernel
(``numba``: ``gf.get(name, "cpu")`` called directly) and a host copy of the bytes the call reads
and writes (``copy``: the memory limit), and gives ``GB/s`` of ``auto``.

As in NumPy's ``bench_ufunc.py``, the tables are generated from the registry: each kernel's
arguments and NumPy/SciPy expressions come from its ``benchmark=gf.Benchmark(...)`` declaration
(:mod:`cases`), and a registered kernel without one stops the run naming it.
"""

from __future__ import annotations

import inspect
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np

import gpufuncs as gf
from gpufuncs.targets.cpu import auto

from .cases import Case
from .harness import Progress, machine_info, measure, measure_pair

TARGETS = ("cpu", "parallel", "auto")
DTYPES = (np.float32, np.float64)
SIZES = (10, 10**4, 10**6, 10**7)
QUICK_SIZES = (10, 10**4, 10**6)
LARGE = ("gaussian", np.float64, 10**8)  # --large: parallel against cpu on many cores
CROSSOVER_SIZES = (*(m * 10**e for e in range(3, 6) for m in (1, 3)), 10**6)
OVERHEAD_SIZE = 10
MAX_OUTPUTS = 10**8  # output elements per call (hermite_norm stops at 10^6 samples)
QUICK_MAX_OUTPUTS = 10**6  # --quick: hermite_norm stops at 10^4 samples

#: One step of a suite: what it measures (for the progress line), and the measurement, which
#: returns the rows it adds.
Step = tuple[str, Callable[[], list[dict[str, Any]]]]


def samples(n: int, dtype: type) -> np.ndarray:
    """``n`` samples of ``dtype``, uniform on [-4, 4] (the bulk of every kernel's domain)."""
    return np.random.default_rng(n).uniform(-4.0, 4.0, n).astype(dtype)


class Timings:
    """Seconds per call of each contender in every round (:func:`timed`).

    ``times()`` gives each contender's median in µs; :meth:`ratio` the median over rounds of a
    ratio taken within each round. The contenders of a round ran seconds apart at most, so a
    per-round ratio keeps its pairing where the machine drifts between rounds: a slow phase of a
    VM then moves both sides of one ratio rather than one median alone (on the 16-core VM,
    ``auto`` and ``cpu`` at n = 10, one call path, differed by 1.26x as medians).
    """

    def __init__(self, rounds: dict[str, list[float]]) -> None:
        self.rounds = rounds

    def times(self) -> dict[str, float]:
        return {label: 1e6 * statistics.median(times) for label, times in self.rounds.items()}

    def ratio(self, over: str, *under: str) -> float:
        """Median over rounds of ``over``'s time divided by the fastest of ``under``'s."""
        rounds = zip(self.rounds[over], *(self.rounds[u] for u in under))
        return statistics.median(mine / min(theirs) for mine, *theirs in rounds)


#: Each sample repeats a call until it lasts this long. On the 16-core VM a parallel call of
#: 25 µs now and then waits 50-100 µs for a thread; in samples of 0.2 ms (the harness default)
#: that gave ``auto`` 1.14x ``parallel`` for clamp float32 at 10^6, where both run the same
#: executor.
SAMPLE_SECONDS = 2e-3


def timed(fns: dict[str, Callable[[], Any]], n: int, quick: bool) -> Timings:
    """Each function's time per call, measured in rounds, each in its own shuffled order.

    The machines are noisy and drift over seconds; interleaving the contenders exposes them all
    to the same conditions, so their ratios are steadier than back-to-back blocks would give.
    The order changes from round to round: a call can pay for the one before it (after a
    ``parallel`` call, OpenMP's threads spin on for a while), and in a fixed order that cost
    lands on one contender alone. With ``auto`` always measured right after ``parallel``, the
    16-core VM gave ``auto`` 1.38x ``cpu`` for clamp at 10 elements, where both run one loop.
    """
    # 11 rounds: on the 16-core VM one call in several of ``parallel`` takes 3-5x its usual
    # time (a stalled thread stalls the call), and 7 samples let that reach medians; so do the
    # 2-core VM's slow phases at 10^7 (auto 1.17x parallel there, the same executor). 15 at
    # 10^8 (the --large row, without its slowest anchors): its calls vary by 10-20% from one to
    # the next on the 16-core VM, and with 7 rounds auto, the same executor as parallel, came
    # out 1.17x parallel there.
    rounds = 3 if quick else 15 if n >= 10**8 else 11
    found: dict[str, list[float]] = {label: [] for label in fns}
    order = list(fns)
    shuffle = random.Random(n).shuffle  # the same orders in every run
    for _ in range(rounds):
        for label in order:
            found[label].append(measure(fns[label], warmup=1, repeat=1 if n >= 10**6 else 3,
                                        min_time=SAMPLE_SECONDS))
        shuffle(order)
    return Timings(found)


def on_targets(kernel: gf.Kernel, args: tuple[Any, ...],
               targets: tuple[str, ...] = TARGETS) -> dict[str, Callable[[], Any]]:
    """Calls of the public ``kernel`` on each target, by target name."""
    return {t: lambda t=t: kernel(*args, target=t) for t in targets}


def copy_of(nbytes: int) -> Callable[[], Any]:
    """A host copy reading and writing ``nbytes`` in all (the memory limit of a call)."""
    half = max(nbytes // 2, 1)
    src, dst = np.ones(half, np.uint8), np.empty(half, np.uint8)
    return lambda: np.copyto(dst, src)


@numba.njit(parallel=True, nogil=True)
def _copy_on_threads(out: np.ndarray, x: np.ndarray) -> None:
    for i in numba.prange(x.size):
        out[i] = x[i]


def parallel_copy_of(x: np.ndarray) -> Callable[[], Any]:
    """A copy of ``x`` into new memory on Numba's threads: the bytes a ``parallel`` call of an
    elementwise kernel of one array reads and writes, its output's allocation and first-touch
    page faults included, with no arithmetic (the floor of any such call at that size)."""
    def run() -> np.ndarray:
        out = np.empty_like(x)  # NumPy's allocation (huge pages where it asks), as a call's output
        _copy_on_threads(out.reshape(out.size), x.reshape(x.size))
        return out
    return run


def main_row(case: Case, dtype: type, n: int, quick: bool, large: bool = False) -> dict[str, Any]:
    """One row of the main table: the kernel on every target, its expressions, Numba's bare
    ufunc and a copy of the same bytes, with ratios.

    ``large``: the ``--large`` row, which adds the same copy on Numba's threads into new memory
    (``parallel copy``, see :func:`parallel_copy_of`) and leaves out Numba's bare ufunc and
    the expressions but the anchor (SciPy): at 10^8 they take 2-3 s a call on 16 cores, and
    no target reads them there.
    """
    x = samples(n, dtype)
    args, compiled = case.args(x), gf.get(case.name, "cpu")
    expressions = {label: lambda f=f: f(*args) for label, f in case.expressions().items()
                   if label == case.anchor or not large}
    anchors = {"copy": copy_of(case.nbytes(n, dtype))}
    if large:
        anchors["parallel copy"] = parallel_copy_of(x)
    else:
        anchors["numba"] = lambda: case.bare(compiled, args)
    with np.errstate(all="ignore"):
        timings = timed({**on_targets(case.kernel, args), **expressions, **anchors}, n, quick)
    row: dict[str, Any] = {"kernel": case.name, "dtype": np.dtype(dtype).name, "n": n, **timings.times()}
    for t in TARGETS:
        row[f"{t}/np"] = timings.ratio(t, case.anchor)
    row["auto/best"] = timings.ratio("auto", "cpu", "parallel")
    row["cpu/parallel"] = timings.ratio("cpu", "parallel")
    if "scipy" in row:
        row["cpu/scipy"] = timings.ratio("cpu", "scipy")
    if "numba" in row:
        row["auto/numba"] = timings.ratio("auto", "numba")
    row["auto/copy"] = timings.ratio("auto", "copy")
    if large:
        row["parallel/parallel copy"] = timings.ratio("parallel", "parallel copy")
        row["cpu/parallel copy"] = timings.ratio("cpu", "parallel copy")
    row["GB/s"] = case.nbytes(n, dtype) / row["auto"] / 1e3  # bytes per µs / 1e3 = GB/s
    return row


#: The overhead table's ratios: column -> (the public call, the bare call it is measured against).
OVERHEAD_PAIRS = {"public/bare": ("public", "bare"), "cpu/bare": ("public cpu", "bare"),
                  "out/bare out": ("public out=", "bare out="),
                  "where/bare out": ("public where=", "bare out=")}


def overhead_row(case: Case, dtype: type, quick: bool = False) -> dict[str, Any]:
    """Public call vs the bare Numba ``cpu`` ufunc and the NumPy expression at
    ``OVERHEAD_SIZE`` elements: plain, and with ``out=`` and ``where=`` against the bare call
    with ``out=``.

    The times come from rounds of every contender (:func:`timed`); each ratio of
    :data:`OVERHEAD_PAIRS` from its two calls alone, their repetitions of 0.2 ms interleaved
    (:func:`harness.measure_pair`). On the 16-core VM the rounds' per-round ratio of these
    1 µs calls, samples 6 ms apart, once gave exp's ``cpu/bare`` 1.52 where the medians of the
    same run gave 1.35.
    """
    kernel = case.kernel
    args, compiled = case.args(samples(OVERHEAD_SIZE, dtype)), gf.get(case.name, "cpu")
    out = np.empty_like(kernel(*args))
    where = np.ones(out.shape[: out.ndim - (1 if kernel.signature else 0)], bool)
    anchor = case.expressions()[case.anchor]
    calls = {"public": lambda: kernel(*args), "public cpu": lambda: kernel(*args, target="cpu"),
             "public out=": lambda: kernel(*args, out=out),
             "public where=": lambda: kernel(*args, out=out, where=where),
             "bare": lambda: case.bare(compiled, args),
             "bare out=": lambda: case.bare_out(compiled, out, args),
             "numpy": lambda: anchor(*args)}
    with np.errstate(all="ignore"):
        timings = timed(calls, OVERHEAD_SIZE, quick)
        pairs = {column: measure_pair(calls[mine], calls[bare], inner=None, repeat=21 if quick else 201)
                 for column, (mine, bare) in OVERHEAD_PAIRS.items()}
    row: dict[str, Any] = {"kernel": case.name, "dtype": np.dtype(dtype).name, **timings.times()}
    row.update({column: mine / bare for column, (mine, bare) in pairs.items()})
    row["public/np"] = timings.ratio("public", "numpy")
    return row


def crossover_rows(case: Case) -> list[dict[str, Any]]:
    """cpu vs parallel (float64) over :data:`CROSSOVER_SIZES`, sizes in output elements."""
    rows = []
    for n in CROSSOVER_SIZES:
        args = case.args(samples(n, np.float64))
        timings = timed(on_targets(case.kernel, args, ("cpu", "parallel")), n, False)
        rows.append({"kernel": case.name, "outputs": n * case.outputs_per_sample, **timings.times(),
                     "parallel/cpu": timings.ratio("parallel", "cpu")})
    return rows


def main_steps(selected: list[Case], sizes: tuple[int, ...] = SIZES,
               dtypes: tuple[type, ...] = DTYPES, quick: bool = False,
               limit: float | None = None) -> list[Step]:
    """The main table's rows as steps; sizes past the output ``limit`` are left out (default:
    the suite's own, smaller with ``quick``; sizes a user names get no limit)."""
    if limit is None:
        limit = QUICK_MAX_OUTPUTS if quick else MAX_OUTPUTS
    return [(f"cpu {case.name} {np.dtype(dtype).name} n={n:.0e}",
             lambda case=case, dtype=dtype, n=n: [main_row(case, dtype, n, quick)])
            for case in selected for dtype in dtypes for n in sizes
            if n * case.outputs_per_sample <= limit]


def large_steps(selected: list[Case]) -> list[Step]:
    """The :data:`LARGE` row (``parallel`` against ``cpu`` on many cores, and the floor that a
    copy on the same threads sets), if its kernel is selected: 15 rounds, about 45 s on 16
    cores (see :func:`timed` and :func:`main_row`)."""
    name, dtype, n = LARGE
    return [(f"cpu {case.name} {np.dtype(dtype).name} n={n:.0e}",
             lambda case=case: [main_row(case, dtype, n, quick=False, large=True)])
            for case in selected if case.name == name]


def overhead_steps(selected: list[Case], dtypes: tuple[type, ...] = DTYPES,
                   quick: bool = False) -> list[Step]:
    """The call-overhead table's rows as steps."""
    return [(f"overhead {case.name} {np.dtype(dtype).name}",
             lambda case=case, dtype=dtype: [overhead_row(case, dtype, quick)])
            for case in selected for dtype in dtypes]


def crossover_steps(selected: list[Case]) -> list[Step]:
    """The cpu/parallel crossover sweep as steps, one per kernel."""
    return [(f"crossover {case.name}", lambda case=case: crossover_rows(case)) for case in selected]


def run(steps: list[Step], progress: Progress | None = None) -> list[dict[str, Any]]:
    """Every step's rows, in order, reporting each step to ``progress``."""
    rows: list[dict[str, Any]] = []
    for what, step in steps:
        rows += step()
        if progress:
            progress.step(what)
    return rows


def crossover(rows: list[dict[str, Any]]) -> int | None:
    """Smallest output size from which ``parallel`` beats ``cpu`` at (nearly) every larger size.

    One noisy point in four above the crossover is tolerated; ``None`` if ``parallel`` never wins.
    """
    ratios = [r["parallel/cpu"] for r in rows]
    for i, row in enumerate(rows):
        above = ratios[i:]
        if ratios[i] < 1.0 and sum(r >= 1.0 for r in above) <= len(above) // 4:
            return row["outputs"]
    return None


def import_seconds(repeat: int = 7) -> float:
    """Median extra seconds of ``import gpufuncs`` over ``import numba`` in fresh processes
    (interleaved, so both see the same machine state)."""
    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - start

    numba_only, both = [], []
    for _ in range(repeat):
        numba_only.append(run("import numba"))
        both.append(run("import numba, gpufuncs"))
    return statistics.median(both) - statistics.median(numba_only)


#: A fresh process with an empty Numba disk cache: the first call of ``gaussian`` on ``cpu``
#: (its scalar function and loop compiled), then a call of another signature (a 2-D array and
#: NumPy float32 scalars: a second loop), as a user's first calls of a kernel pay them.
_COLD_CALLS = """
import time, numpy as np, gpufuncs as gf
x = np.linspace(-3, 3, 1000)
y, zero, one = x.astype(np.float32).reshape(10, 100), np.float32(0), np.float32(1)
t0 = time.perf_counter(); gf.gaussian(x, 0.0, 1.0, target="cpu")
t1 = time.perf_counter(); gf.gaussian(y, zero, one, target="cpu")
t2 = time.perf_counter(); print(t1 - t0, t2 - t1)
"""


def cold_compile_seconds() -> dict[str, float]:
    """Seconds of a kernel's first call and of its first call with another signature, each
    compiling from nothing (see :data:`_COLD_CALLS`)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        done = subprocess.run([sys.executable, "-c", _COLD_CALLS], env=env, check=True,
                              capture_output=True, text=True)
    first, other = (float(v) for v in done.stdout.split())
    return {"first call, cold cache (s)": round(first, 2),
            "first call of another signature, cold cache (s)": round(other, 2)}


# -- fresh processes: a user's first call, and what one kernel keeps resident (issue 32) ----------
#: The first-call row: ``gaussian(x, 0.0, 1.0)``, x of 10^6 float64, on these targets.
FRESH_KERNEL, FRESH_N, FRESH_TARGETS = "gaussian", 10**6, ("cpu", "auto")
#: The memory rows: a user kernel's first call on 10^3 float64 (its output is 8 KB of the figure).
MEMORY_N = 1000
#: Fresh processes per figure (the median); fewer with ``--quick``.
FRESH_REPEAT, QUICK_FRESH_REPEAT = 7, 3
#: The issue's goals: gpufuncs' figure over Numba's.
FRESH_LIMIT, MEMORY_LIMIT = 1.05, 1.2


def numba_source(name: str, numba_name: str, decorator: str) -> str:
    """The built-in kernel ``name``'s scalar function as a module of its own: renamed
    ``numba_name``, under ``decorator``, with the module constants it reads written by value
    and, where ``decorator`` is Numba's, each ``as_type(v, x)`` as ``float(v)``: the body a
    Numba user writes for float64 (as this file's rows run it)."""
    spec = gf.registry[name].spec
    lines = inspect.getsource(spec.pyfunc).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def "))
    body = "\n".join(lines[start:]).replace(f"def {spec.pyfunc.__name__}(", f"def {numba_name}(", 1)
    gpufuncs = decorator.startswith("@gf.")
    if not gpufuncs:
        body = re.sub(r"as_type\(([^,()]+), \w+\)", r"float(\1)", body)
    constants = [f"{n} = {v!r}" for n, v in spec.pyfunc.__globals__.items()
                 if n in spec.pyfunc.__code__.co_names and isinstance(v, (int, float))]
    head = ["import math", "import numba", "import gpufuncs as gf", "from gpufuncs import as_type"
            ] if gpufuncs else ["import math", "import numba"]
    return "\n".join([*head, *constants, f"SIGNATURES = {[loop.signature for loop in spec.loops]!r}", "",
                      decorator, body, ""])


#: A fresh process: ``import`` and the first call of the kernel, each timed (the array's making
#: is not); argv: the target, or ``numba`` for the anchor module ``fresh_anchor``, which imports
#: Numba and loads its ``@vectorize(cache=True)`` object (both signatures) from the disk cache.
_FRESH_CALL = """
import time
start = time.perf_counter()
import sys
import numpy as np
if sys.argv[1] == "numba":
    import fresh_anchor
    kernel, options = fresh_anchor.kernel, {{}}
else:
    import gpufuncs as gf
    kernel, options = gf.{name}, {{"target": sys.argv[1]}}
imported = time.perf_counter()
x = np.linspace(-3, 3, {n})
made = time.perf_counter()
kernel(x, 0.0, 1.0, **options)
done = time.perf_counter()
print(imported - start, done - made)
"""


def _run_fresh(code: str, env: dict[str, str], *argv: str) -> list[float]:
    done = subprocess.run([sys.executable, "-c", code, *argv], env=env, check=True, capture_output=True,
                          text=True)
    return [float(v) for v in done.stdout.split()[-2:]]


def _fresh_env(folder: str) -> dict[str, str]:
    """A cache folder of the run's own (warmed by the run, so the figures never depend on what
    an earlier process left) and the modules written into ``folder`` on the path."""
    root = str(Path(gf.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (folder, root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "NUMBA_CACHE_DIR": os.path.join(folder, "cache"), "PYTHONPATH": path}


def fresh_rows(quick: bool = False) -> list[dict[str, Any]]:
    """Issue 32's two fresh-process rows, each beside its Numba anchor in the same run.

    ``import + first call, warm cache``: seconds from a process's first line to the end of its
    first ``gaussian(x, 0.0, 1.0)`` at 10^6 float64 (``import numpy`` included on both sides,
    making ``x`` not), with the disk cache filled by an earlier process; the anchor is Numba's
    ``@vectorize(cache=True)`` of the same body with the same two signatures (:func:`numba_source`):
    import, load from the cache, first call. The contenders' processes alternate, median of
    :data:`FRESH_REPEAT` each.

    ``memory of one user kernel``: see :func:`memory_rows`.
    """
    repeat = QUICK_FRESH_REPEAT if quick else FRESH_REPEAT
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "fresh_anchor.py").write_text(numba_source(
            FRESH_KERNEL, "kernel", "@numba.vectorize(SIGNATURES, cache=True)"))
        env, code = _fresh_env(folder), _FRESH_CALL.format(name=FRESH_KERNEL, n=FRESH_N)
        contenders = ("numba", *FRESH_TARGETS)
        for who in contenders:  # fills the cache
            _run_fresh(code, env, who)
        runs: dict[str, list[list[float]]] = {who: [] for who in contenders}
        for _ in range(repeat):
            for who in contenders:
                runs[who].append(_run_fresh(code, env, who))
        rows = []
        anchor = statistics.median(sum(r) for r in runs["numba"])
        for target in FRESH_TARGETS:
            total = statistics.median(sum(r) for r in runs[target])
            rows.append({
                "measure": "import + first call, warm cache", "kernel": FRESH_KERNEL, "dtype": "float64",
                "n": FRESH_N, "target": target, "unit": "s", "gpufuncs": total, "numba": anchor,
                "gpufuncs/numba": total / anchor,
                "gpufuncs import": statistics.median(r[0] for r in runs[target]),
                "gpufuncs first call": statistics.median(r[1] for r in runs[target]),
                "numba import": statistics.median(r[0] for r in runs["numba"]),
                "numba first call": statistics.median(r[1] for r in runs["numba"]),
                "processes": repeat})
    return rows + memory_rows(repeat)


#: A fresh process: the resident memory (``/proc/self/statm``) that defining one user kernel
#: and its first call add, after ``import`` and after a first call of another kernel (so that
#: what every process pays once, Numba's compiler set up and the library's first call, is not
#: the kernel's). argv: ``gpufuncs`` or ``numba``, and the kernel's module.
_MEMORY = """
import gc, importlib, os, sys
import numpy as np
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
x = np.linspace(-3, 3, {n})
options = {{"target": "cpu"}} if sys.argv[1] == "gpufuncs" else {{}}
importlib.import_module(f"fresh_first_{{sys.argv[1]}}").first(x, x, **options)
gc.collect()
before = resident()
kernel = importlib.import_module(sys.argv[2]).kernel
kernel(x, 0.0, 1.0, **options)
gc.collect()
print((resident() - before) / 2**20)
"""

_FIRST = {"gpufuncs": "import gpufuncs as gf\n\n\n@gf.ufunc(gf.float_signatures(2))\n"
                      "def first(x, y):\n    return x * y + gf.as_type(1, x)\n",
          "numba": "import numba\n\n\n@numba.vectorize(['float32(float32, float32)', "
                   "'float64(float64, float64)'], cache=True)\ndef first(x, y):\n    return x * y + 1\n"}


def memory_rows(repeat: int) -> list[dict[str, Any]]:
    """MB resident that one user kernel adds with its definition and first call (on 10^3
    float64, ``cpu``), in a fresh process (see :data:`_MEMORY`): the built-in ``gaussian``'s
    body as a user's module, under ``@gf.ufunc`` and under Numba's ``@vectorize(cache=True)``
    with the same signatures (Numba compiles both when the module is imported; gpufuncs the
    float64 loop at the call). ``warm cache``: loaded from the disk cache an earlier process
    filled; ``cold cache``: compiled in the process (an empty cache folder each time; the first
    kernel is compiled too, before the figure starts). Median of ``repeat`` processes each,
    alternating."""
    if not Path("/proc/self/statm").exists():
        return []
    decorators = {"gpufuncs": "@gf.ufunc(SIGNATURES)", "numba": "@numba.vectorize(SIGNATURES, cache=True)"}
    found: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        env, code = _fresh_env(folder), _MEMORY.format(n=MEMORY_N)

        def module(who: str, name: str) -> str:
            Path(folder, f"{name}.py").write_text(numba_source(FRESH_KERNEL, "kernel", decorators[who]))
            return name

        for who, text in _FIRST.items():
            Path(folder, f"fresh_first_{who}.py").write_text(text)
            _run_fresh(code, env, who, module(who, f"fresh_warm_{who}"))  # fills the cache
        for i in range(repeat):
            for who in decorators:
                # cold: an empty cache (gpufuncs finds a kernel's loops by what they compile
                # from, wherever its module lives; Numba by the module's path)
                cold = {**env, "NUMBA_CACHE_DIR": os.path.join(folder, f"cold-{who}-{i}")}
                for cache, where in (("warm", env), ("cold", cold)):
                    found.setdefault((who, cache), []).append(
                        _run_fresh(code, where, who, f"fresh_warm_{who}")[-1])
    rows = []
    for cache in ("warm", "cold"):
        mine, anchor = (statistics.median(found[who, cache]) for who in decorators)
        rows.append({"measure": f"memory of one user kernel, {cache} cache", "kernel": f"user {FRESH_KERNEL}",
                     "dtype": "float64", "n": MEMORY_N, "target": "cpu", "unit": "MB", "gpufuncs": mine,
                     "numba": anchor, "gpufuncs/numba": mine / anchor, "processes": repeat})
    return rows


def fresh_steps(quick: bool = False) -> list[Step]:
    """The fresh-process rows (:func:`fresh_rows`) as one step: about a minute on 2 cores."""
    return [("fresh processes: first call and one kernel's memory", lambda: fresh_rows(quick))]


def fresh_verdicts(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The issue's goals for the fresh-process rows, each with its figures."""
    found = {}
    for r in rows:
        limit = FRESH_LIMIT if r["unit"] == "s" else MEMORY_LIMIT
        met = r["gpufuncs/numba"] <= limit
        what = (f"{r['measure']} {r['kernel']} n={r['n']:.0e} {r['target']}"
                if r["unit"] == "s" else f"{r['measure']} n={r['n']:.0e}")
        found[f"fresh: {what}, gpufuncs/numba"] = (
            f"{r['gpufuncs/numba']:.2f} (<= {limit}) {'met' if met else 'NOT MET'} "
            f"[{r['gpufuncs']:.3g} {r['unit']} against {r['numba']:.3g} {r['unit']}]")
    return found


def fresh_meta(rows: list[dict[str, Any]], load_before: float) -> dict[str, Any]:
    """Machine, load and the verdicts of the fresh-process table."""
    meta = machine_info({"load average (1 min) before": load_before,
                         "unit": "seconds (s) or MB resident, per row"})
    meta.update(fresh_verdicts(rows))
    meta["load average (1 min) after"] = os.getloadavg()[0]
    return meta


def verdicts(main: list[dict[str, Any]], overhead: list[dict[str, Any]],
             imported: float) -> dict[str, str]:
    """The issues' targets for this machine, each with its measured figure."""
    def find(name: str, dtype: str, n: int) -> dict[str, Any] | None:
        return next((r for r in main if (r["kernel"], r["dtype"], r["n"]) == (name, dtype, n)), None)

    def verdict(value: float, limit: float, where: str = "", at_least: bool = False) -> str:
        met = value >= limit if at_least else value <= limit
        sign = ">=" if at_least else "<="
        return f"{value:.2f} ({sign} {limit}) {'met' if met else 'NOT MET'} {where}".strip()

    found = {"import gpufuncs beyond numba (s)": verdict(imported, 0.5)}
    limits = {"clamp": 1.0, "exp": 1.25, "gaussian": 0.5, "hermite_norm": 0.5}
    for name, limit in limits.items():
        for dtype in ("float32", "float64"):
            row = find(name, dtype, 10**6)
            if row:
                found[f"{name} {dtype} n=1e6 auto/numpy"] = verdict(row["auto/np"], limit)
    if (os.cpu_count() or 1) >= 8:
        for name in ("gaussian", "exp"):
            for dtype in ("float32", "float64"):
                row = find(name, dtype, 10**7)
                if row:
                    label = f"{name} {dtype} n=1e7 auto/numpy ({os.cpu_count()} cores)"
                    found[label] = verdict(row["auto/np"], 0.3)
        row = find("gaussian", "float64", 10**8)
        if row:
            floor = row.get("cpu/parallel copy")
            bound = f"[cpu/parallel copy: {floor:.2f}]" if floor else ""
            found["gaussian float64 n=1e8 cpu/parallel"] = verdict(row["cpu/parallel"], 10, bound, True)
    auto = max(main, key=lambda r: r["auto/best"])
    found["auto/best(cpu, parallel) (worst)"] = verdict(
        auto["auto/best"], 1.1, f"[{auto['kernel']} {auto['dtype']} n={auto['n']}]")
    f64 = [r for r in overhead if r["dtype"] == "float64"]
    for column, limit in (("public/bare", 1.5), ("cpu/bare", 1.5), ("out/bare out", 2.0),
                          ("where/bare out", 2.0)) if f64 else ():
        worst = max(f64, key=lambda r: r[column])
        found[f"overhead n=10 float64 {column} (worst)"] = verdict(worst[column], limit,
                                                                  f"[{worst['kernel']}]")
    return found


def cpu_meta(main_rows: list[dict[str, Any]], overhead: list[dict[str, Any]],
             cross: list[dict[str, Any]], load_before: float, quick: bool) -> dict[str, Any]:
    """The result files' meta: machine, versions, load, the targets' verdicts, crossovers."""
    meta = machine_info({"load average (1 min) before": load_before, "unit": "µs per call",
                         "numba threads": numba.get_num_threads()})
    if main_rows and overhead:
        meta.update(verdicts(main_rows, overhead, import_seconds(2 if quick else 7)))
        if not quick:
            meta.update(cold_compile_seconds())
    meta["load average (1 min) after"] = os.getloadavg()[0]  # near 1 on 2 cores: undisturbed
    if cross:
        names = list(dict.fromkeys(r["kernel"] for r in cross))
        meta["crossover (output elements)"] = {
            name: crossover([r for r in cross if r["kernel"] == name]) for name in names}
        meta["auto's measured crossovers (loop elements)"] = auto.measured_crossovers()
    return meta

