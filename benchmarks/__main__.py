"""``python -m benchmarks``: every benchmark suite of gpufuncs in one command.

Suites (``--suite``, default ``all``):

- ``cpu``: every kernel on ``cpu``, ``parallel`` and ``auto`` against its NumPy/SciPy
  expression, Numba's bare ufunc and a copy of the same bytes (:mod:`bench_cpu`), and the
  cpu/parallel crossover sweep (not with ``--quick``); ``--large`` adds gaussian float64 at
  n = 10^8 (for machines with many cores);
- ``overhead``: the call at n = 10 against the bare Numba ufunc and the NumPy expression;
- ``gpu``: the cuda target against a device copy, CuPy's ``ElementwiseKernel`` and Numba's CUDA
  ufuncs (:mod:`bench_gpu`); skipped, saying why, without CuPy or a GPU. ``--targets-only``
  runs just the rows the issues' targets name;
- ``compose`` and ``compose_gpu`` (only when named, not in ``all``): a kernel calling kernels,
  ``clamp(gaussian(x, 0, 1) * w, 0, 1)``, against the same body written out by hand, on
  ``cpu``/``parallel`` and on ``cuda`` (:mod:`bench_compose`; saved as
  ``<name>_compose.*`` and ``gpu-<gpu>_compose.*``);
- ``fresh`` (only when named): fresh processes, each beside Numba's ``@vectorize`` in the same
  run: ``import`` + the first ``gaussian`` call at 10^6 float64 with a warm disk cache (``cpu``,
  ``auto``), and the resident memory one user kernel adds with its first call
  (:func:`bench_cpu.fresh_rows`; saved as ``<name>_fresh.*``).

Kernels come from the registry, each with its ``benchmark=gf.Benchmark(...)`` declaration
(``--kernels`` picks some; a kernel without a declaration stops the run, naming it).

What it prints (stdout; the progress line goes to stderr): a table per suite with one line per
measurement, gpufuncs' time per call, each anchor's time measured in the same run and the ratio
of the two (:mod:`report`); then the targets, each a goal one figure is held to, MET or NOT MET.
Optional packages a suite or option needs are named at the start, with the command that
installs them (``--plot`` without matplotlib stops there).

What it writes: nothing, unless asked. ``--save`` writes the result files into
``benchmarks/results/``, the committed results the performance page is generated from
(``benchmarks/figures.py``; ``--name`` names the CPU files: ``cpu``, ``cpu-16core``; the GPU files
are named after the GPU); ``--save DIR`` writes them into ``DIR`` instead. ``--quick`` (n up to
10^6, fewer repetitions, about a minute on 2 cores) and ``--targets-only`` runs are saved only
into a ``DIR``. ``--json PATH`` writes the run's meta (machine, GPU, versions, date, git commit),
its tables and one row per measurement (:mod:`rows`); ``--plot DIR`` draws its PNGs
(:mod:`plots`; needs the ``plot`` extra).

``--compare [PATH]`` compares this run's ratios with earlier results (default: the committed
``benchmarks/results/``, the files of the same machine names; or a ``--save DIR`` folder, or a
``--json`` file) and lists each ratio worse or better by more than ``--threshold`` (25%: the
noise between two runs, :mod:`compare`); ``--fail-on-regression`` then exits 1 on a regression.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from . import bench_compose, bench_cpu, bench_gpu, compare, plots, report, rows
from .cases import Case, MissingBenchmarkError, cases
from .harness import (
    RESULTS,
    Progress,
    add_save_argument,
    machine_info,
    missing_module,
    not_saved_hint,
    save_results,
)

SUITES = ("cpu", "overhead", "gpu")
#: Suites run only when named.
EXTRA_SUITES = ("compose", "compose_gpu", "fresh")
PROG = "python -m benchmarks"


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog=PROG, description=(
        "Every benchmark suite of gpufuncs in one command: prints a table of times per call and "
        "ratios against the anchors, and the targets met or not; saves nothing unless --save."))
    parser.add_argument("--suite", choices=(*SUITES, *EXTRA_SUITES, "all"), action="append",
                        help="suite to run (repeatable; default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="n up to 10^6, fewer repetitions, no crossover sweep")
    parser.add_argument("--kernels", type=_names, help="comma-separated kernel names (default: all)")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated n, e.g. 1e3,1e6 (default: the "
                        "suite's own)")
    parser.add_argument("--dtypes", type=_dtypes, help="comma-separated: float32,float64 (default)")
    add_save_argument(parser)
    parser.add_argument("--name", default="cpu", help="CPU results file name, for --save and --compare "
                        "(default: cpu)")
    parser.add_argument("--compare", nargs="?", const=RESULTS, type=Path, metavar="PATH",
                        help="compare this run's ratios with earlier results: a folder of result files "
                        "(default: benchmarks/results/) or a --json file")
    parser.add_argument("--threshold", type=float, default=100 * compare.THRESHOLD, metavar="PERCENT",
                        help="--compare: a ratio worse by more than this is a regression "
                        f"(default: {100 * compare.THRESHOLD:.0f})")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="--compare: exit 1 when a ratio regressed")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the run's meta, tables and rows")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write the run's PNG plots there")
    parser.add_argument("--large", action="store_true", help="cpu suite: add gaussian float64 at n=10^8")
    parser.add_argument("--targets-only", action="store_true",
                        help="gpu suite: only the rows the targets name")
    opts = parser.parse_args(argv)
    opts.suites = list(SUITES) if not opts.suite or "all" in opts.suite else list(dict.fromkeys(opts.suite))
    opts.threshold /= 100
    if opts.save and opts.save.resolve() == RESULTS.resolve() and (opts.quick or opts.targets_only):
        # The committed results are what the performance page shows: full runs only.
        parser.error("--save without DIR writes the committed benchmarks/results/, which keep full runs "
                     "only: give --quick and --targets-only runs a folder of their own (--save DIR)")
    if opts.fail_on_regression and not opts.compare:
        parser.error("--fail-on-regression needs --compare")
    return opts


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(float(n)) for n in _names(text))


def _dtypes(text: str) -> tuple[type, ...]:
    found = tuple(np.dtype(name).type for name in _names(text))
    if any(t not in bench_cpu.DTYPES for t in found):
        raise argparse.ArgumentTypeError(f"dtypes must be among float32, float64: {text!r}")
    return found


def _plan(opts: argparse.Namespace, selected: list[Case],
          skipped: dict[str, str]) -> dict[str, list[bench_cpu.Step]]:
    """The steps of each suite that runs, by table name; suites that cannot run go to
    ``skipped`` with the reason."""
    dtypes = opts.dtypes or bench_cpu.DTYPES
    tables: dict[str, list[bench_cpu.Step]] = {}
    if "cpu" in opts.suites:
        sizes = opts.sizes or (bench_cpu.QUICK_SIZES if opts.quick else bench_cpu.SIZES)
        tables["cpu"] = bench_cpu.main_steps(selected, sizes, dtypes, opts.quick,
                                             limit=None if opts.sizes is None else math.inf)
        if opts.large:
            tables["cpu"] += bench_cpu.large_steps(selected)
        if not opts.quick:
            tables["cpu_crossover"] = bench_cpu.crossover_steps(selected)
    if "overhead" in opts.suites:
        tables["cpu_overhead"] = bench_cpu.overhead_steps(selected, dtypes, opts.quick)
    if "gpu" in opts.suites:
        reason = bench_gpu.unavailable()
        if reason:
            skipped["gpu"] = reason
        else:
            timer = bench_gpu.Timer(opts.quick)
            tables["gpu_small"] = bench_gpu.small_steps(timer)
            tables["gpu"] = bench_gpu.gpu_steps(selected, timer, opts.quick, opts.targets_only,
                                                opts.sizes or bench_gpu.SIZES, dtypes)
    if "compose" in opts.suites:
        tables["cpu_compose"] = bench_compose.cpu_steps(opts.sizes or bench_compose.CPU_SIZES, dtypes,
                                                        opts.quick)
    if "fresh" in opts.suites:
        tables["cpu_fresh"] = bench_cpu.fresh_steps(opts.quick)
    if "compose_gpu" in opts.suites:
        reason = bench_gpu.unavailable()
        if reason:
            skipped["compose_gpu"] = reason
        else:
            tables["gpu_compose"] = bench_compose.gpu_steps(bench_gpu.Timer(opts.quick),
                                                            opts.sizes or bench_compose.GPU_SIZES,
                                                            dtypes, opts.quick)
    return tables


def run(opts: argparse.Namespace, selected: list[Case] | None = None) -> dict[str, Any]:
    """Run the chosen suites (of the kernels ``selected``, default ``--kernels``); the result:
    meta, tables (results-file shape), skipped suites and one row per measurement."""
    selected = cases(opts.kernels) if selected is None else selected
    skipped: dict[str, str] = {}
    load_before = os.getloadavg()[0]  # other work on the machine skews every figure
    planned = _plan(opts, selected, skipped)
    progress = Progress(sum(len(steps) for steps in planned.values()))
    tables = {name: bench_cpu.run(steps, progress) for name, steps in planned.items()}
    tables = {name: table for name, table in tables.items() if table}
    meta = _meta(opts, tables, load_before, skipped)
    return {"meta": meta, "skipped": skipped, "tables": tables, "rows": rows.long_rows(tables)}


def _meta(opts: argparse.Namespace, tables: dict[str, list[dict[str, Any]]], load_before: float,
          skipped: dict[str, str]) -> dict[str, Any]:
    """Machine, versions, date, git commit, GPU (or why none), the verdicts of the suites run."""
    if "gpu" in tables or "gpu_compose" in tables:
        meta = bench_gpu.gpu_meta(bench_gpu.targets(tables.get("gpu", []), tables.get("gpu_small", []))
                                  + bench_compose.gpu_verdicts(tables.get("gpu_compose", [])))
    else:
        meta = machine_info({"gpu": None, "gpu skipped": skipped.get("gpu", "not asked for")})
    if "cpu" in tables or "cpu_overhead" in tables:
        meta.update({k: v for k, v in bench_cpu.cpu_meta(
            tables.get("cpu", []), tables.get("cpu_overhead", []), tables.get("cpu_crossover", []),
            load_before, opts.quick).items() if k not in meta or k.startswith("load")})
    if "cpu_compose" in tables:
        meta.update({k: v for k, v in bench_compose.cpu_meta(tables["cpu_compose"], load_before).items()
                     if k not in meta or k.startswith("load")})
    if "cpu_fresh" in tables:
        meta.update({k: v for k, v in bench_cpu.fresh_meta(tables["cpu_fresh"], load_before).items()
                     if k not in meta or k.startswith("load")})
    meta["suites"] = [s for s in opts.suites if s not in skipped]
    meta["quick"] = opts.quick
    return meta


def preflight(opts: argparse.Namespace, selected: list[Case]) -> tuple[list[str], list[str]]:
    """What is missing for this run, before it starts: errors (a package the options need:
    nothing runs) and notes (a suite or rows left out), each naming how to install what is
    missing."""
    errors = [missing_module("matplotlib", 'python -m pip install ".[plot]" (the plot extra)', "--plot")
              if opts.plot else None]
    with_scipy = [c.name for c in selected if "scipy" in c.expressions()]
    if "cpu" in opts.suites and with_scipy:
        errors.append(missing_module(
            "scipy", 'python -m pip install ".[bench]" (the bench extra), or leave them out with --kernels',
            f"the cpu suite (the SciPy anchor of {', '.join(with_scipy)})"))
    notes = []
    for suite in (s for s in ("gpu", "compose_gpu") if s in opts.suites):
        reason = bench_gpu.unavailable()
        notes.append(f"{suite} suite skipped: {reason}" if reason else None)
        if suite == "gpu" and not reason:
            notes.append(missing_module("torch", "python -m pip install torch (its rows are left out)",
                                        "the gpu suite's small calls on torch tensors"))
    return [e for e in errors if e], [n for n in notes if n]


def file_names(meta: dict[str, Any], cpu: str) -> dict[str, str]:
    """The result file name of each table: ``cpu`` (``--name``) and its suffixes for the CPU
    tables, ``gpu-<gpu>`` and its suffixes for the GPU ones."""
    gpu = f"gpu-{bench_gpu.slug(meta['gpu'])}" if meta.get("gpu") else "gpu"
    return {"cpu": cpu, "cpu_overhead": f"{cpu}_overhead", "cpu_crossover": f"{cpu}_crossover",
            "gpu": gpu, "gpu_small": f"{gpu}_small", "cpu_compose": f"{cpu}_compose",
            "gpu_compose": f"{gpu}_compose", "cpu_fresh": f"{cpu}_fresh"}


def save(result: dict[str, Any], opts: argparse.Namespace) -> list[Path]:
    """Store the tables as ``<opts.save>/<name>*.{json,txt}``, as the suites' scripts do."""
    meta, tables = result["meta"], result["tables"]
    names = file_names(meta, opts.name)
    return [save_results(names[key], table, list(dict.fromkeys(c for r in table for c in r)), meta,
                         opts.save)
            for key, table in tables.items()]


