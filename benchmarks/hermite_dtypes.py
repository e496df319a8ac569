"""Why ``hermite_norm`` in float64 takes longer than in float32 (issue 32's row), on the host.

For 32 orders of 10^6 samples, on ``cpu`` and ``parallel``, the call's time (ms, median of 9)
with ``out=`` given and with a fresh output, for float32 and float64; then, for scale, the time
to copy into an output of that size and to fill a fresh one (its first touch: page faults in
proportion to its bytes). Where the kernel's own time (``out=`` given) is the same in both
dtypes, what float64 adds is the output's bytes. Diagnostic only: nothing is saved. Run:
``python -m benchmarks.hermite_dtypes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import gpufuncs as gf

from .harness import measure

SAMPLES, ORDERS = 10**6, 32


def _ms(call: Callable[[], Any], repeat: int = 9) -> float:
    """Median milliseconds of ``call`` (one call a repetition, after one to warm it up)."""
    return measure(call, warmup=1, repeat=repeat, inner=1) * 1e3


def main() -> None:
    """Print the table (see the module docstring)."""
    found: dict[tuple[str, str, str], float] = {}
    for dtype in (np.float32, np.float64):
        x = np.random.default_rng(0).uniform(-5, 5, SAMPLES).astype(dtype)
        out = np.empty((SAMPLES, ORDERS), dtype)
        for target in ("cpu", "parallel"):
            found[dtype.__name__, target, "fresh"] = _ms(lambda: gf.hermite_norm(x, ORDERS, target=target))  # noqa: B023
            found[dtype.__name__, target, "out="] = _ms(
                lambda: gf.hermite_norm(x, ORDERS, out=out, target=target))  # noqa: B023
    print(f"hermite_norm, {ORDERS} orders of {SAMPLES:.0e} samples, ms (median of 9)")
    for target in ("cpu", "parallel"):
        for output in ("out=", "fresh"):
            single, double = found["float32", target, output], found["float64", target, output]
            print(f"  {target:9s} {output:6s} float32 {single:7.2f}  float64 {double:7.2f}  "
                  f"ratio {double / single:.2f}")
    for dtype in (np.float32, np.float64):
        source, into = np.ones((SAMPLES, ORDERS), dtype), np.empty((SAMPLES, ORDERS), dtype)
        copy = _ms(lambda: np.copyto(into, source), 7)  # noqa: B023
        fill = _ms(lambda: np.empty((SAMPLES, ORDERS), dtype).fill(0), 7)  # noqa: B023
        print(f"  {dtype.__name__}: copy into an output {copy:.2f}, fill a fresh output {fill:.2f}")


if __name__ == "__main__":
    main()
