"""CPU benchmark: every registered kernel on ``cpu``, ``parallel`` and ``auto`` against NumPy/SciPy.

Run ``python benchmarks/bench_cpu.py`` (several minutes on 2 cores), ``--quick`` (n up to 10^6,
fewer repetitions, no crossover sweep, nothing saved) or ``--large`` (adds n = 10^8 for
``gaussian`` float64: 1.6 GB per call, for machines with many cores). Needs SciPy
(``pip install ".[bench]"``).

Three tables, saved with :func:`harness.save_results` under ``benchmarks/results/``:

- ``cpu``: times (µs) and ratios at n = 10, 10^4, 10^6, 10^7 for float32 and float64, against
  the NumPy expression of each kernel (and ``scipy.stats.norm.pdf`` for ``gaussian``).
  ``hermite_norm`` runs with 32 orders, so n counts samples and each call writes 32n values
  (up to 10^6 samples).
- ``cpu_overhead``: the public call at n = 10 against the bare Numba ufunc of the ``cpu``
  target (``gf.get(name, "cpu")``) called with the same arguments; with ``out=`` and with
  ``where=`` against the bare call with ``out=``.
- ``cpu_crossover``: ``cpu`` against ``parallel`` on a finer size grid (float64), and the
  crossover ``auto`` measured for itself on this machine (``gpufuncs.targets.cpu.auto``).

As in NumPy's ``bench_ufunc.py``, the tables are generated from the registry and the script
refuses to run when a registered kernel has no entry in :data:`CASES`.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numpy.polynomial.hermite_e import hermevander

import gpufuncs as gf
from gpufuncs.targets.cpu import auto

try:  # run as a script (python benchmarks/bench_cpu.py) or as a module (-m benchmarks.bench_cpu)
    from harness import format_table, machine_info, measure, save_results
except ImportError:
    from .harness import format_table, machine_info, measure, save_results

TARGETS = ("cpu", "parallel", "auto")
DTYPES = (np.float32, np.float64)
SIZES = (10, 10**4, 10**6, 10**7)
QUICK_SIZES = (10, 10**4, 10**6)
LARGE = ("gaussian", np.float64, 10**8)  # --large: parallel against cpu on many cores
CROSSOVER_SIZES = (*(m * 10**e for e in range(3, 6) for m in (1, 3)), 10**6)
OVERHEAD_SIZE = 10
ORDERS = 32  # hermite_norm's n in every table
MAX_OUTPUTS = 10**8  # output elements per call (hermite_norm stops at 10^6 samples)
X0, SIGMA = 0.5, 1.5
SQRT_2PI = math.sqrt(2 * math.pi)


def _gaussian_numpy(x, x0, s):
    return np.exp(-0.5 * ((x - x0) / s) ** 2) / (s * SQRT_2PI)


def _gaussian_scipy(x, x0, s):
    from scipy.stats import norm

    return norm.pdf(x, loc=x0, scale=s)


def _hermite_numpy(x, n):
    inv_sqrt_factorial = np.array([1 / math.sqrt(math.factorial(k)) for k in range(n)], x.dtype)
    return hermevander(x, n - 1) * inv_sqrt_factorial


def _bare_call(compiled, *args):
    return compiled(*args)


def _bare_out(compiled, out, *args):
    return compiled(*args, out=out)


def _hermite_bare(compiled, x, n):
    # Numba gufuncs cannot allocate output-only core dimensions: the bare call gets a new ``out``.
    return compiled(x, np.empty((*x.shape, n), x.dtype))


def _hermite_bare_out(compiled, out, x, n):
    return compiled(x, out)


@dataclass(frozen=True)
class Case:
    """How to benchmark one kernel: its arguments from the sample array, and what it competes with.

    Attributes
    ----------
    args : callable
        ``args(x)``: the kernel's arguments (and the expressions') for samples ``x``.
    expressions : dict
        Label -> NumPy/SciPy function of the same arguments; the first is the baseline.
    outputs_per_sample : int
        Output elements per sample (the ``auto`` threshold counts output elements).
    bare : callable
        ``bare(compiled, *args)`` calls the compiled Numba object as its user would.
    """

    args: Callable[[np.ndarray], tuple[Any, ...]]
    expressions: dict[str, Callable[..., Any]]
    outputs_per_sample: int = 1
    bare: Callable[..., Any] = _bare_call
    bare_out: Callable[..., Any] = _bare_out


CASES: dict[str, Case] = {
    "gaussian": Case(lambda x: (x, X0, SIGMA), {"numpy": _gaussian_numpy, "scipy": _gaussian_scipy}),
    "exp": Case(lambda x: (x,), {"numpy": np.exp}),
    "clamp": Case(lambda x: (x, -1.0, 1.0), {"numpy": np.clip}),
    "hermite_norm": Case(lambda x: (x, ORDERS), {"numpy": _hermite_numpy}, ORDERS, _hermite_bare,
                         _hermite_bare_out),
}


def check_cases() -> None:
    """Raise if a registered kernel has no benchmark case (NumPy's bench_ufunc check)."""
    missing = sorted(set(gf.names()) - set(CASES))
    if missing:
        raise LookupError(f"registered kernels without a benchmark case in bench_cpu.CASES: {missing}")


def samples(n: int, dtype: type) -> np.ndarray:
    """``n`` samples of ``dtype``, uniform on [-4, 4] (the bulk of every kernel's domain)."""
    return np.random.default_rng(n).uniform(-4.0, 4.0, n).astype(dtype)


def timed(fns: dict[str, Callable[[], Any]], n: int, quick: bool) -> dict[str, float]:
    """Median µs per call of each function, measured in alternating rounds.

    The machines are noisy and drift over seconds; interleaving the contenders exposes them all
    to the same conditions, so their ratios are steadier than back-to-back blocks would give.
    """
    rounds = 3 if quick else 7 if n >= 10**6 else 11
    found: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            found[label].append(measure(fn, warmup=1, repeat=1 if n >= 10**6 else 3))
    return {label: 1e6 * statistics.median(times) for label, times in found.items()}


def on_targets(kernel: gf.Kernel, args: tuple[Any, ...],
               targets: tuple[str, ...] = TARGETS) -> dict[str, Callable[[], Any]]:
    """Calls of the public ``kernel`` on each target, by target name."""
    return {t: lambda t=t: kernel(*args, target=t) for t in targets}


def main_row(name: str, dtype: type, n: int, quick: bool) -> dict[str, Any]:
    """One row of the main table: kernel on every target and the expressions, with ratios."""
    case, kernel = CASES[name], gf.registry[name]
    args = case.args(samples(n, dtype))
    expressions = {label: lambda f=f: f(*args) for label, f in case.expressions.items()}
    with np.errstate(all="ignore"):
        times = timed({**on_targets(kernel, args), **expressions}, n, quick)
    row: dict[str, Any] = {"kernel": name, "dtype": np.dtype(dtype).name, "n": n, **times}
    baseline = row[next(iter(case.expressions))]
    for t in TARGETS:
        row[f"{t}/np"] = row[t] / baseline
    row["auto/best"] = row["auto"] / min(row["cpu"], row["parallel"])
    if "scipy" in row:
        row["cpu/scipy"] = row["cpu"] / row["scipy"]
    return row


def overhead_row(name: str, dtype: type) -> dict[str, Any]:
    """Public call vs the bare Numba ``cpu`` ufunc at ``OVERHEAD_SIZE`` elements: plain, and
    with ``out=`` and ``where=`` against the bare call with ``out=``."""
    case, kernel = CASES[name], gf.registry[name]
    args, compiled = case.args(samples(OVERHEAD_SIZE, dtype)), gf.get(name, "cpu")
    out = np.empty_like(kernel(*args))
    where = np.ones(out.shape[: out.ndim - (1 if kernel.signature else 0)], bool)
    times = timed({"public": lambda: kernel(*args), "public cpu": lambda: kernel(*args, target="cpu"),
                   "public out=": lambda: kernel(*args, out=out),
                   "public where=": lambda: kernel(*args, out=out, where=where),
                   "bare": lambda: case.bare(compiled, *args),
                   "bare out=": lambda: case.bare_out(compiled, out, *args)}, OVERHEAD_SIZE, False)
    row: dict[str, Any] = {"kernel": name, "dtype": np.dtype(dtype).name, **times}
    row["public/bare"] = row["public"] / row["bare"]
    row["cpu/bare"] = row["public cpu"] / row["bare"]
    row["out/bare out"] = row["public out="] / row["bare out="]
    row["where/bare out"] = row["public where="] / row["bare out="]
    return row


def crossover_rows(name: str) -> list[dict[str, Any]]:
    """cpu vs parallel (float64) over :data:`CROSSOVER_SIZES`, sizes in output elements."""
    case, kernel = CASES[name], gf.registry[name]
    rows = []
    for n in CROSSOVER_SIZES:
        times = timed(on_targets(kernel, case.args(samples(n, np.float64)), ("cpu", "parallel")), n, False)
        rows.append({"kernel": name, "outputs": n * case.outputs_per_sample, **times,
                     "parallel/cpu": times["parallel"] / times["cpu"]})
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
            found["gaussian float64 n=1e8 cpu/parallel"] = verdict(row["cpu"] / row["parallel"], 10, "", True)
    auto = max(main, key=lambda r: r["auto/best"])
    found["auto/best(cpu, parallel) (worst)"] = verdict(
        auto["auto/best"], 1.1, f"[{auto['kernel']} {auto['dtype']} n={auto['n']}]")
    f64 = [r for r in overhead if r["dtype"] == "float64"]
    for column, limit in (("public/bare", 1.5), ("cpu/bare", 1.5), ("out/bare out", 2.0),
                          ("where/bare out", 2.0)):
        worst = max(f64, key=lambda r: r[column])
        found[f"overhead n=10 float64 {column} (worst)"] = verdict(worst[column], limit,
                                                                  f"[{worst['kernel']}]")
    return found


def report(title: str, name: str, rows: list[dict[str, Any]], meta: dict[str, Any], save: bool) -> None:
    """Print one table and, unless ``save`` is false, store it as ``results/<name>.{txt,json}``."""
    columns = list(dict.fromkeys(c for r in rows for c in r))
    print(f"\n{title}\n{format_table(rows, columns)}")
    if save:
        save_results(name, rows, columns, meta)


def main(argv: list[str] | None = None) -> None:
    """Run the three tables and the import time, print them and the targets' verdicts, save
    the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n <= 10^6, fewer repeats, no crossover; "
                        "results are printed, not saved")
    parser.add_argument("--large", action="store_true", help="add gaussian float64 at n=10^8")
    parser.add_argument("--name", default="cpu", help="results file name (default: cpu), e.g. to keep "
                        "a run with another NUMBA_THREADING_LAYER apart")
    opts = parser.parse_args(argv)
    check_cases()
    load_before = os.getloadavg()[0]  # other work on the machine skews every figure
    sizes = QUICK_SIZES if opts.quick else SIZES
    main_rows = [main_row(name, dtype, n, opts.quick) for name in gf.names() for dtype in DTYPES
                 for n in sizes if n * CASES[name].outputs_per_sample <= MAX_OUTPUTS]
    if opts.large:
        main_rows.append(main_row(LARGE[0], LARGE[1], LARGE[2], quick=True))
    overhead = [overhead_row(name, dtype) for name in gf.names() for dtype in DTYPES]
    cross = [] if opts.quick else [row for name in gf.names() for row in crossover_rows(name)]
    meta = machine_info({"load average (1 min) before": load_before, "unit": "µs per call",
                         "numba threads": numba.get_num_threads(),
                         **verdicts(main_rows, overhead, import_seconds())})
    meta["load average (1 min) after"] = os.getloadavg()[0]  # near 1 on 2 cores: undisturbed
    if cross:
        meta["crossover (output elements)"] = {
            name: crossover([r for r in cross if r["kernel"] == name]) for name in gf.names()}
        meta["auto's measured crossovers (loop elements)"] = {
            f"{key[0]} {key[2]}": value for key, value in auto._crossovers.items()}
    save = not opts.quick
    report("times (µs) and ratios; np = the NumPy expression", opts.name, main_rows, meta, save)
    report(f"call overhead at n={OVERHEAD_SIZE} (µs)", f"{opts.name}_overhead", overhead, meta, save)
    if cross:
        report("cpu vs parallel, float64, by output elements", f"{opts.name}_crossover", cross, meta, save)
    print("\n" + "\n".join(f"{k}: {v}" for k, v in meta.items()))


if __name__ == "__main__":
    main()