def compare_run(result: dict[str, Any], opts: argparse.Namespace) -> int:
    """Print the comparison of this run's ratios with ``opts.compare``'s; the exit status: 1 on a
    regression with ``--fail-on-regression``, 2 when nothing could be compared."""
    names = file_names(result["meta"], opts.name)
    try:
        baselines, missing = compare.load(opts.compare, compare.families(
            result["tables"], names["cpu"], names["gpu"]))
    except ValueError as exc:
        print(f"{PROG} --compare: {exc}", file=sys.stderr)
        return 2
    for line in missing:
        print(f"{PROG} --compare: {line}", file=sys.stderr)
    compared = worse = 0
    for baseline in baselines:
        changes, unmatched = compare.compare(result["rows"], baseline)
        for line in compare.lines(baseline, changes, unmatched, opts.threshold, result["meta"]):
            print(line)
        compared += len(changes)
        worse += sum(c.flag(opts.threshold) == "worse" for c in changes)
    if not compared:
        print(f"{PROG} --compare: no ratio of this run is in {opts.compare} (other kernels, sizes or "
              "machine names?): nothing compared", file=sys.stderr)
        return 2
    if worse and opts.fail_on_regression:
        print(f"{worse} regression(s) beyond {opts.threshold:.0%}: exit status 1 (--fail-on-regression)")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Check what the run needs, run it, print its table and targets, compare, and write what
    was asked for; the exit status (2: the run could not start, or nothing was compared)."""
    opts = parse(argv)
    try:
        selected = cases(opts.kernels)
    except (KeyError, MissingBenchmarkError) as exc:  # a kernel not registered, or not declared
        print(f"{PROG}: {exc.args[0]}", file=sys.stderr)
        return 2
    errors, notes = preflight(opts, selected)
    for line in notes:
        print(line, file=sys.stderr)
    if errors:
        for line in errors:
            print(f"{PROG}: {line}", file=sys.stderr)
        return 2
    result = run(opts, selected)
    for line in report.suite_tables(result["rows"]) + report.verdict_lines(result["meta"], opts.quick):
        print(line)
    status = compare_run(result, opts) if opts.compare else 0  # before --save can overwrite them
    print()
    for path in save(result, opts) if opts.save else ():
        print(f"saved {path.with_suffix('.json')} and {path}")
    if not opts.save:
        print(not_saved_hint())
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps(result, indent=1, default=str))
        print(f"wrote {opts.json}")
    if opts.plot:
        title = "this run" + (" (quick)" if opts.quick else "")
        for kind in ("cpu", "gpu"):
            picked = [r for r in result["rows"] if r["suite"].split()[0] in _suites_of(kind)]
            for path in plots.plot_rows(picked, opts.plot, kind, f"{title}, {kind}"):
                print(f"wrote {path}")
    return status


def _suites_of(kind: str) -> tuple[str, ...]:
    return ("cpu", "overhead", "crossover") if kind == "cpu" else ("gpu",)


if __name__ == "__main__":
    raise SystemExit(main())
