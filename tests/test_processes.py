"""Child processes made with fork, spawn and forkserver after the parent used gpufuncs (``cpu``,
``parallel`` and ``auto`` calls, a user kernel, other threads busy with ``parallel`` calls while
it forks) compute right answers, within a time bound.

GNU OpenMP, Numba's ``omp`` layer on Linux, kills a forked child that runs parallel code after
the parent started it; gpufuncs runs such a child's ``parallel`` calls serially (see
``gpufuncs/targets/cpu/layers.py``). The parent is a child process of the test (this module run
as a script), so that its threading layer is the one the test asks for and a crash or a hang
fails one test: every wait has a timeout.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from test_threads import fresh_kernels, thread_args

import gpufuncs as gf
from gpufuncs.targets.cpu.layers import GUARD
from gpufuncs.testing import compare

pytestmark = pytest.mark.slow  # subprocesses and threads: run by .ci/run after the quick suite

TARGETS = ("cpu", "parallel", "auto")
START_METHODS = ("fork", "spawn", "forkserver")
#: Seconds a child may take to answer (spawned ones import NumPy, Numba, gpufuncs).
CHILD_TIMEOUT = 120


def check_kernels(kernels: dict[str, gf.Kernel] | None = None) -> dict[str, object]:
    """Call ``kernels`` (default: fresh ones, nothing compiled in this process yet) on every host
    target, in float64 and float32 by turns, and check each result against the kernel's
    reference; what went wrong, and how ``parallel`` calls ran."""
    failures = []
    kernels = kernels or fresh_kernels()
    calls = [(name, kernel, thread_args(name, i % 2)) for i, (name, kernel) in enumerate(kernels.items())]
    calls.append(("exp strided", kernels["exp"], (thread_args("exp", 0)[0][::3],)))  # Numba's ufunc
    for name, kernel, args in calls:
        for target in TARGETS:
            try:
                compare(kernel, args, kernel(*args, target=target), target=target)
            except Exception as exc:
                failures.append(f"{name} {target}: {type(exc).__name__}: {exc}")
    return {"failures": failures, "parallel": GUARD.state}


def _busy_parallel_callers(stop: threading.Event) -> list[threading.Thread]:
    """Two threads making ``parallel`` calls until ``stop``: a fork lands in the middle of them."""
    x = np.linspace(-3, 3, 1 << 18)

    def run() -> None:
        while not stop.is_set():
            gf.exp(x, target="parallel")

    threads = [threading.Thread(target=run, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    return threads


def run_child(method: str) -> dict[str, object]:
    """The result of :func:`check_kernels` in a child made with ``method``; a forked one while two
    threads of this process make ``parallel`` calls."""
    stop = threading.Event()
    busy = _busy_parallel_callers(stop) if method == "fork" else []
    try:
        with mp.get_context(method).Pool(1) as pool:
            # A child that dies never answers: the timeout turns that into an error, not a hang.
            return pool.apply_async(check_kernels).get(timeout=CHILD_TIMEOUT)
    finally:
        stop.set()
        for t in busy:
            t.join(timeout=CHILD_TIMEOUT)


def parent(methods: list[str]) -> dict[str, object]:
    """Use gpufuncs on every host target (this starts Numba's threading layer), then make a
    child each of these ways; a summary, this process's own results after them included."""
    import numba

    kernels = fresh_kernels()
    own = check_kernels(kernels)
    children = {method: run_child(method) for method in methods}
    after = check_kernels(kernels)
    return {"layer": numba.threading_layer(), "own": own["failures"], "after": after["failures"],
            "children": {m: [c["failures"], c["parallel"]] for m, c in children.items()}}


# The layer matters to forked children only: spawned ones start their own.
@pytest.mark.parametrize(("layer", "methods"),
                         [("omp", START_METHODS), ("workqueue", ("fork",)), ("tbb", ("fork",))])
def test_children_of_every_start_method_work_after_the_parent_used_gpufuncs(layer, methods):
    from test_threads import _layer_missing

    missing = _layer_missing(layer)
    if missing:
        pytest.skip(missing)
    env = {**os.environ, "NUMBA_THREADING_LAYER": layer}
    done = subprocess.run([sys.executable, str(Path(__file__)), *methods], capture_output=True,
                          text=True, timeout=len(methods) * CHILD_TIMEOUT + 120, env=env)
    assert done.returncode == 0, f"parent died (rc {done.returncode}): {done.stderr[-3000:]}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["layer"] == layer
    assert summary["own"] == [] and summary["after"] == []
    # A child forked from a GNU OpenMP parent runs parallel calls serially, others on threads.
    on_threads = "serialized" if layer == "workqueue" else "free"
    expected = {m: on_threads for m in methods}
    if layer == "omp":
        expected["fork"] = "forked"
    assert summary["children"] == {m: [[], expected[m]] for m in methods}


if __name__ == "__main__":
    print(json.dumps(parent(sys.argv[1:])))
