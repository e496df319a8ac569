"""What ``python -m benchmarks`` prints: a table of times per call and ratios, and the targets.

The table has one line per measurement (:mod:`rows`), as pytest-benchmark and asv print one per
benchmark: gpufuncs' time per call, each anchor's time measured in the same run, and the ratio
of the two (gpufuncs over the anchor: below 1, gpufuncs is faster). Each time is written in the
unit that suits it (ns, µs, ms, s), as asv writes them.
"""

from __future__ import annotations

import re
import sys
import textwrap
from typing import Any

Row = dict[str, Any]

#: Ratio column -> (the anchor's label, the time of gpufuncs it divides: ``None``: the row's
#: own mode, pipelined where the row has a pipelined time, as the GPU's ``x_numba``).
ANCHORS: dict[str, tuple[str, str | None]] = {
    "x_numpy": ("numpy", "median_s"), "x_scipy": ("scipy", "median_s"), "x_numba": ("numba", None),
    "x_copy": ("copy", "median_s"), "x_cupy": ("cupy", "median_s"),
    "x_copy_pipelined": ("copy", "pipelined_s"), "x_cupy_pipelined": ("cupy", "pipelined_s"),
    "x_pinned": ("pinned", "pipelined_s")}
#: What each anchor is, for the line under the tables.
ANCHOR_MEANING = {
    "numpy": "the kernel's NumPy expression", "scipy": "its SciPy function",
    "numba": "Numba's own ufunc of the kernel, called directly",
    "copy": "a copy of the same bytes (np.copyto on one thread; on the GPU a device copy)",
    "cupy": "CuPy's ElementwiseKernel of the same formula",
    "pinned": "a pinned host-to-device and back copy of the same bytes"}
MODES = {"median_s": "median time per call", "pipelined_s": "pipelined: calls back to back, one "
         "synchronize, time per call"}
#: The median mode of rows that have a pipelined one too (the GPU's).
SYNCED = "one call and a synchronize, median time per call"
MISSING = "-"
WIDTH = 100  # of the lines of prose
#: What a target is, printed above the verdicts.
TARGETS_MEANING = (
    "Targets: a target is the goal one figure of this run is held to, set by the project's issues; "
    "most are a ratio of gpufuncs' time over an anchor's (\"<= 1.25\": at most 1.25 times the "
    "anchor's time), a few are seconds or speed-ups, as named. MET: this run's figure is within "
    "the goal; NOT MET: it is not.")
VERDICT = re.compile(r"(?P<value>\S+) \((?P<goal>(?:<=|>=) [^)]+)\) (?P<verdict>met|NOT MET)"
                     r"(?: \[(?P<note>[^\]]*)\])?")


def seconds(value: float | None) -> str:
    """``value`` seconds in the unit that suits it, three significant digits: ``812 ns``,
    ``1.21 µs``, ``15.3 ms``, ``2.05 s``."""
    if value is None:
        return MISSING
    micro = "µs" if _can_write("µ") else "us"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), (micro, 1e-6), ("ns", 1e-9)):
        if value >= 0.9995 * scale or unit == "ns":
            return f"{_digits(value / scale)} {unit}"
    raise AssertionError("unreachable")


def _digits(value: float) -> str:
    return f"{value:.0f}" if value >= 99.95 else f"{value:.1f}" if value >= 9.995 else f"{value:.2f}"


def _can_write(text: str) -> bool:
    """Whether stdout's encoding writes ``text`` (a C-locale terminal may not write ``µ``)."""
    try:
        text.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def size(n: int) -> str:
    """``n`` as people write sizes: ``10``, ``1e4``, ``3e5``."""
    if n < 1000:
        return str(n)
    mantissa, exponent = f"{n:.2g}".split("e+")
    return f"{mantissa}e{int(exponent)}"


def ratio(value: float | None) -> str:
    """``value`` as a ratio, to a hundredth below 10 (``0.87x``), to three digits or more above."""
    if value is None:
        return MISSING
    return f"{value:.2f}x" if value < 9.995 else f"{value:.1f}x" if value < 99.95 else f"{value:.0f}x"


