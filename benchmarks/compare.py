"""``python -m benchmarks --compare [PATH]``: this run's ratios against earlier results.

Ratios, not times: each ratio (gpufuncs' time over an anchor's, :mod:`rows`) was measured in
one run, so it moves much less than a time does from one run or machine to the next. A ratio is
compared where the earlier results have the same row (suite, kernel, target, dtype, n, data and
call): a **regression** is a ratio larger than the earlier one by more than the threshold
(gpufuncs slower against the same anchor), an improvement one smaller by as much.

The earlier results are a folder of result files (``benchmarks/results/`` by default, or one
written by ``--save DIR``), read for the same machine names as this run saves (``--name``, and
``gpu-<gpu>``), or the ``--json`` file of an earlier run.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import report, rows

Row = dict[str, Any]

#: The default threshold, a fraction: above the noise of a ratio between two full runs.
THRESHOLD = 0.25
THRESHOLD_WHY = (
    "between two full runs of nearly the same code on the 2-core CI machine (benchmarks/results/"
    "cpu*.json at commits b5696da and fec4536, 14 minutes apart), 99% of the 342 ratios moved by "
    "17% or less, the largest by 21%; a --quick run (fewer repetitions), a loaded machine and "
    "another machine move more")
KEY = ("suite", "kernel", "target", "dtype", "n", "data", "call")


@dataclass(frozen=True)
class Baseline:
    """Earlier results: their rows (one per measurement), meta and where they came from."""

    rows: list[Row]
    meta: dict[str, Any]
    source: str

    @property
    def gpu(self) -> bool:
        """Whether these are GPU results (their machine is their GPU; the CPU's, its processor)."""
        return bool(self.rows) and all("gpu" in r["suite"] for r in self.rows)


@dataclass(frozen=True)
class Change:
    """One ratio in this run and in the baseline."""

    row: Row
    key: str
    before: float
    after: float

    @property
    def factor(self) -> float:
        """This run's ratio over the earlier one: 1.3 is 30% slower against the anchor."""
        return self.after / self.before

    def flag(self, threshold: float) -> str:
        """``worse`` (:attr:`factor` above ``1 + threshold``), ``better`` (below its inverse)
        or ``same``: a factor, so that a change and its undoing weigh the same."""
        if self.factor > 1 + threshold:
            return "worse"
        if self.factor * (1 + threshold) < 1:
            return "better"
        return "same"


def families(tables: dict[str, Any], cpu_name: str, gpu_name: str) -> list[str]:
    """The result-file names of a run's tables: ``cpu_name`` for its CPU tables, ``gpu_name``
    for its GPU ones."""
    found = [cpu_name if key.startswith("cpu") else gpu_name for key in tables]
    return list(dict.fromkeys(found))


def load(source: Path, names: list[str]) -> tuple[list[Baseline], list[str]]:
    """The baselines in ``source`` (a folder of result files, or a run's ``--json``) for the
    result names ``names``, and a line for each name the folder has no files of."""
    if source.is_file():
        data = json.loads(source.read_text())
        if not (isinstance(data, dict) and data.get("rows") and "suite" in data["rows"][0]):
            raise ValueError(f"{source} is not the --json file of a run of python -m benchmarks "
                             "(give the folder of its result files instead)")
        return [Baseline(data["rows"], data.get("meta", {}), str(source))], []
    if not source.is_dir():
        raise ValueError(f"{source}: no such folder or file")
    found, missing = [], []
    for name in names:
        meta, tables = rows.load_tables(name, source)
        if tables:
            found.append(Baseline(rows.long_rows(tables), meta, f"{source}/{name}*.json"))
        else:
            missing.append(f"{source} has no results named {name} ({name}.json ...): nothing to compare "
                           "that machine's rows with (--name picks the CPU files)")
    return found, missing


def compare(run_rows: list[Row], baseline: Baseline) -> tuple[list[Change], int]:
    """Every ratio of ``run_rows`` that ``baseline`` has too, and how many of the run's rows
    it does not have."""
    earlier = {tuple(r[k] for k in KEY): r for r in baseline.rows}
    changes, unmatched = [], 0
    for r in run_rows:
        before = earlier.get(tuple(r[k] for k in KEY))
        if before is None:
            unmatched += 1
            continue
        changes += [Change(r, key, before[key], r[key]) for key in rows.ANCHORS
                    if r.get(key) and before.get(key)]
    return changes, unmatched


def machine(meta: dict[str, Any], gpu: bool) -> str:
    """Where and when results were measured, in a few words."""
    commit = str(meta.get("git commit") or "not recorded")[:12]
    return f"{_where(meta, gpu)}, measured {str(meta.get('date', '?'))[:10]}, commit {commit}"


def _where(meta: dict[str, Any], gpu: bool) -> str:
    """The GPU (``gpu``: of GPU results), else the processor and its cores."""
    return str(meta.get("gpu")) if gpu else f"{meta.get('processor', '?')}, {meta.get('cores', '?')} cores"


def contender(r: Row) -> str:
    """The target, and where the data lives and how the output comes when not the usual."""
    return " ".join([r["target"], *([r["data"]] if r["data"] != "host" else []),
                     *([r["call"]] if r["call"] != "new" else [])])


def ratio_label(change: Change) -> str:
    label = "/" + report.ANCHORS[change.key][0]
    return label + (" pipelined" if report.anchor_mode(change.key, change.row) == "pipelined_s" else "")


def lines(baseline: Baseline, changes: list[Change], unmatched: int, threshold: float,
          meta: dict[str, Any]) -> list[str]:
    """The comparison with one baseline: where it comes from, counts, the threshold and why,
    and a line per ratio beyond the threshold (regressions first)."""
    flags = [c.flag(threshold) for c in changes]
    worse, better = flags.count("worse"), flags.count("better")
    limit = 1 + threshold
    prose = [f"{len(changes)} ratios in both: {worse} regression{'' if worse == 1 else 's'} (this run's "
             "ratio over the earlier "
             f"one, now/before, above {limit:.2f}: gpufuncs slower against the anchor), {better} "
             f"improvement{'' if better == 1 else 's'} (below {1 / limit:.2f}), "
             f"{len(changes) - worse - better} within the "
             f"threshold; {unmatched} rows of this run are not there."]
    here, there = _where(meta, baseline.gpu), _where(baseline.meta, baseline.gpu)
    if here != there:
        prose.append(f"Note: those were measured on another machine ({there}; this run: {here}), "
                     "which moves ratios too.")
    prose.append(f"Threshold {threshold:.0%} (--threshold; the default, {THRESHOLD:.0%}, is above the noise "
                 f"of a ratio between runs: {THRESHOLD_WHY}).")
    out = ["", f"Compared with {_shown(baseline.source)} ({machine(baseline.meta, baseline.gpu)}):"]
    out += [line for text in prose for line in textwrap.wrap(text, report.WIDTH, initial_indent="  ",
                                                              subsequent_indent="  ")]
    shown = sorted((c for c in changes if c.flag(threshold) != "same"),
                   key=lambda c: (c.flag(threshold) != "worse", -abs(math.log(c.factor))))
    if shown:
        header = ["", "suite", "kernel", "dtype", "n", "target", "ratio", "before", "now", "now/before"]
        cells = [["REGRESSION" if c.flag(threshold) == "worse" else "improved", c.row["suite"],
                  c.row["kernel"], c.row["dtype"], report.size(c.row["n"]), contender(c.row),
                  ratio_label(c), report.number(c.before), report.number(c.after), report.ratio(c.factor)]
                 for c in shown]
        out += ["  " + line for line in report.aligned(header, cells, 7)]
    return out


def _shown(source: str) -> str:
    """``source`` relative to the working directory where it lies under it."""
    try:
        return str(Path(source).relative_to(Path.cwd()))
    except ValueError:
        return source
