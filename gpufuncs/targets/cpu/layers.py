"""Running ``parallel`` calls safely under whichever threading layer Numba picked.

Numba runs parallel code on one *threading layer* per process, chosen when parallel code first
runs (``NUMBA_THREADING_LAYER``; by default the first of ``tbb``, ``omp``, ``workqueue`` that
loads). Two of them can take the process down:

* ``workqueue`` is not thread-safe: two Python threads running parallel code at once abort the
  process. While it is the layer, parallel calls are serialized, process-wide.
* GNU OpenMP (``omp`` on Linux) is not fork-safe: a child forked after the layer started is
  killed (SIGTERM, "fork() called from a process already using GNU OpenMP") as soon as it runs
  parallel code. Such a child runs every ``parallel`` call on the serial loops instead.

The second is chosen over making gpufuncs pick a fork-safe layer itself
(``THREADING_LAYER='forksafe'``): that would change the layer of the user's own Numba code,
would only work if gpufuncs were the first to run parallel code, and here would mean
``workqueue`` (without TBB), which serializes concurrent callers. A forked worker computing
serially is also what a pool of one process per core wants. ``tbb`` is both thread- and
fork-safe, and costs nothing here.

The guard watches for forks from the first parallel executor on, not from import; a fork also
waits for any compilation under way in another thread (see ``base.hold_the_compiler_across_fork``,
installed by the first compilation).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numba

from ..base import Executor

#: What the guard knows of the layer: not started yet (calls serialized until it is known),
#: safe for concurrent calls, ``workqueue`` (serialized), or unusable in this forked child.
UNKNOWN, FREE, SERIALIZED, FORKED = "unknown", "free", "serialized", "forked"


def current_layer() -> str | None:
    """The threading layer Numba started in this process, or ``None`` if none has started."""
    try:
        return numba.threading_layer()
    except ValueError:
        return None


def _fork_unsafe(layer: str | None) -> bool:
    """Whether a forked child must not run parallel code on ``layer`` (started in the parent)."""
    if layer != "omp":
        return False
    omppool = sys.modules.get("numba.np.ufunc.omppool")
    # Only GNU's runtime kills forked children; an unknown vendor is treated as GNU.
    return getattr(omppool, "openmp_vendor", "GNU") == "GNU"


class ParallelGuard:
    """Wraps the ``parallel`` target's executors; see the module docstring.

    The fast path (a thread-safe layer, not a forked child) costs one attribute read per call.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = UNKNOWN
        self._pid = os.getpid()
        self._hooked = False

    def install(self) -> None:
        """Watch for forks, from the first parallel executor on (nothing is hooked at import).
        A process forked before that, from a parent whose own Numba code started GNU OpenMP,
        is recognised by its pid."""
        with self._lock:
            if self._hooked:
                return
            self._hooked = True
            os.register_at_fork(after_in_child=self._after_fork)
            if os.getpid() != self._pid and _fork_unsafe(current_layer()):
                self.state = FORKED

    def _after_fork(self) -> None:
        # Only the forking thread survives: a lock another thread held stays held forever.
        self._lock = threading.Lock()
        layer = current_layer()
        if _fork_unsafe(layer):
            self.state = FORKED
        elif layer == "workqueue":
            self.state = SERIALIZED

    @property
    def parallel_usable(self) -> bool:
        """Whether ``parallel`` calls run on threads in this process (not in an unsafe child)."""
        return self.state != FORKED

    def wrap(self, threaded: Executor, serial: Callable[[], Executor]) -> Executor:
        """``threaded``, made safe; ``serial()`` makes the same call's serial executor (made
        once, on first need)."""
        self.install()
        fallback: list[Executor] = []

        def run(inputs: tuple[Any, ...], outs: Any, where: Any, stream: Any) -> tuple[Any, ...]:
            if self.state == FREE:
                return threaded(inputs, outs, where, stream)
            if self.state == FORKED:
                if not fallback:
                    fallback.append(serial())
                return fallback[0](inputs, outs, where, stream)
            with self._lock:
                result = threaded(inputs, outs, where, stream)
                if self.state == UNKNOWN:
                    self.state = SERIALIZED if current_layer() == "workqueue" else FREE
            return result

        return run


#: The one guard: the hazards are the process's, whichever kernel or target object runs.
GUARD = ParallelGuard()
