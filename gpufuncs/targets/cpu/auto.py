"""``target="auto"`` on host arrays: ``cpu`` or ``parallel``, learned from the caller's own calls.

A call of ``n`` loop elements costs about ``a + b*n`` on ``cpu`` and ``a' + b'*n`` on
``parallel``, where ``a' > a`` is the cost of starting Numba's threads and ``b' < b`` the work
shared among them; ``parallel`` wins from the crossover ``(a' - a) / (b - b')``. ``auto`` never
runs a user's kernel on values the caller did not pass (a kernel may hang, raise or take seconds
on values its caller never has), so it learns the two halves of that formula apart:

* ``a`` and ``a'`` are the machine's: the time of a call of the library's own copy kernel
  (:data:`gpufuncs.spec.IDENTITY`) on a few elements of library-made data, on each target, and
  on ``parallel`` the cost of starting Numba's threads for a loop of two chunks (a call of
  one chunk, such as that one, runs on the caller's thread). They are measured once per
  machine (about 50 ms, and the compilation of the two-chunk loop), when a kernel first
  needs them.
* ``b`` and ``b'`` are the kernel's, per loop dtype and core sizes, learned from the calls the
  caller makes: a call of :data:`ALWAYS_CPU` elements or more that ``auto`` cannot decide yet
  runs as the caller asked it to run, timed. First :data:`SAMPLES` calls on ``cpu``, which is
  always what ``target="cpu"`` would do; then, knowing ``b``, calls large enough that threads
  could win even if they shared the work perfectly (``b' = b / threads``) run on ``parallel``
  until ``b'`` is known too (each such call can lose at most about the thread start ``a' - a``
  against ``cpu``). Where threads lost on calls many times larger than those ``b`` was learned
  on (:data:`SIZE_CLASS`), ``b`` is learned again on calls of their size: a memory-bound kernel
  costs more per element out of cache. The crossover is then settled and nothing is timed any
  more.

Every resolved ``auto`` call (see :class:`AutoTarget`) reads the decision per call, one attribute
of its kernel's :class:`Learned` state, so it is cached from its first call, and every
calibration lives on the :class:`AutoTarget` object that dispatch holds. What was learned is
kept on disk, in one small JSON file per machine (CPU model, cores, Numba threads, Numba version)
in ``GPUFUNCS_CACHE_DIR``, else ``NUMBA_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpufuncs`` or
``~/.cache/gpufuncs``; a kernel's entries are keyed by its disk-cache key (its code and what it
depends on), so a new process measures nothing. A file that cannot be read or written only means
measuring again: it never fails a call. Kernels without a source file (a REPL) learn per process.

Below :data:`ALWAYS_CPU` elements ``auto`` runs ``cpu`` (no machine starts threads that fast).
With one thread, or in a forked child whose parallel calls run serially (see :mod:`.layers`),
``auto`` stays on ``cpu``. On a machine whose memory bandwidth one core already saturates, a
memory-bound kernel may never gain from threads: its crossover is then infinite.

:meth:`AutoTarget.set_parallel_min_size` (``gf.set_auto_parallel_min_size``, or the environment
variable ``GPUFUNCS_AUTO_PARALLEL_MIN_SIZE``) replaces what was learned with a fixed threshold,
at once for every call of :data:`ALWAYS_CPU` elements or more; a smaller call signature keeps
the target it was first resolved with.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import statistics
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np

from ...spec import IDENTITY, KernelSpec
from ..base import HOST, Arg, Executor, Plan, Target
from .layers import GUARD
from .loops import MIN_CHUNK

#: Below this many loop elements ``auto`` always picks ``cpu``.
ALWAYS_CPU = 1 << 12

#: Timed calls per target before a kernel's cost per element on it is known (their median).
SAMPLES = 3

#: A thread start measured slower than this (seconds) is kept for this process only, not on
#: disk: on an overloaded machine (or in a stretch where a thread waits for a core) every
#: parallel call can take milliseconds, and a later process should not inherit that.
IMPLAUSIBLE_START = 2e-3

#: A kernel's cost per element on ``parallel`` over this many times its cost on ``cpu`` is kept
#: for this process only, not on disk, and one read from the disk is learned again: the same
#: loop cut into chunks is not that much slower by itself, so its threads were waiting for
#: cores (two test workers on two cores made hermite_norm's parallel calls 45x slower than
#: cpu's, and every later process on that machine kept it on cpu, 1.85x slower than parallel).
IMPLAUSIBLE_LOSS = 4.0

#: Calls of this many loop elements or more are tried on ``parallel`` while ``auto`` learns,
#: whatever the thread start measured on the proxy says (one measured in a slow stretch of
#: the machine, 2 ms on the 16-core host, put every crossover in the millions); a call that
#: then beats ``cpu`` sets the crossover at most at its size.
TRY_FROM = 1 << 18

#: Where threads lost at every size the caller's calls had, calls of 4x the largest of those
#: run on ``parallel``, unless that size was already this many loop elements or more.
LARGE = 1 << 24

#: Threads that lost at calls this many times larger than those ``cpu``'s cost was learned on are
#: compared again with ``cpu`` timed on calls of about their size: a memory-bound kernel costs
#: several times more per element out of cache (10^6) than in it (10^4), so its threads can lose
#: to a cost ``cpu`` does not have there (clamp float64 stayed on cpu at 10^6 on 2 cores, 1.9x
#: slower than parallel).
SIZE_CLASS = 8

#: Version of the file format; another version is ignored (and replaced on the next write).
#: 2: files of 1 may hold implausible losses with no cpu cost (see _compare_at_one_size), and
#: their costs per element predate the loops' interleaving (see loops.interleaved).
FORMAT = 2

_INF = float("inf")

#: The call sizes of a :class:`Learned` kept on disk with its costs.
_SIZES_KEPT = ("parallel_n", "won_at", "cpu_n", "cpu_from")


class Learned:
    """What ``auto`` knows of one kernel in one loop dtype (and core sizes).

    ``cpu_below`` and ``parallel_from`` are what every call reads: calls of fewer loop elements
    than ``cpu_below`` run on ``cpu``, of ``parallel_from`` or more on ``parallel``, and the ones
    between are timed to learn (equal once settled). ``cpu`` and ``parallel`` hold the seconds
    per loop element measured on each target, from the caller's calls or the disk.
    """

    __slots__ = ("cpu", "cpu_below", "cpu_from", "cpu_n", "disk_key", "first", "name", "parallel",
                 "parallel_from", "parallel_n", "won_at")

    def __init__(self, name: str, disk_key: str | None, first: int) -> None:
        self.name, self.disk_key, self.first = name, disk_key, first
        self.cpu: list[float] = []
        self.parallel: list[float] = []
        self.cpu_below, self.parallel_from = 0.0, _INF
        self.parallel_n = 0  # the largest call timed on parallel
        self.cpu_n = 0  # the largest call timed on cpu (0: unknown)
        self.cpu_from = 0  # calls timed on cpu count from this size (see SIZE_CLASS)
        self.won_at = 0  # the smallest call timed on parallel that beat cpu's time for it

    def cost(self, target: str) -> float | None:
        """Seconds per loop element on ``target`` (the median of the samples), if known."""
        samples = self.cpu if target == "cpu" else self.parallel
        return statistics.median(samples) if len(samples) >= SAMPLES else None


class AutoTarget:
    """``target="auto"`` for host arrays: the executors that pick ``cpu`` or ``parallel`` per
    call, and everything they learned (see the module docstring).

    Parameters
    ----------
    cpu, parallel : Target
        The targets it chooses between.
    directory : path, optional
        Where the learned state is kept; by default the per-user cache directory.
    """

    def __init__(self, cpu: Target, parallel: Target, directory: str | os.PathLike | None = None) -> None:
        self.targets = {"cpu": cpu, "parallel": parallel}
        self.fixed: int | None = None
        self._directory = None if directory is None else Path(directory)
        #: ``{"cpu": a, "parallel": a'}``: seconds of a call with (almost) no work on each.
        self.start: dict[str, float] | None = None
        self._learned: weakref.WeakKeyDictionary[KernelSpec, dict[Any, Learned]] = weakref.WeakKeyDictionary()
        self._disk: dict[str, Any] | None = None  # the file's entries, read once
        self._proxy: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._hooked = False
        #: Calls timed on each target, for tests and curious users.
        self.timed = {"cpu": 0, "parallel": 0}
        value = os.environ.get("GPUFUNCS_AUTO_PARALLEL_MIN_SIZE")
        if value:
            self.set_parallel_min_size(int(value))

    # -- the decision ------------------------------------------------------------------------
    def choose(self, spec: KernelSpec, plan: Plan,
               compiled: Callable[[str], Any]) -> tuple[str, Executor | None]:
        """The target for a flat host call of ``plan``: ``("cpu", None)`` for a call that always
        runs on ``cpu`` (dispatch prepares it), else ``("auto", executor)``, an executor that
        picks per call; ``compiled(target)`` gives the kernel's compiled object for a target."""
        n = plan.size
        if n < ALWAYS_CPU and (self.fixed is None or n < self.fixed):
            return "cpu", None
        if not self._hooked:  # the first call that may run parallel
            self._hooked = True
            os.register_at_fork(after_in_child=self._after_fork)
        return "auto", self._switching(self._state(spec, plan), n, spec, plan, compiled)

    def _switching(self, learned: Learned, n: int, spec: KernelSpec, plan: Plan,
                   compiled: Callable[[str], Any]) -> Executor:
        """The executor of one call signature: ``cpu``'s or ``parallel``'s (each prepared when
        first needed), as ``learned`` says, or timed while it cannot say yet."""
        prepared: dict[str, Executor] = {}

        def executor(target: str) -> Executor:
            found = prepared.get(target)
            if found is None:
                found = prepared[target] = self.targets[target].prepare(spec, compiled(target), plan)
            return found

        def execute(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
            if n < learned.cpu_below:
                return (prepared.get("cpu") or executor("cpu"))(inputs, outs, where, stream)
            if n >= learned.parallel_from:
                return executor("parallel")(inputs, outs, where, stream)
            return self._learn(learned, n, executor, (inputs, outs, where, stream))

        return execute

    def _learn(self, learned: Learned, n: int, executor: Callable[[str], Executor],
               args: tuple[Any, Any, Any, Any]) -> tuple[Any, ...]:
        """Run the call on the target ``learned`` still needs samples of, and time it."""
        if len(learned.cpu) < SAMPLES:
            target = "cpu"
        else:
            target = "parallel" if n >= learned.cpu_below else "cpu"  # settled meanwhile?
            if target == "cpu" or n >= learned.parallel_from:
                return executor(target)(*args)
        run = executor(target)
        begin = time.perf_counter()
        result = run(*args)
        self._record(learned, target, n, time.perf_counter() - begin)
        return result

    def _record(self, learned: Learned, target: str, n: int, seconds: float) -> None:
        with self._lock:
            samples = learned.cpu if target == "cpu" else learned.parallel
            if len(samples) >= SAMPLES or not GUARD.parallel_usable:
                return  # enough already (another thread's), or threads that run serially
            if target == "cpu" and n < learned.cpu_from:
                return  # cpu is being timed again at the size threads were (see SIZE_CLASS)
            start = self._machine()
            samples.append(max(seconds - start[target], 0.0) / n)
            if target == "cpu":
                learned.cpu_n = max(learned.cpu_n, n)
            else:
                learned.parallel_n = max(learned.parallel_n, n)
                cpu = learned.cost("cpu")
                if cpu is not None and seconds < start["cpu"] + cpu * n:
                    learned.won_at = min(learned.won_at or n, n)
                if len(samples) == SAMPLES:
                    _compare_at_one_size(learned)
            self.timed[target] += 1
            self._decide(learned)
            if len(samples) == SAMPLES:
                self._save(learned)

    def _decide(self, learned: Learned) -> None:
        """Set ``learned``'s thresholds from what is known now."""
        if self.fixed is not None:
            learned.cpu_below = learned.parallel_from = self.fixed
            return
        threads = numba.get_num_threads()
        if not GUARD.parallel_usable or threads < 2:
            learned.cpu_below = learned.parallel_from = _INF
            return
        cpu, parallel = learned.cost("cpu"), learned.cost("parallel")
        if cpu is None or self.start is None:
            learned.cpu_below, learned.parallel_from = 0.0, _INF  # every call timed, on cpu
            return
        if parallel is None:  # time parallel where perfectly shared work could already win
            optimistic = min(self._crossover(learned, cpu, cpu / threads), max(TRY_FROM, learned.first))
            learned.cpu_below, learned.parallel_from = optimistic, _INF
            return
        crossover = self._crossover(learned, cpu, parallel)
        if learned.won_at:  # the caller's own calls showed threads winning there
            crossover = min(crossover, max(float(learned.first), float(learned.won_at)))
        elif parallel >= cpu and 0 < learned.parallel_n < LARGE:
            # Threads lost at the sizes the caller's calls had: that says little of calls many
            # times larger (samples of a few small calls once made hermite_norm float32 stay on
            # cpu at 10^6 on the 16-core host, 9.7x slower than parallel there). Calls of 4x
            # the largest tried run on parallel; only a loss at LARGE means threads never pay.
            crossover = 4.0 * learned.parallel_n
        learned.cpu_below = learned.parallel_from = crossover

    def _crossover(self, learned: Learned, cpu: float, parallel: float) -> float:
        """Where ``a + cpu*n`` meets ``a' + parallel*n``: never below the first size that the
        parallel loops cut into two chunks (below, one thread runs it all)."""
        if parallel >= cpu:
            return _INF
        assert self.start is not None
        start = max(self.start["parallel"] - self.start["cpu"], 0.0)
        return max(float(learned.first), float(ALWAYS_CPU), start / (cpu - parallel))

    def _state(self, spec: KernelSpec, plan: Plan) -> Learned:
        loop = plan.loop.compiled  # its dtype where it has one ("float64"), else its types
        key = (loop.dtype or loop.types, tuple(sorted(plan.core_sizes.items())))
        with self._lock:
            states = self._learned.setdefault(spec, {})
            found = states.get(key)
            if found is None:
                found = states[key] = Learned(spec.name, _disk_key(spec, key), _first_parallel_size(plan))
                self._load(found)
                self._decide(found)
            return found

    def set_parallel_min_size(self, size: int | None) -> None:
        """See :func:`gpufuncs.set_auto_parallel_min_size`."""
        with self._lock:
            self.fixed = None if size is None else int(size)
            for states in list(self._learned.values()):
                for learned in states.values():
                    self._decide(learned)

    def measured_crossovers(self) -> dict[str, float]:
        """The crossovers learned so far, by ``"kernel dtype"`` (those still learning marked so)."""
        found = {}
        with self._lock:
            for states in list(self._learned.values()):
                for (dtype, _), learned in states.items():
                    settled = learned.cpu_below == learned.parallel_from
                    found[f"{learned.name} {dtype}" + ("" if settled else " (learning)")] = learned.cpu_below
        return found

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it, learning, at the fork
        if not GUARD.parallel_usable:  # this child runs parallel calls serially: stay on cpu
            for states in list(self._learned.values()):
                for learned in states.values():
                    self._decide(learned)

    # -- the machine: the proxy ------------------------------------------------------------------
    def _machine(self) -> dict[str, float]:
        """``self.start``, from the disk or measured now (called with the lock held)."""
        if self.start is None:
            stored = self._entries().get("start")
            if _plausible_start(stored):
                self.start = {t: float(stored[t]) for t in ("cpu", "parallel")}
            else:
                self.start = {t: self._time_proxy(t) for t in ("cpu", "parallel")}
                if _plausible_start(self.start):
                    self._save(None)
        return self.start

    def _time_proxy(self, target: str, n: int = 16, repeat: int = 21) -> float:
        """The median time of a call of the library's copy kernel on ``n`` elements of
        library-made data, on ``target``: its cost with (almost) no work; on ``parallel``, with
        the cost of starting Numba's threads added (:func:`_thread_start`: a call of one chunk,
        as this one, runs on the caller's thread)."""
        dtype = np.dtype(np.float64)
        values = np.ones(n, dtype)
        info = Arg(HOST, np.ndarray, dtype, values.shape, values.strides)
        loop = next(loop for loop in IDENTITY.loops if loop.dtype == dtype)
        plan = Plan(loop=loop, loop_shape=(n,), out_shapes=((n,),),
                    inputs=(info,), cores=(0, 0))
        backend = self.targets[target]
        compiled = self._proxy.get(target)
        if compiled is None:
            compiled = self._proxy[target] = backend.compile(IDENTITY)
        run = backend.prepare(IDENTITY, compiled, plan)
        out = (np.empty(n, dtype),)
        call = _median_time(lambda: run((values,), out, True, None), repeat)
        return call + (_thread_start(repeat) if target == "parallel" else 0.0)

    # -- the disk -----------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """The file that keeps what this machine learned."""
        directory = self._directory or _default_directory()
        return directory / f"auto-{hashlib.sha256(_machine_key().encode()).hexdigest()[:16]}.json"

    def _entries(self) -> dict[str, Any]:
        """The file's contents (read once; ``{}`` if it is missing or damaged)."""
        if self._disk is None:
            self._disk = _read(self.path)
        return self._disk

    def _load(self, learned: Learned) -> None:
        if learned.disk_key is None:
            return
        stored = self._entries().get("kernels", {}).get(learned.disk_key)
        if not (isinstance(stored, dict) and _plausible_costs(stored)
                and _plausible_start(self._entries().get("start"))):
            return
        self._machine()
        for target, samples in (("cpu", learned.cpu), ("parallel", learned.parallel)):
            value = stored.get(target)
            if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
                samples.extend([float(value)] * SAMPLES)
        for name in _SIZES_KEPT:
            value = stored.get(name)
            if isinstance(value, int) and value > 0:
                setattr(learned, name, value)

    def _save(self, learned: Learned | None) -> None:
        """Add what was learned (the machine's start costs, and ``learned``'s costs) to the
        file: read again, merged, written whole and renamed into place. Any failure is ignored."""
        entries = self._entries()
        if _plausible_start(self.start):  # a slow stretch's start stays in this process
            entries["start"] = dict(self.start)
        if learned is not None and learned.disk_key is not None:
            costs = {t: learned.cost(t) for t in ("cpu", "parallel")}
            known: dict[str, float] = {t: c for t, c in costs.items() if c is not None}
            known.update({name: getattr(learned, name) for name in _SIZES_KEPT if getattr(learned, name)})
            if _plausible_costs(known):  # an overloaded stretch's costs stay in this process
                entries.setdefault("kernels", {})[learned.disk_key] = known
        path = self.path
        on_disk = _read(path)
        merged = {**on_disk, **entries, "format": FORMAT, "machine": _machine_key(),
                  "kernels": {**on_disk.get("kernels", {}), **entries.get("kernels", {})}}
        with contextlib.suppress(OSError, TypeError, ValueError):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as file:
                    json.dump(merged, file)
                os.replace(temporary, path)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


def _compare_at_one_size(learned: Learned) -> None:
    """Threads that lost (no call of theirs beat cpu's) at calls :data:`SIZE_CLASS` times larger
    than those cpu was timed on may have lost to a cost learned in cache: forget cpu's samples
    and time it again on calls of about the threads' size before deciding (they run on cpu
    meanwhile, as a lost comparison would have them)."""
    cpu, parallel = learned.cost("cpu"), learned.cost("parallel")
    if learned.won_at or cpu is None or parallel is None or parallel < cpu:
        return
    if parallel >= IMPLAUSIBLE_LOSS * cpu:
        # Threads that waited for cores, not a cost out of cache: cpu's cost stays, so that
        # the loss is judged implausible and kept in this process only (see _plausible_costs).
        # Forgotten, it let six such entries (16 ms per call of 10^6 on 2 cores, no cpu cost)
        # onto the disk, which kept every later process's 10^6 calls on cpu, 1.86x slower.
        return
    if 0 < learned.cpu_n and learned.parallel_n > SIZE_CLASS * learned.cpu_n:
        learned.cpu.clear()
        learned.cpu_n = 0
        learned.cpu_from = learned.parallel_n // 2


def _read(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` if it is this format's, else ``{}``."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        return {}
    if not isinstance(found.get("kernels", {}), dict):
        return {}
    return found


def _plausible_start(stored: Any) -> bool:
    """Whether ``stored`` holds both targets' start costs and threads start in under
    :data:`IMPLAUSIBLE_START`: only such a measurement is kept on disk or trusted from it."""
    return isinstance(stored, dict) and all(
        isinstance(stored.get(t), (int, float)) and math.isfinite(stored[t]) and stored[t] >= 0
        for t in ("cpu", "parallel")) and stored["parallel"] - stored["cpu"] < IMPLAUSIBLE_START


def _plausible_costs(stored: dict[str, Any]) -> bool:
    """Whether a kernel's stored costs lack a parallel cost :data:`IMPLAUSIBLE_LOSS` times its
    cpu cost or more (only such costs are kept on disk or trusted from it)."""
    cpu, parallel = stored.get("cpu"), stored.get("parallel")
    if not (isinstance(cpu, (int, float)) and isinstance(parallel, (int, float))):
        return True
    return not parallel >= IMPLAUSIBLE_LOSS * cpu


def _default_directory() -> Path:
    for variable in ("GPUFUNCS_CACHE_DIR", "NUMBA_CACHE_DIR"):
        if os.environ.get(variable):
            return Path(os.environ[variable])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpufuncs"


def _machine_key() -> str:
    """What the start costs and a kernel's costs per element depend on, besides the kernel."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}|cpus={os.cpu_count()}|threads={numba.get_num_threads()}|numba={numba.__version__}"


def _chunks(out: np.ndarray) -> None:
    for c in numba.prange(out.size):
        out[c] = c


#: A loop of two chunks on Numba's threads, and the same loop on the caller's: compiled when
#: ``auto`` first measures the machine (see :func:`_thread_start`).
_threaded_chunks = numba.njit(parallel=True, nogil=True)(_chunks)
_serial_chunks = numba.njit(nogil=True)(_chunks)


def _thread_start(repeat: int = 21) -> float:
    """``a' - a``: what starting Numba's threads adds to a parallel loop, the median time of a
    loop of two chunks on them less the same loop's on the caller's thread (the ``parallel``
    loops run one chunk there, with no threads: the copy kernel's call on a few elements no
    longer measures the start). Run under :data:`.layers.GUARD`, as ``parallel`` calls are."""
    out = np.zeros(2)

    def serial(inputs: Any, outs: Any, where: Any, stream: Any) -> None:
        _serial_chunks(out)

    def threaded(inputs: Any, outs: Any, where: Any, stream: Any) -> None:
        _threaded_chunks(out)

    guarded = GUARD.wrap(threaded, lambda: serial)
    threads = _median_time(lambda: guarded((), (), True, None), repeat)
    return max(threads - _median_time(lambda: serial((), (), True, None), repeat), 0.0)


def _median_time(call: Callable[[], Any], repeat: int) -> float:
    """The median time of ``call()`` over ``repeat`` calls, after one (compiling, warming)."""
    call()
    samples = []
    for _ in range(repeat):
        begin = time.perf_counter()
        call()
        samples.append(time.perf_counter() - begin)
    return statistics.median(samples)


def _disk_key(spec: KernelSpec, key: tuple[Any, ...]) -> str | None:
    """The kernel's entry in the file: its disk-cache key (``None`` for a kernel without a
    source file, which learns per process), dtype and core sizes."""
    from . import kernel_key  # the package imports this module first

    kernel = kernel_key(spec)
    return None if kernel is None else f"{kernel}:{key[0]}:{key[1]}"


def _first_parallel_size(plan: Plan) -> int:
    """Loop elements from which the parallel loops cut two chunks or more (see
    :func:`.loops.chunks`). Below, they run one chunk on one thread, never faster than ``cpu``."""
    return 2 * max(1, MIN_CHUNK // _outputs_per_element(plan))


def _outputs_per_element(plan: Plan) -> int:
    """Outputs a loop element writes (a gufunc's output core sizes)."""
    loop = max(1, int(np.prod(plan.loop_shape)))
    return max(1, sum(int(np.prod(shape)) for shape in plan.out_shapes) // loop)


def measured_crossovers() -> dict[str, float]:
    """The crossovers ``auto`` learned so far (see :func:`gpufuncs.targets.measured_crossovers`)."""
    from .. import measured_crossovers as found  # the registry holds the AutoTarget

    return found()
