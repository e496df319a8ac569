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
  ``<name>_compose.*`` and ``gpu-<gpu>_compose.*``).

Kernels come from the registry, each with its ``benchmark=gf.Benchmark(...)`` declaration
(``--kernels`` picks some; a kernel without a declaration stops the run, naming it). A full run
saves the tables under ``benchmarks/results/`` (``--name`` names the CPU files: ``cpu``,
``cpu-16core``; the GPU files are named after the GPU), which ``benchmarks/figures.py`` turns
into the performance page; ``--quick`` (n up to 10^6, fewer repetitions, about a minute on 2
cores) and ``--targets-only`` save nothing there. ``--json PATH`` writes the
run's meta (machine, GPU, versions, date, git commit), its tables and one row per measurement
(:mod:`rows`); ``--plot DIR`` draws its PNGs (:mod:`plots`; needs the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from . import bench_compose, bench_cpu, bench_gpu, plots, rows
from .cases import Case, MissingBenchmarkError, cases
from .harness import Progress, machine_info, save_results

SUITES = ("cpu", "overhead", "gpu")
#: Suites run only when named.
EXTRA_SUITES = ("compose", "compose_gpu")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=(*SUITES, *EXTRA_SUITES, "all"), action="append",
                        help="suite to run (repeatable; default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="n up to 10^6, fewer repetitions, no crossover; nothing saved in results/")
    parser.add_argument("--kernels", type=_names, help="comma-separated kernel names (default: all)")
    parser.add_argument("--sizes", type=_sizes, help="comma-separated n, e.g. 1e3,1e6 (default: the "
                        "suite's own)")
    parser.add_argument("--dtypes", type=_dtypes, help="comma-separated: float32,float64 (default)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the run's meta, tables and rows")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="write the run's PNG plots there")
    parser.add_argument("--large", action="store_true", help="cpu suite: add gaussian float64 at n=10^8")
    parser.add_argument("--targets-only", action="store_true",
                        help="gpu suite: only the rows the targets name; nothing saved in results/")
    parser.add_argument("--name", default="cpu", help="CPU results file name when saving (default: cpu)")
    opts = parser.parse_args(argv)
    opts.suites = list(SUITES) if not opts.suite or "all" in opts.suite else list(dict.fromkeys(opts.suite))
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
    if "compose_gpu" in opts.suites:
        reason = bench_gpu.unavailable()
        if reason:
            skipped["compose_gpu"] = reason
        else:
            tables["gpu_compose"] = bench_compose.gpu_steps(bench_gpu.Timer(opts.quick),
                                                            opts.sizes or bench_compose.GPU_SIZES,
                                                            dtypes, opts.quick)
    return tables


def run(opts: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen suites; the result: meta, tables (results-file shape), skipped suites
    and one row per measurement."""
    selected = cases(opts.kernels)
    skipped: dict[str, str] = {}
    load_before = os.getloadavg()[0]  # other work on the machine skews every figure
    planned = _plan(opts, selected, skipped)
    for suite, reason in skipped.items():
        print(f"{suite} suite skipped: {reason}", file=sys.stderr)
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
    meta["suites"] = [s for s in opts.suites if s not in skipped]
    meta["quick"] = opts.quick
    return meta


def save(result: dict[str, Any], opts: argparse.Namespace) -> list[Path]:
    """Store the tables as ``results/<name>*.{json,txt}``, as the suites' scripts do."""
    meta, tables = result["meta"], result["tables"]
    gpu = f"gpu-{bench_gpu.slug(meta['gpu'])}" if meta.get("gpu") else "gpu"
    names = {"cpu": opts.name, "cpu_overhead": f"{opts.name}_overhead",
             "cpu_crossover": f"{opts.name}_crossover", "gpu": gpu, "gpu_small": f"{gpu}_small",
             "cpu_compose": f"{opts.name}_compose", "gpu_compose": f"{gpu}_compose"}
    return [save_results(names[key], table, list(dict.fromkeys(c for r in table for c in r)), meta)
            for key, table in tables.items()]


def main(argv: list[str] | None = None) -> int:
    """Run, print a summary, and write what was asked for."""
    opts = parse(argv)
    try:
        result = run(opts)
    except (KeyError, MissingBenchmarkError) as exc:  # a kernel not registered, or not declared
        print(f"python -m benchmarks: {exc.args[0]}", file=sys.stderr)
        return 2
    for line in _summary(result):
        print(line)
    if not (opts.quick or opts.targets_only):
        for path in save(result, opts):
            print(f"saved {path}")
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
    return 0


def _suites_of(kind: str) -> tuple[str, ...]:
    return ("cpu", "overhead", "crossover") if kind == "cpu" else ("gpu",)


def _summary(result: dict[str, Any]) -> list[str]:
    """A few lines: rows per suite, skipped suites, the verdicts of the targets."""
    counts: dict[str, int] = {}
    for r in result["rows"]:
        counts[r["suite"]] = counts.get(r["suite"], 0) + 1
    lines = [f"{suite}: {count} rows" for suite, count in counts.items()]
    lines += [f"{suite}: skipped ({reason})" for suite, reason in result["skipped"].items()]
    for key, value in result["meta"].items():  # the targets' verdicts (the GPU's are a list)
        for verdict in value if isinstance(value, list) else [value]:
            if isinstance(verdict, str) and re.search(r"\b(met|NOT MET)\b", verdict):
                lines.append(verdict if isinstance(value, list) else f"{key}: {verdict}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
