"""``target="auto"`` on host arrays: ``cpu`` or ``parallel``, from this machine's measurements.

A call of ``n`` loop elements costs about ``a + b*n`` on ``cpu`` and ``a' + b'*n`` on
``parallel``, where ``a' > a`` is the cost of starting Numba's threads and ``b' < b`` the work
shared among them. The crossover ``(a' - a) / (b - b')`` depends on the kernel, the dtype, the
number of threads and the machine, so it is measured: the first ``auto`` call of a kernel and
dtype whose size could fall on either side times both flat loops together, at sizes halved
from about a million outputs until ``cpu`` wins (tens of milliseconds, once per process), and
keeps the crossover. Below :data:`ALWAYS_CPU` elements it
picks ``cpu`` without measuring (no machine starts threads that fast). On a machine whose memory
bandwidth one core already saturates, a memory-bound kernel may never gain from threads: its
crossover is then infinite, and ``auto`` stays on ``cpu`` at every size. A measurement that timed
only the wait for threads (see :func:`_measure`) is not kept: the call that made it stays on
``cpu``, its choice is not kept for its call signature, and a later call measures again.

:func:`set_parallel_min_size` (or the environment variable ``GPUFUNCS_AUTO_PARALLEL_MIN_SIZE``)
replaces the measurement with a fixed threshold.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ...spec import KernelSpec
from ..base import HOST, SCALAR, Arg, Plan
from .layers import GUARD
from .loops import MIN_CHUNK

#: Below this many loop elements ``auto`` always picks ``cpu``.
ALWAYS_CPU = 1 << 12

#: A calibration that timed only the wait for threads is not kept (see :func:`_measure`): later
#: calls measure again, at most this often (seconds) and this many times in all.
RETRY_SECONDS = 1.0
MAX_ATTEMPTS = 5

_fixed: int | None = None
_crossovers: dict[tuple[Any, ...], float] = {}
#: Crossovers not kept yet: ``(crossover, attempts, time.monotonic() of the last attempt)``.
_unsettled: dict[tuple[Any, ...], tuple[float, int, float]] = {}
_lock = threading.Lock()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it, measuring, when the fork came


os.register_at_fork(after_in_child=_after_fork)


def set_parallel_min_size(size: int | None) -> None:
    """Run ``auto`` host calls on ``parallel`` from ``size`` loop elements up, for every kernel.

    Parameters
    ----------
    size : int or None
        The threshold; ``None`` goes back to the crossover measured per kernel and dtype.
    """
    global _fixed
    _fixed = None if size is None else int(size)


def parallel_min_size(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any]) -> tuple[float, bool]:
    """The loop size from which ``parallel`` beats ``cpu`` for this kernel and dtype (measured
    once, or the fixed threshold; ``inf`` with one thread, or in a child forked where parallel
    calls run serially: see :mod:`.layers`), and whether it is settled: ``False`` while the
    measurements saw threads that only waited, and a later call may measure again."""
    if _fixed is not None:
        return _fixed, True
    if not GUARD.parallel_usable or numba.get_num_threads() < 2:
        return float("inf"), True
    key = (spec.name, id(spec), plan.loop.dtype, tuple(sorted(plan.core_sizes.items())))
    found = _crossovers.get(key)
    if found is not None:
        return found, True
    with _lock:
        found = _crossovers.get(key)
        if found is not None:
            return found, True
        crossover, attempts, last = _unsettled.get(key, (float("inf"), 0, -float("inf")))
        if attempts and time.monotonic() - last < RETRY_SECONDS:
            return crossover, False
        crossover, waited = _measure(spec, plan, compiled)
        attempts += 1
        if waited and attempts < MAX_ATTEMPTS:
            _unsettled[key] = (crossover, attempts, time.monotonic())
            return crossover, False
        _unsettled.pop(key, None)
        _crossovers[key] = crossover
        return crossover, True


def choose(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any]) -> tuple[str, bool]:
    """``cpu`` or ``parallel`` for a host call of this plan under ``target="auto"``, and whether
    that choice is settled (see :func:`parallel_min_size`)."""
    n = plan.size
    if _fixed is None and n < ALWAYS_CPU:
        return "cpu", True
    crossover, settled = parallel_min_size(spec, plan, compiled)
    return ("parallel" if n >= crossover else "cpu"), settled


def measured_crossovers() -> dict[str, float]:
    """The crossovers measured so far, by ``"kernel dtype"`` (unsettled ones marked so)."""
    settled = {f"{k[0]} {k[2]}": v for k, v in _crossovers.items()}
    return {**settled, **{f"{k[0]} {k[2]} (unsettled)": v[0] for k, v in _unsettled.items()}}


def _measure(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any]) -> tuple[float, bool]:
    """The crossover, from both targets' flat loops timed together on synthetic inputs, and
    whether the parallel times were only the wait for threads.

    They are compared at :data:`_CHECK_OUTPUTS` outputs, then at half the size while
    ``parallel`` wins there, and the crossover is interpolated between the last two sizes, one
    won by each target: between two sizes measured on both sides of it, not extrapolated. (Lines
    through two sizes fitted once gave 1e8 for clamp float32 on the 16-core VM, where parallel
    wins from 1e5, and 1.1e6 for gaussian float32, after one slow parallel sample: ``auto`` then
    took 7.7x ``parallel`` at 1e6.) Where ``cpu`` wins at the first size, the crossover is
    extrapolated from it and a quarter of it (``inf`` where threads never pay). If parallel then
    takes less than twice as long there as at its smallest size, with at least 4x the work, its
    times were the wait for a thread that was not scheduled (the 16-core VM has stretches of
    seconds in which every parallel call takes about 4 ms, even on 10 elements), not the work."""
    first = _first_parallel_size(plan)
    n = max(_CHECK_OUTPUTS // _outputs_per_element(plan), 4 * first)

    def both(n: int) -> dict[str, float]:
        return {t: _time_at(spec, plan, compiled, t, n) for t in ("cpu", "parallel")}

    above = both(n)
    if above["parallel"] >= above["cpu"]:
        # Measured once more, as a losing size below: a verdict that threads never pay is
        # kept for the process (one such, on the 16-core VM, gave gaussian float32 an
        # infinite crossover where parallel is 4x faster at 1e6).
        again = both(n)
        above = {t: min(above[t], again[t]) for t in above}
    if above["parallel"] >= above["cpu"]:
        below = both(n // 4)
        waited = above["parallel"] < 2 * _time_at(spec, plan, compiled, "parallel", first)
        return max(float(n), _crossover(below, above, n // 4, n)), waited
    while n // 2 >= first:
        below = both(n // 2)
        if below["parallel"] >= below["cpu"]:
            # Measured once more before it ends the search: a slow phase of the machine (a
            # thread that waits to be scheduled) can hold a parallel median for a while.
            again = both(n // 2)
            below = {t: min(below[t], again[t]) for t in below}
        if below["parallel"] >= below["cpu"]:
            return min(float(n), max(float(n // 2), _crossover(below, above, n // 2, n))), False
        n, above = n // 2, below
    return float(n), False  # parallel wins down to its first size with two chunks


def _time_at(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any], target: str, n: int) -> float:
    """Seconds of one call of ``target``'s flat loop on ``n`` loop elements (typical of a few).

    The calls write into outputs allocated once. A new output of tens of MB is fresh memory
    from the OS at every call (glibc maps blocks over 32 MB anew), whose page faults, and with
    transparent huge pages the kernel's compaction stalls, made single parallel samples of
    hermite_norm float64 2.5x slower on the 2-core machine: twice in a row, once, and that
    calibration concluded that threads never pay, where they halve the time."""
    from . import CpuTarget  # the targets themselves: the very executors calls would run

    synthetic, args = _synthetic(spec, plan, n)
    execute = CpuTarget(target).prepare(spec, compiled(target), synthetic)
    outs = tuple(np.empty(shape, synthetic.result_dtype) for shape in synthetic.out_shapes)
    return _typical_time(lambda: execute(args, outs, True, None))


#: The search for the crossover starts at this many outputs.
_CHECK_OUTPUTS = 1 << 20


def _crossover(small: dict[str, float], large: dict[str, float], n_small: int, n_large: int) -> float:
    """Where the lines through both targets' times at ``n_small`` and ``n_large`` cross."""
    lines = {}
    for target in small:
        slope = (large[target] - small[target]) / (n_large - n_small)
        lines[target] = (small[target] - slope * n_small, slope)
    (a, b), (a_par, b_par) = lines["cpu"], lines["parallel"]
    if b_par >= b:
        return float("inf")
    return max(float(ALWAYS_CPU), (a_par - a) / (b - b_par))


