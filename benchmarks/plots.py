"""PNG plots of benchmark rows (:mod:`rows`), with matplotlib (the ``plot`` extra).

Two figures per machine, drawn from the rows alone, so they come as well from a run
(``python -m benchmarks --plot DIR``) as from the committed result files
(``python benchmarks/figures.py``, which writes ``docs/images/``):

- ``<name>-time.png``: nanoseconds per sample against n, one panel per kernel and dtype, a line
  per target and per anchor, the copy of the same bytes dashed (on the GPU a device copy, the
  memory limit; on the CPU ``np.copyto`` on one thread, which ``parallel`` can beat);
- ``<name>-overhead.png``: microseconds per small call against NumPy and Numba's bare ufunc
  (CPU), or against CuPy's ``ElementwiseKernel`` (GPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

Rows = list[dict[str, Any]]

#: What a figure's own metadata would change from one run of the script to the next.
PNG_METADATA = {"Software": None}
COPY_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}
#: The dashed line's label: what the copy of the same bytes is on each kind of machine.
COPY_LABELS = {"cpu": "copy of the same bytes (np.copyto, one thread)", "gpu": "copy (memory limit)"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _series(rows: Rows, mode: str) -> dict[str, list[tuple[int, float]]]:
    """Label -> (n, seconds) points of ours and of each anchor, in ``mode`` (``median_s`` or
    ``pipelined_s``). Anchors are read from the reference rows (``auto``, or the device rows
    with a new output), as ours divided by the ratio measured in the same run."""
    pipelined = mode == "pipelined_s"
    # The GPU's copy is a device-to-device memcpy, the memory limit; the CPU's is np.copyto on one
    # thread, which parallel calls beat on many cores (0.04 against 0.3 ns per sample on 16).
    copy = COPY_LABELS["gpu" if any(r["suite"] == "gpu" for r in rows) else "cpu"]
    anchors = {"NumPy": "x_numpy", "Numba bare": "x_numba", "CuPy": "x_cupy_pipelined" if pipelined
               else "x_cupy", copy: "x_copy_pipelined" if pipelined else "x_copy"}
    found: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        label = r["target"] if r["suite"] == "cpu" else f"{r['target']} {r['data']} {r['call']}"
        found.setdefault(label, []).append((r["n"], r[mode]))
        if (r["target"], r["data"], r["call"]) in (("auto", "host", "new"), ("cuda", "device", "new")):
            for anchor, key in anchors.items():
                if r.get(key):
                    found.setdefault(anchor, []).append((r["n"], r[mode] / r[key]))
    return found


def time_per_element(rows: Rows, path: Path, title: str) -> Path | None:
    """Nanoseconds per sample against n (log-log) for each kernel and dtype; ``None`` when
    ``rows`` hold no main-table rows."""
    rows = [r for r in rows if r["suite"] in ("cpu", "gpu")]
    if not rows:
        return None
    mode = "pipelined_s" if rows[0]["suite"] == "gpu" else "median_s"
    kernels = sorted({r["kernel"] for r in rows})
    dtypes = sorted({r["dtype"] for r in rows})
    plt = _pyplot()
    fig, axes = plt.subplots(len(kernels), len(dtypes), figsize=(5.2 * len(dtypes), 3.1 * len(kernels)),
                             squeeze=False, sharex=True)
    for (i, kernel), (j, dtype) in ((ik, jd) for ik in enumerate(kernels) for jd in enumerate(dtypes)):
        ax = axes[i][j]
        panel = [r for r in rows if (r["kernel"], r["dtype"]) == (kernel, dtype)]
        for label, points in _series(panel, mode).items():
            points.sort()
            ns = [n for n, _ in points]
            per = [1e9 * t / n for n, t in points]
            style = COPY_STYLE if label.startswith("copy") else {"marker": "o", "markersize": 3}
            ax.plot(ns, per, label=label, **style)
        ax.set(xscale="log", yscale="log", title=f"{kernel} {dtype}", ylabel="ns per sample")
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("n (samples)")
    handles, labels = _legend(axes)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), frameon=False)
    how = "pipelined calls" if mode == "pipelined_s" else "median per call"
    missing = "" if any(label.startswith("copy") for label in labels) else (
        "\n(no copy of the same bytes in these results: they predate it)")
    fig.suptitle(f"{title}: time per sample ({how}){missing}")
    fig.tight_layout(rect=(0, 0.05 + 0.01 * (len(labels) // 5), 1, 0.98))
    return _save(fig, path)


def _legend(axes: Any) -> tuple[list[Any], list[str]]:
    """Every label of every panel once, in order of appearance."""
    seen: dict[str, Any] = {}
    for ax in (a for row in axes for a in row):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def _bars(ax: Any, groups: list[str], bars: dict[str, list[float | None]], ylabel: str,
          log: bool = False) -> None:
    """Grouped bars: one group per entry of ``groups``, one bar per key of ``bars`` (a value
    not measured: no bar); ``log``: a logarithmic value axis."""
    width = 0.8 / max(len(bars), 1)
    for k, (label, values) in enumerate(bars.items()):
        xs = [g + (k - (len(bars) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [math.nan if v is None else v for v in values], width, label=label)
    ax.set_xticks(range(len(groups)), groups, rotation=15)
    ax.set_ylabel(ylabel)
    ax.set_ylim(*_value_limits([v for values in bars.values() for v in values if v], log))
    if log:
        ax.set_yscale("log")
    ax.legend(frameon=False, fontsize="small", ncol=2, loc="upper center")
    ax.grid(True, axis="y", which="major", alpha=0.3)


def _value_limits(values: list[float], log: bool) -> tuple[float, float]:
    """The value axis' limits: from 0 (linear) or below the shortest bar (log) to a third
    above the tallest bar, in the axis' own scale, which leaves the legend room above the bars.

    The limits are set for the scale the axis ends with: limits taken from a linear axis (its
    bottom at 0) and then put on a log one give every bar the full height of the plot.
    """
    low, high = min(values, default=1.0), max(values, default=1.0)
    if not log:
        return 0.0, high * 1.3
    decades = max(math.log10(high / low), 1.0)
    return low / 10 ** (0.15 * decades), high * 10 ** (0.45 * decades)


def _cpu_overhead(ax: Any, rows: Rows) -> bool:
    """Per kernel (float64, n = 10): the public call on ``auto`` and ``cpu``, Numba's bare ufunc
    and the NumPy expression (from the main table's n = 10 row where the overhead table has
    none)."""
    plain = {(r["kernel"], r["target"]): r for r in rows
             if r["suite"] == "overhead" and r["call"] == "new" and r["dtype"] == "float64"}
    small = {r["kernel"]: r for r in rows if r["suite"] == "cpu" and r["target"] == "auto"
             and r["dtype"] == "float64" and r["n"] == 10}
    kernels = sorted({k for k, _ in plain})
    if not kernels:
        return False

    def numpy_us(kernel: str) -> float | None:
        for r in (plain[(kernel, "auto")], small.get(kernel)):
            if r and r.get("x_numpy"):
                return 1e6 * r["median_s"] / r["x_numpy"]
        return None

    _bars(ax, kernels, {
        "gpufuncs (auto)": [1e6 * plain[(k, "auto")]["median_s"] for k in kernels],
        "gpufuncs (target='cpu')": [1e6 * plain[(k, "cpu")]["median_s"] for k in kernels],
        "Numba bare ufunc": [1e6 * plain[(k, "auto")]["median_s"] / plain[(k, "auto")]["x_numba"]
                             for k in kernels],
        "NumPy expression": [numpy_us(k) for k in kernels]},
        "µs per call", log=True)  # NumPy's hermevander costs tens of times a ufunc call
    ax.set_title("CPU call at n = 10, float64")
    return True


def _gpu_overhead(ax_kernels: Any, ax_kinds: Any, rows: Rows) -> bool:
    """The smallest device call of each kernel (float32, new output), and the small-call table
    by array kind, against CuPy: call + synchronize and pipelined."""
    device = [r for r in rows if r["suite"] == "gpu" and (r["data"], r["call"], r["dtype"])
              == ("device", "new", "float32")]
    if not device:
        return False
    n = min(r["n"] for r in device)
    first = {r["kernel"]: r for r in device if r["n"] == n}
    _bars(ax_kernels, sorted(first), _against_cupy([first[k] for k in sorted(first)]), "µs per call")
    ax_kernels.set_title(f"GPU call at n = {n}, float32, device arrays")
    small = [r for r in rows if r["suite"] == "gpu small"]
    if small:
        _bars(ax_kinds, [f"{r['data'][8:-1]} {r['call']}" for r in small], _against_cupy(small),
              "µs per call")
        ax_kinds.set_title(f"{small[0]['kernel']} float32 n = {small[0]['n']}, by array kind")
    return True


def _against_cupy(rows: Rows) -> dict[str, list[float | None]]:
    def anchor(r: dict[str, Any], mode: str, key: str) -> float | None:
        return 1e6 * r[mode] / r[key] if r.get(key) else None

    return {"gpufuncs call+sync": [1e6 * r["median_s"] for r in rows],
            "CuPy call+sync": [anchor(r, "median_s", "x_cupy") for r in rows],
            "gpufuncs pipelined": [1e6 * r["pipelined_s"] for r in rows],
            "CuPy pipelined": [anchor(r, "pipelined_s", "x_cupy_pipelined") for r in rows]}


def overhead(rows: Rows, path: Path, title: str) -> Path | None:
    """Small-call cost against the anchors (CPU or GPU, whichever ``rows`` hold); ``None`` when
    they hold neither."""
    plt = _pyplot()
    if any(r["suite"] == "gpu" for r in rows):
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
        drawn = _gpu_overhead(left, right, rows)
    else:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        drawn = _cpu_overhead(ax, rows)
    if not drawn:
        plt.close(fig)
        return None
    fig.suptitle(f"{title}: call overhead")
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, metadata=PNG_METADATA)
    _pyplot().close(fig)
    return path


#: The figures of one machine, by file name suffix.
FIGURES: dict[str, Callable[[Rows, Path, str], Path | None]] = {"time": time_per_element,
                                                                "overhead": overhead}


def plot_rows(rows: Rows, directory: Path, name: str, title: str) -> list[Path]:
    """Every figure of ``rows`` as ``<directory>/<name>-<figure>.png``; the paths written."""
    written = [draw(rows, directory / f"{name}-{suffix}.png", title) for suffix, draw in FIGURES.items()]
    return [path for path in written if path is not None]
