"""One row per measurement, from the suites' tables (a run's, or the files in ``results/``).

The tables keep the shape of ``benchmarks/results/*.json`` (one row per kernel, dtype and n with
a column per target; :mod:`figures` reads them). :func:`long_rows` turns them into rows that each
carry one figure with everything it needs to be read alone:

``suite``
    ``cpu``, ``overhead``, ``crossover``, ``gpu``, ``gpu small``, ``compose``, ``compose gpu`` or
    ``fresh`` (a fresh process: import + first call, its ``median_s`` a median over processes).
``kernel``, ``target``, ``dtype``, ``n``, ``outputs``
    ``n`` samples, ``outputs`` elements written (``hermite_norm``: 32 per sample).
``data``, ``call``
    Where the arrays live (``host``, ``device``, ``device (torch)``, ...) and how the call gets
    its output (``new``, ``out=``, ``where=``).
``median_s``
    Median seconds per call after warm-up (GPU: one call and a synchronize).
``pipelined_s``
    GPU: calls issued back to back, one synchronize (``None`` on the CPU).
``elements_per_s``, ``GB_per_s``
    ``n / median_s``, and the bytes read plus written per second (``None`` where the kernel
    has no benchmark declaration to count them).
``x_<anchor>``
    This figure over the anchor's, measured in the same run (below 1: faster): ``x_numpy``
    (the declared expression; ``x_scipy`` too where declared), ``x_numba`` (Numba's own
    ``@vectorize``/``@guvectorize``), ``x_copy`` (a copy of the same bytes), ``x_cupy`` (CuPy's
    ``ElementwiseKernel``), and on the GPU ``x_copy_pipelined``, ``x_cupy_pipelined``,
    ``x_pinned``; ``None`` where not measured.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

import gpufuncs as gf

CPU_TARGETS = ("cpu", "parallel", "auto")
ANCHORS = ("x_numpy", "x_scipy", "x_numba", "x_copy", "x_cupy", "x_copy_pipelined",
           "x_cupy_pipelined", "x_pinned")
TABLE_SUFFIXES = ("", "_overhead", "_crossover", "_small", "_compose", "_fresh")


def load_tables(name: str, directory: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The meta and tables of the result files ``<directory>/<name>*.json``.

    Tables are keyed as a run of ``python -m benchmarks`` keys them: ``cpu``, ``cpu_overhead``,
    ``cpu_crossover``, ``cpu_compose`` for a CPU family (``cpu-16core``: its files), ``gpu``,
    ``gpu_small``, ``gpu_compose`` for a GPU one (``gpu-h100``).
    """
    kind = "gpu" if name.startswith("gpu") else "cpu"
    meta: dict[str, Any] = {}
    tables: dict[str, list[dict[str, Any]]] = {}
    for suffix in TABLE_SUFFIXES:
        path = directory / f"{name}{suffix}.json"
        if path.exists():
            data = json.loads(path.read_text())
            meta = meta or data["meta"]
            tables[kind + suffix] = data["rows"]
    return meta, tables


def _nbytes(kernel: str, n: int, dtype: str) -> int | None:
    """Bytes read plus written by one call, from the kernel's declaration (if any)."""
    if kernel not in gf.registry or gf.registry[kernel].spec.benchmark is None:
        return None
    spec = gf.registry[kernel].spec
    return n * spec.benchmark.bytes_per_sample(np.dtype(dtype).itemsize, spec.nout)


def _outputs(kernel: str, n: int) -> int:
    """Output elements written by a call on ``n`` samples (``n`` without a declaration)."""
    spec = gf.registry[kernel].spec if kernel in gf.registry else None
    return n * (spec.benchmark.outputs_per_sample(spec.nout) if spec and spec.benchmark else 1)


def _ratio(value: float, anchor: Any) -> float | None:
    return value / anchor if isinstance(anchor, (int, float)) and anchor else None


def _given(value: Any) -> float | None:
    """A ratio column of a GPU table: a number, or ``""`` where not measured."""
    return float(value) if isinstance(value, (int, float)) else None


def _row(suite: str, kernel: str, target: str, dtype: str, n: int, data: str, call: str,
         seconds: float, pipelined: float | None = None, **anchors: float | None) -> dict[str, Any]:
    nbytes = _nbytes(kernel, n, dtype)
    return {"suite": suite, "kernel": kernel, "target": target, "dtype": dtype, "n": n,
            "outputs": _outputs(kernel, n), "data": data, "call": call, "median_s": seconds,
            "pipelined_s": pipelined, "elements_per_s": n / seconds,
            "GB_per_s": nbytes / seconds / 1e9 if nbytes else None,
            **{key: anchors.get(key) for key in ANCHORS}}


