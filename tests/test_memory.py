"""Peak memory of a host call: its new outputs plus a small constant, at 10^7 elements.

Broadcast inputs are never materialized, ``out=`` calls allocate nothing the size of the data,
and results that go through a buffer (a mask that broadcasts, a reversed ``out``, a float16
gufunc result) are computed block by block. Measured with tracemalloc (every NumPy allocation)
and, where Linux lets a process reset its peak, with the peak resident set size (everything,
Numba's threads included).
"""

from __future__ import annotations

import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import compare

N = 10**7
#: What a call may allocate beyond its new outputs (blocks of 2^18 elements, NumPy's buffers).
CONSTANT = 8 << 20
#: The same for the resident set, which also counts Numba's thread stacks and page rounding.
RSS_CONSTANT = 24 << 20
TARGETS = ("cpu", "parallel")


class Data:
    """The arrays the cases share (about 350 MB in all), made once per module."""

    def __init__(self) -> None:
        rng = np.random.default_rng(10)
        self.x = rng.normal(scale=2.0, size=N)
        self.x32 = self.x.astype(np.float32)
        # (100, 1) against (1, 10^5): 10^7 results (long rows: Numba's parallel ufunc starts
        # its threads once per row, which takes seconds for thousands of short rows).
        self.col = self.x[:100, None].copy()
        self.row = self.x[None, 100: 100 + 10**5].copy()
        self.out = np.empty(N)
        self.grid = np.empty((100, 10**5))
        self.every_other = np.arange(10**5) % 2 == 0  # a mask that broadcasts over the grid
        self.h = self.x[: N // 10].copy()  # hermite_norm(h, 10): 10^7 results
        self.h16 = (self.h / 4).astype(np.float16)  # every result within float16's range
        self.h_out = np.empty((N // 10, 10))
        self.h_mask = rng.random(N // 10) < 0.5


@pytest.fixture(scope="module")
def data() -> Data:
    return Data()


def _check_exp(d: Data, result: np.ndarray, x: np.ndarray) -> None:
    compare(gf.exp, (x[::997],), result[::997])


def _check_grid(d: Data, result: np.ndarray, where: np.ndarray | slice = slice(None)) -> None:
    np.testing.assert_array_equal(result[:, where], np.clip(d.col, -0.5, d.row[:, where]))


def _check_hermite(d: Data, result: np.ndarray, h: np.ndarray, rows: np.ndarray | slice) -> None:
    compare(gf.hermite_norm, (h[rows], 10), result[rows])


# name: (call(data, target) -> result, check(data, result), new output bytes)
CASES: dict[str, tuple[Callable, Callable, int]] = {
    "exp": (lambda d, t: gf.exp(d.x, target=t), lambda d, r: _check_exp(d, r, d.x), 8 * N),
    "gaussian float32, scalars": (
        lambda d, t: gf.gaussian(d.x32, 0.5, 2.0, target=t),
        lambda d, r: compare(gf.gaussian, (d.x32[::997], 0.5, 2.0), r[::997]), 4 * N),
    "clamp broadcast": (lambda d, t: gf.clamp(d.col, -0.5, d.row, target=t), _check_grid, 8 * N),
    "clamp in place": (
        lambda d, t: gf.clamp(np.copyto(d.out, d.x) or d.out, -1.0, 1.0, out=d.out, target=t),
        lambda d, r: np.testing.assert_array_equal(r, np.clip(d.x, -1.0, 1.0)), 0),
    "clamp out=, mask that broadcasts": (
        lambda d, t: gf.clamp(d.col, -0.5, d.row, out=d.grid, where=d.every_other, target=t),
        lambda d, r: _check_grid(d, r, d.every_other), 0),
    "clamp into a reversed out=": (
        lambda d, t: gf.clamp(d.x, -1.0, 1.0, out=d.out[::-1], target=t),
        lambda d, r: np.testing.assert_array_equal(r, np.clip(d.x, -1.0, 1.0)), 0),
    "hermite_norm": (
        lambda d, t: gf.hermite_norm(d.h, 10, target=t),
        lambda d, r: _check_hermite(d, r, d.h, slice(None, None, 997)), 8 * N),
    "hermite_norm out=, where=": (
        lambda d, t: gf.hermite_norm(d.h, 10, out=d.h_out, where=d.h_mask, target=t),
        lambda d, r: _check_hermite(d, r, d.h, d.h_mask), 0),
    "hermite_norm float16": (
        lambda d, t: gf.hermite_norm(d.h16, 10, target=t),
        lambda d, r: compare(gf.hermite_norm, (d.h16[::997], 10), r[::997]), 2 * N),
}


def _traced_peak(run: Callable[[], object]) -> tuple[object, int]:
    """``run()``'s result and the most memory NumPy (and Python) held for it at once."""
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _warm(run: Callable[[], object]) -> None:
    """A first call of the same signature: compiling allocates, and is not what is measured."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the masked call's "where without out" cases
        run()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_peak_memory_is_the_new_outputs_plus_a_constant(case, target, data):
    call, check, new_bytes = CASES[case]
    _warm(lambda: call(data, target))
    result, peak = _traced_peak(lambda: call(data, target))
    assert peak <= new_bytes + CONSTANT, \
        f"{case} on {target}: {peak / 2**20:.1f} MiB at peak for {new_bytes / 2**20:.1f} MiB of new output"
    check(data, result)


# -- the resident set: everything the process touched -------------------------------------------
_STATUS = Path("/proc/self/status")


def _status(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak_rss() -> str | None:
    """Reset the kernel's record of this process's peak RSS; why not, if it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as exc:
        return f"cannot reset the peak RSS here (Linux /proc/self/clear_refs): {exc}"
    return None


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["exp", "clamp broadcast", "hermite_norm"])
def test_peak_resident_memory_is_the_new_outputs_plus_a_constant(case, target, data):
    call, check, new_bytes = CASES[case]
    _warm(lambda: call(data, target))
    why_not = _reset_peak_rss()
    if why_not:
        pytest.skip(why_not)
    before = _status("VmRSS")
    result = call(data, target)
    grown = _status("VmHWM") - before
    assert grown <= new_bytes + RSS_CONSTANT, \
        f"{case} on {target}: resident set grew {grown / 2**20:.1f} MiB for {new_bytes / 2**20:.1f} MiB"
    check(data, result)