def _first_parallel_size(plan: Plan) -> int:
    """Loop elements from which the parallel loops cut two chunks or more (see
    :func:`.loops.chunks`). Below, they run one chunk on one thread, never faster than ``cpu``;
    measured there, a parallel time would also bend the fitted line (gaussian float64 on 16
    cores: a crossover of 1e4, where parallel took 1.3x cpu)."""
    return 2 * max(1, MIN_CHUNK // _outputs_per_element(plan))


def _outputs_per_element(plan: Plan) -> int:
    """Outputs a loop element writes (a gufunc's output core sizes)."""
    loop = max(1, int(np.prod(plan.loop_shape)))
    return max(1, sum(int(np.prod(shape)) for shape in plan.out_shapes) // loop)


def _typical_time(run: Callable[[], Any], repeat: int = 7) -> float:
    """The median of ``repeat`` calls after one. Not the best: starting 16 threads now and then
    takes little, typically much more, and crossovers fitted to best times put ``auto`` on
    ``parallel`` where it is usually slower (exp float64 at 1e4 on 16 cores: 1.3x ``cpu``)."""
    run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _synthetic(spec: KernelSpec, plan: Plan, n: int) -> tuple[Plan, tuple[Any, ...]]:
    """A plan of ``n`` loop elements like ``plan`` (contiguous arrays, scalars where it has
    scalars), and arguments for it inside the kernel's declared domains."""
    dtype = plan.loop.dtype
    infos, args = [], []
    for name, arg, core in zip(spec.input_names, plan.inputs, plan.cores):
        low, high = spec.domains.get(name, (-1.0, 1.0))
        low, high = max(low, -1.0), min(high, 1.0)
        if not arg.is_array and not core:
            value = (low + high) / 2 or 0.5
            infos.append(Arg(SCALAR, float, float))
            args.append(float(value))
            continue
        shape = (n, *arg.shape[len(arg.shape) - core:]) if core else (n,)
        values = np.linspace(low, high, int(np.prod(shape)), dtype=dtype).reshape(shape)
        infos.append(Arg(HOST, np.ndarray, dtype, values.shape, values.strides))
        args.append(values)
    cores = plan.cores[spec.nin:]
    out_shapes = tuple((n, *shape[len(shape) - core:]) for shape, core in zip(plan.out_shapes, cores))
    synthetic = Plan(loop=plan.loop, result_dtype=dtype, loop_shape=(n,), out_shapes=out_shapes,
                     core_sizes=plan.core_sizes, inputs=tuple(infos), cores=plan.cores)
    return synthetic, tuple(args)


def fixed_from_environment() -> None:
    """Apply ``GPUFUNCS_AUTO_PARALLEL_MIN_SIZE`` if it is set (an integer)."""
    value = os.environ.get("GPUFUNCS_AUTO_PARALLEL_MIN_SIZE")
    if value:
        set_parallel_min_size(int(value))


fixed_from_environment()
