"""The one timing harness shared by every benchmark suite.

Rules (the machines are noisy): warm up first, report the median of several repetitions,
synchronize the GPU inside the timed region, and compare ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def measure(
    fn: Callable[[], Any],
    *,
    sync: Callable[[], Any] | None = None,
    warmup: int = 3,
    repeat: int = 15,
    min_time: float = 2e-4,
    inner: int | None = None,
) -> float:
    """Median seconds per call of ``fn`` after ``warmup`` calls.

    Each repetition runs ``fn`` ``inner`` times (by default: enough times to last at least
    ``min_time``, so microsecond calls are not dominated by the timer), then calls ``sync`` (for
    example a CUDA stream synchronize) before the clock stops.
    """
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    if inner is None:
        inner = _calibrate(fn, sync, min_time)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def measure_pair(
    fn: Callable[[], Any],
    ref: Callable[[], Any],
    *,
    sync: Callable[[], Any] | None = None,
    warmup: int = 5,
    repeat: int = 200,
    inner: int | None = 1,
    min_time: float = 2e-4,
) -> tuple[float, float]:
    """Median seconds per call of ``fn`` and of ``ref``, their repetitions interleaved.

    Each repetition runs ``fn`` ``inner`` times and then ``ref`` ``inner`` times (the order
    swapped every other repetition), each followed by ``sync`` inside its timed region. Drift in
    the machine's state between repetitions (clocks, other processes) then reaches both alike:
    for microsecond calls whose ratio is close to 1, measuring one after the other can move the
    ratio by more than the difference being measured. ``inner=None``: enough calls for ``fn``'s
    repetition to last ``min_time`` (so that the timer's own cost is no part of a sub-microsecond
    call), the same number for ``ref``.
    """
    for _ in range(warmup):
        fn()
        ref()
    if sync:
        sync()
    if inner is None:
        inner = _calibrate(fn, sync, min_time)
    samples: tuple[list[float], list[float]] = ([], [])
    for r in range(repeat):
        order = ((0, fn), (1, ref)) if r % 2 == 0 else ((1, ref), (0, fn))
        for which, f in order:
            start = time.perf_counter()
            for _ in range(inner):
                f()
            if sync:
                sync()
            samples[which].append((time.perf_counter() - start) / inner)
    return statistics.median(samples[0]), statistics.median(samples[1])


def _calibrate(fn: Callable[[], Any], sync: Callable[[], Any] | None, min_time: float) -> int:
    """Calls per repetition: doubled until a repetition lasts ``min_time``."""
    inner = 1
    while True:
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        if sync:
            sync()
        if time.perf_counter() - start >= min_time or inner >= 1 << 20:
            return inner
        inner *= 2


def machine_info(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Machine, library versions and date, stored with every result file."""
    import numba
    import numpy

    import gpufuncs

    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "gpufuncs": gpufuncs.__version__,
        "git commit": git_commit(),
    }
    try:
        info["threading_layer"] = numba.threading_layer()
    except ValueError:  # no parallel code has run yet
        info["threading_layer"] = None
    info.update(extra or {})
    return info


def git_commit() -> str | None:
    """The checked-out commit of this repository, ``+dirty`` when tracked files differ from it;
    ``None`` outside a git checkout. ``GPUFUNCS_GIT_COMMIT`` overrides it, for a copy of the
    working tree whose ``.git`` is not the one it came from (a remote benchmark machine)."""
    given = os.environ.get("GPUFUNCS_GIT_COMMIT")
    if given:
        return given
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


class Progress:
    """A one-line progress report on stderr: steps done of ``total``, the step, time so far.

    On a terminal the line is rewritten in place; elsewhere (a log, a test's pipe) a line is
    printed at every tenth of the run, so logs stay short.
    """

    def __init__(self, total: int, stream: Any = None) -> None:
        self.total, self.done = max(total, 1), 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, what: str) -> None:
        """Count one step, described by ``what``."""
        before = 10 * self.done // self.total
        self.done += 1
        line = (f"[{self.done}/{self.total} {100 * self.done // self.total:3d}%] "
                f"{time.perf_counter() - self.start:5.0f} s  {what}")
        if self.tty:
            self.stream.write("\r" + line[:100].ljust(100))
            if self.done >= self.total:
                self.stream.write("\n")
        elif 10 * self.done // self.total > before or self.done == 1:
            self.stream.write(line + "\n")
        self.stream.flush()


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain fixed-width text table of ``rows`` (dicts) restricted to ``columns``."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    cells = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
              for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def save_results(name: str, rows: Sequence[dict[str, Any]], columns: Sequence[str],
                 meta: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Write ``<directory>/<name>.json`` (rows + meta) and ``<directory>/<name>.txt`` (the
    table); ``directory`` defaults to the committed ``benchmarks/results/``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=1))
    header = "\n".join(f"# {k}: {v}" for k, v in meta.items())
    path = directory / f"{name}.txt"
    path.write_text(header + "\n\n" + format_table(rows, columns) + "\n")
    return path


def add_save_argument(parser: argparse.ArgumentParser) -> None:
    """``--save [DIR]``, the same in every benchmark: without it a run writes no file; with it,
    the result files go to ``DIR``, or to the committed ``benchmarks/results/`` when none is
    given (``opts.save``: the folder, or ``None``)."""
    parser.add_argument("--save", nargs="?", const=RESULTS, type=Path, metavar="DIR",
                        help="write the result files (.json and .txt) into DIR; without DIR into "
                             "benchmarks/results/, the committed results the performance page is "
                             "generated from (default: save nothing)")


def missing_module(name: str, install: str, needed_for: str) -> str | None:
    """A line naming module ``name``, what needs it and how to install it, when it is not
    installed; else ``None``. Found without importing it (torch takes seconds to import)."""
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        found = False
    return None if found else f"{needed_for} needs {name}, which is not installed: {install}"


def not_saved_hint() -> str:
    """What a run that saved nothing says: how to keep its results."""
    return ("not saved (--save writes the result files into benchmarks/results/, the committed "
            "results; --save DIR elsewhere)")


def host_or_gpu_main(prog: str, description: str, stem: str, host_rows: Callable[[], list[dict[str, Any]]],
                     gpu_rows: Callable[[], list[dict[str, Any]]], argv: list[str] | None) -> int:
    """The command line of a benchmark with a host table and a ``--gpu`` one: run one and print
    it; with ``--save [DIR]`` save it as ``<stem>.*`` or ``<stem>-<gpu>.*`` (``--name`` to
    change it) in ``DIR`` or ``benchmarks/results/``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--gpu", action="store_true", help="CuPy arrays on the GPU")
    parser.add_argument("--name", help=f"results file name (default: {stem}, or {stem}-<gpu> with --gpu)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    if opts.gpu:
        missing = missing_module("cupy", "python -m pip install cupy-cuda12x", "--gpu")
        if missing:
            print(f"{prog}: {missing}", file=sys.stderr)
            return 2
        import cupy as cp

        gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        rows = gpu_rows()
        name = opts.name or f"{stem}-" + gpu.lower().replace("nvidia ", "").split()[0]
        meta = machine_info({"gpu": gpu, "cupy": cp.__version__})
    else:
        rows = host_rows()
        name, meta = opts.name or stem, machine_info()
    print(format_table(rows, list(rows[0])))
    if opts.save is None:
        print(not_saved_hint())
    else:
        path = save_results(name, rows, list(rows[0]), meta, opts.save)
        print(f"saved {path.with_suffix('.json')} and {path}")
    return 0
