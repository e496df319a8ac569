"""``target="auto"`` on host arrays: ``cpu`` or ``parallel``, from this machine's measurements.

A call of ``n`` loop elements costs about ``a + b*n`` on ``cpu`` and ``a' + b'*n`` on
``parallel``, where ``a' > a`` is the cost of starting Numba's threads and ``b' < b`` the work
shared among them. The crossover ``(a' - a) / (b - b')`` depends on the kernel, the dtype, the
number of threads and the machine, so it is measured: the first ``auto`` call of a kernel and
dtype whose size could fall on either side times both flat loops at two sizes (a few
milliseconds, once per process) and keeps the crossover. Below :data:`ALWAYS_CPU` elements it
picks ``cpu`` without measuring (no machine starts threads that fast). On a machine whose memory
bandwidth one core already saturates, a memory-bound kernel may never gain from threads: its
crossover is then infinite, and ``auto`` stays on ``cpu`` at every size.

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
#: The two calibration sizes (loop elements).
_SIZES = (1 << 13, 1 << 17)

_fixed: int | None = None
_crossovers: dict[tuple[Any, ...], float] = {}
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


def parallel_min_size(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any]) -> float:
    """The loop size from which ``parallel`` beats ``cpu`` for this kernel and dtype (measured
    once, or the fixed threshold; ``inf`` with one thread, or in a child forked where parallel
    calls run serially: see :mod:`.layers`)."""
    if _fixed is not None:
        return _fixed
    if not GUARD.parallel_usable or numba.get_num_threads() < 2:
        return float("inf")
    key = (spec.name, id(spec), plan.loop.dtype, tuple(sorted(plan.core_sizes.items())))
    found = _crossovers.get(key)
    if found is None:
        with _lock:
            found = _crossovers.get(key)
            if found is None:
                found = _crossovers[key] = _measure(spec, plan, compiled)
    return found


def choose(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any]) -> str:
    """``cpu`` or ``parallel`` for a host call of this plan under ``target="auto"``."""
    n = plan.size
    if _fixed is None and n < ALWAYS_CPU:
        return "cpu"
    return "parallel" if n >= parallel_min_size(spec, plan, compiled) else "cpu"


def _measure(spec: KernelSpec, plan: Plan, compiled: Callable[[str], Any]) -> float:
    """Time both targets' flat loops at two sizes on synthetic inputs; the crossover.

    A crossover past the larger size is an extrapolation, and the slopes of a cheap kernel
    differ by little there: one slow sample can push it out by orders of magnitude (measured:
    1e8 for clamp float32 on 16 cores, where parallel wins from 1e5). It is checked at a size
    :data:`_CHECK_OUTPUTS` outputs large, and refitted from there where parallel wins."""
    first = _first_parallel_size(plan)
    small = max(_SIZES[0], first)
    large = max(_SIZES[1], 4 * small)
    times = {t: (_time_at(spec, plan, compiled, t, small), _time_at(spec, plan, compiled, t, large))
             for t in ("cpu", "parallel")}
    crossover = max(first, _crossover(times, small, large))
    if crossover > large:
        check = max(2 * large, _CHECK_OUTPUTS // _outputs_per_element(plan))
        checked = {t: (times[t][0], _time_at(spec, plan, compiled, t, check)) for t in times}
        if checked["parallel"][1] < checked["cpu"][1]:
            crossover = min(check, _crossover(checked, small, check))
    return crossover


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


#: The check of an extrapolated crossover runs both targets on this many outputs.
_CHECK_OUTPUTS = 1 << 21


def _crossover(times: dict[str, tuple[float, float]], small: int, large: int) -> float:
    """Where the lines through both targets' times at ``small`` and ``large`` cross."""
    lines = {}
    for target, (t_small, t_large) in times.items():
        slope = (t_large - t_small) / (large - small)
        lines[target] = (t_small - slope * small, slope)
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