def number(value: float) -> str:
    """``value`` to three significant digits and no exponent (``0.0408``, ``5.56``, ``55580``)."""
    return _digits(value) if value >= 0.9995 else f"{value:.3g}"


def anchor_mode(key: str, row: Row) -> str:
    """The time of gpufuncs that the ratio ``key`` of ``row`` divides by the anchor's."""
    mode = ANCHORS[key][1]
    return mode or ("pipelined_s" if row.get("pipelined_s") is not None else "median_s")


def aligned(header: list[str], cells: list[list[str]], left: int) -> list[str]:
    """Lines of a table: the first ``left`` columns flush left (names), the rest flush right
    (numbers)."""
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(header)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if i < left else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    return [line(header), *(line(values) for values in cells)]


def suite_tables(rows: list[Row]) -> list[str]:
    """Every suite's table (one per timing mode), in the order the suites ran."""
    lines: list[str] = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        picked = [r for r in rows if r["suite"] == suite]
        for mode in ("median_s", "pipelined_s"):
            if any(r.get(mode) is not None for r in picked):
                lines += ["", *table(suite, picked, mode)]
    if lines:
        used = {ANCHORS[k][0] for r in rows for k in ANCHORS if r.get(k) is not None}
        lines += ["", *textwrap.wrap("Anchors: " + "; ".join(
            f"{label}: {ANCHOR_MEANING[label]}" for label in ANCHOR_MEANING if label in used) + ".", WIDTH)]
    return lines


def table(suite: str, rows: list[Row], mode: str) -> list[str]:
    """One suite's table in one timing mode: a title, a header and a line per row."""
    names = [c for c in ("kernel", "dtype", "n", "target", "data", "call")
             if c in ("kernel", "dtype", "n") or len({r[c] for r in rows}) > 1]
    same = ", ".join(f"{c} {rows[0][c]}" for c in ("target", "data", "call") if c not in names)
    anchors = [key for key in ANCHORS
               if any(r.get(key) is not None and anchor_mode(key, r) == mode for r in rows)]
    header = [*names, "gpufuncs"]
    for key in anchors:
        label = ANCHORS[key][0]
        header += [label, f"/{label}"]
    cells = []
    for r in rows:
        line = [size(r[c]) if c == "n" else str(r[c]) for c in names] + [seconds(r.get(mode))]
        for key in anchors:
            value = r.get(key) if anchor_mode(key, r) == mode else None
            line += [seconds(r[mode] / value) if value and r.get(mode) else MISSING, ratio(value)]
        cells.append(line)
    synced = mode == "median_s" and any(r.get("pipelined_s") is not None for r in rows)
    title = f"{suite}: {SYNCED if synced else MODES[mode]}" + (f" ({same})" if same else "")
    if anchors:
        title += "; /anchor: gpufuncs' time over the anchor's (below 1: gpufuncs is faster)"
    return [title, *aligned(header, cells, len(names))]


def verdicts(meta: Row) -> list[tuple[str, str, str, str]]:
    """(MET or NOT MET, what, this run's figure, the goal and its note) of every target in
    ``meta``: its values ``<figure> (<= goal) met [note]``, or list entries ``what: <that>``."""
    found = []
    for key, value in meta.items():
        for entry in value if isinstance(value, list) else [value]:
            if not isinstance(entry, str):
                continue
            match = VERDICT.search(entry)
            if not match or match.end() != len(entry):
                continue
            what = key if not isinstance(value, list) else entry[: match.start()].rstrip(": ")
            goal = f"target {match['goal']}" + (f" [{match['note']}]" if match["note"] else "")
            found.append(("MET" if match["verdict"] == "met" else "NOT MET", what, match["value"], goal))
    return found


def verdict_lines(meta: Row, quick: bool = False) -> list[str]:
    """The line saying what a target is, then a line per target of this run."""
    found = verdicts(meta)
    if not found:
        return []
    caveat = (" This was a --quick run (fewer repetitions): its verdicts are a first look, noisier "
              "than a full run's.") if quick else ""
    width = max(len(what) for _, what, _, _ in found)
    return ["", *textwrap.wrap(TARGETS_MEANING + caveat, WIDTH),
            *(f"  {state:<7}  {what.ljust(width)}  {value:>6}  {goal}" for state, what, value, goal in found)]