def cpu_rows(table: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The main CPU table: a row per target."""
    return [_row("cpu", r["kernel"], t, r["dtype"], r["n"], "host", "new", r[t] * 1e-6,
                 x_numpy=_ratio(r[t], r.get("numpy")), x_scipy=_ratio(r[t], r.get("scipy")),
                 x_numba=_ratio(r[t], r.get("numba")), x_copy=_ratio(r[t], r.get("copy")))
            for r in table for t in CPU_TARGETS]


def overhead_rows(table: Iterable[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    """The call-overhead table: the public call on ``auto`` and on ``cpu``, and with ``out=``
    and ``where=``, each against the matching bare Numba call."""
    shapes = (("public", "auto", "new", "bare"), ("public cpu", "cpu", "new", "bare"),
              ("public out=", "auto", "out=", "bare out="), ("public where=", "auto", "where=", "bare out="))
    return [_row("overhead", r["kernel"], target, r["dtype"], n, "host", call, r[ours] * 1e-6,
                 x_numba=_ratio(r[ours], r[bare]),
                 x_numpy=_ratio(r[ours], r.get("numpy")) if call == "new" else None)
            for r in table for ours, target, call, bare in shapes]


def crossover_rows(table: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cpu/parallel sweep (float64): a row per target."""
    rows = []
    for r in table:
        n = r["outputs"] // _outputs(r["kernel"], 1)
        rows += [_row("crossover", r["kernel"], t, "float64", n, "host", "new", r[t] * 1e-6)
                 for t in ("cpu", "parallel")]
    return rows


def gpu_rows(table: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The main GPU table: ``device``, ``device+out`` and ``host`` rows of the cuda target."""
    where = {"device": ("device", "new"), "device+out": ("device", "out="), "host": ("host", "new")}
    return [_row("gpu", r["kernel"], "cuda", r["dtype"], r["n"], *where[r["case"]], r["sync_us"] * 1e-6,
                 r["pipe_us"] * 1e-6, x_copy=_given(r["x_copy_sync"]), x_cupy=_given(r["x_cupy_sync"]),
                 x_copy_pipelined=_given(r["x_copy"]), x_cupy_pipelined=_given(r["x_cupy"]),
                 x_numba=_given(r["x_numba"]), x_pinned=_given(r["x_pinned"]))
            for r in table]


def small_rows(table: Iterable[dict[str, Any]], kernel: str = "gaussian",
               n: int = 1000) -> list[dict[str, Any]]:
    """The GPU small-call table (float32): a row per array kind and output."""
    return [_row("gpu small", kernel, "cuda", "float32", n, f"device ({r['array kind']})",
                 "new" if r["output"] == "alloc" else "out=", r["sync_us"] * 1e-6, r["pipe_us"] * 1e-6,
                 x_cupy=r["x_cupy_sync"], x_cupy_pipelined=r["x_cupy_pipe"])
            for r in table]


#: The compose suites' two kernels, by their columns' label (see :mod:`bench_compose`).
COMPOSE_KERNELS = {"composed": "bench_composed", "by hand": "bench_by_hand"}


def compose_rows(table: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``compose`` table: each kernel on each host target, against the NumPy expression."""
    return [_row("compose", kernel, t, r["dtype"], r["n"], "host", "new", r[f"{label} {t}"] * 1e-6,
                 x_numpy=_ratio(r[f"{label} {t}"], r.get("numpy")))
            for r in table for t in ("cpu", "parallel") for label, kernel in COMPOSE_KERNELS.items()]


def gpu_compose_rows(table: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``compose_gpu`` table: each kernel on CuPy arrays, call + synchronize and pipelined."""
    return [_row("compose gpu", kernel, "cuda", r["dtype"], r["n"], "device", "new",
                 r[f"{label} sync_us"] * 1e-6, r[f"{label} pipe_us"] * 1e-6)
            for r in table for label, kernel in COMPOSE_KERNELS.items()]


def fresh_rows(table: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fresh-process table's timed rows (import + first call, in seconds) against Numba's
    ``@vectorize``; its memory rows (MB) have no time to give, and are in the targets only."""
    return [{**_row("fresh", r["kernel"], r["target"], r["dtype"], r["n"], "host", "import + first call",
                    r["gpufuncs"], x_numba=r["gpufuncs/numba"]), "GB_per_s": None}
            for r in table if r["unit"] == "s"]


CONVERTERS = {"cpu": cpu_rows, "cpu_overhead": overhead_rows, "cpu_crossover": crossover_rows,
              "gpu": gpu_rows, "gpu_small": small_rows, "cpu_compose": compose_rows,
              "gpu_compose": gpu_compose_rows, "cpu_fresh": fresh_rows}


def long_rows(tables: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every table's rows as one row per measurement (see the module docstring)."""
    return [row for key, table in tables.items() for row in CONVERTERS[key](table)]
