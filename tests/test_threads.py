"""Thread safety: many threads calling fresh kernels on every host target get the right answers,
each target compiles once under concurrent first calls, and no threading layer Numba can pick
takes the process down under concurrent ``parallel`` calls.

Run as a script (``python tests/test_threads.py``), this module hammers the ``parallel`` and
``auto`` targets and prints a JSON summary: the layer tests run it in a child process with
``NUMBA_THREADING_LAYER`` set, so that an abort fails one test instead of the whole run.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.targets import get_target
from gpufuncs.testing import compare

pytestmark = pytest.mark.slow  # subprocesses and threads: run by .ci/run after the quick suite

THREADS, CALLS = 16, 200
BUILT_INS = ("gaussian", "exp", "clamp", "hermite_norm")


def _fresh_kernel(name: str):
    def scaled_cube(x):
        return x * x * x

    return gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: x**3, name=name,
                    replace=True)(scaled_cube)


def _user_kernel(scale: float) -> gf.Kernel:
    """A binary user kernel whose constant lives in its closure (one per scale)."""
    def scaled_hypot(a, b):
        return math.sqrt(a * a + b * b) * scale

    return gf.ufunc(signatures=gf.float_signatures(2), name=f"threads_hypot_{scale:g}".replace(".", "_"),
                    reference=lambda a, b: np.sqrt(a * a + b * b) * scale, replace=True)(scaled_hypot)


def fresh_kernels() -> dict[str, gf.Kernel]:
    """New kernel objects, nothing compiled or resolved yet: the built-ins, and a user kernel."""
    kernels = {name: gf.Kernel(gf.registry[name].spec) for name in BUILT_INS}
    kernels["user"] = _user_kernel(1.5)
    return kernels


def thread_args(name: str, t: int) -> tuple:
    """Thread ``t``'s arguments for kernel ``name``: its own values, size and dtype (float32 for odd
    ``t``), so that a result handed to the wrong thread shows; sizes from 1000 to 5500, so that
    ``auto`` measures its crossover under concurrency too."""
    dtype = np.float32 if t % 2 else np.float64
    x = (np.random.default_rng(t).normal(size=1000 + 300 * t) * 2).astype(dtype)
    args = {"gaussian": (x, 0.25, 1.5), "exp": (x,), "clamp": (x, -0.5, x[::-1].copy()),
            "hermite_norm": (x, 6), "user": (x, x[::-1].copy())}
    return args[name]


def expected_results(names: list[str], threads: int) -> dict[tuple[str, int], np.ndarray]:
    """Each thread's result per kernel on ``cpu`` from other fresh kernels, checked against the
    kernel's NumPy/SciPy reference within its declared tolerance."""
    kernels = fresh_kernels()
    expected = {}
    for name in names:
        for t in range(threads):
            args = thread_args(name, t)
            result = kernels[name](*args, target="cpu")
            compare(kernels[name], args, result, target="cpu")
            expected[name, t] = result
    return expected


def hammer(targets: tuple[str, ...], threads: int, calls: int) -> dict[str, int]:
    """``threads`` threads, started together, each making ``calls`` calls of fresh kernels (a
    different kernel each call) on each target; the number of wrong results per target."""
    kernels = fresh_kernels()
    names = list(kernels)
    expected = expected_results(names, threads)
    wrong = {target: 0 for target in targets}
    barrier = threading.Barrier(threads)

    def work(t: int) -> None:
        barrier.wait()
        for i in range(calls):
            name = names[(t + i) % len(names)]
            for target in targets:
                result = kernels[name](*thread_args(name, t), target=target)
                if not np.array_equal(result, expected[name, t], equal_nan=True):
                    wrong[target] += 1  # a race here can only lose a count, never reach 0

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    return wrong


@pytest.mark.parametrize("target", ["cpu", "parallel", "auto"])
def test_many_threads_calling_fresh_kernels_get_the_right_answers(target, restore_registry):
    assert hammer((target,), THREADS, CALLS) == {target: 0}


def _count_compiles(monkeypatch, target: str) -> list[str]:
    """Record every kernel name the target compiles, while still compiling it."""
    backend = get_target(target)
    compiled: list[str] = []
    original = backend.compile

    def counting(spec):
        compiled.append(spec.name)
        return original(spec)

    monkeypatch.setattr(backend, "compile", counting)
    return compiled


def _call_together(fn, count: int = 12) -> list:
    barrier = threading.Barrier(count)

    def run(_):
        barrier.wait()
        return fn()

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_concurrent_first_calls_compile_once(target, monkeypatch, restore_registry):
    kernel = _fresh_kernel(f"threads_cube_{target}")
    compiled = _count_compiles(monkeypatch, target)
    x = np.linspace(-2, 2, 1001)
    results = _call_together(lambda: kernel(x, target=target))
    assert compiled == [kernel.__name__]
    for r in results:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], x**3, rtol=1e-15)


def test_concurrent_compiled_lookups_return_one_object(monkeypatch, restore_registry):
    kernel = _fresh_kernel("threads_cube_lookup")
    compiled = _count_compiles(monkeypatch, "cpu")
    objects = _call_together(lambda: kernel.compiled("cpu"))
    assert compiled == [kernel.__name__]
    assert all(o is objects[0] for o in objects)


# -- every threading layer, in a child process -----------------------------------------------------
#: Numba's threading layers and the module that implements each.
LAYERS = {"workqueue": "workqueue", "omp": "omppool", "tbb": "tbbpool"}


def _layer_missing(layer: str) -> str | None:
    """Why Numba cannot load ``layer`` here, or ``None`` if it can."""
    try:
        importlib.import_module(f"numba.np.ufunc.{LAYERS[layer]}")
    except (ImportError, OSError) as exc:
        return f"Numba's {layer} threading layer does not load here: {exc}"
    return None


@pytest.mark.parametrize("layer", list(LAYERS))
def test_concurrent_parallel_calls_never_abort_under_any_layer(layer):
    """``workqueue`` aborts the process on concurrent parallel calls unless gpufuncs serializes
    them; ``omp`` and ``tbb`` run them at once. A child process, so that an abort fails only
    this test."""
    missing = _layer_missing(layer)
    if missing:
        pytest.skip(missing)
    env = {**os.environ, "NUMBA_THREADING_LAYER": layer}
    done = subprocess.run([sys.executable, str(Path(__file__))], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, f"child died (rc {done.returncode}): {done.stderr[-3000:]}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary == {"layer": layer, "wrong": {"parallel": 0, "auto": 0}}, done.stdout


if __name__ == "__main__":
    import numba

    gf.set_auto_parallel_min_size(1)  # auto runs parallel too: two kinds of caller at once
    wrong = hammer(("parallel", "auto"), 8, 60)
    print(json.dumps({"layer": numba.threading_layer(), "wrong": wrong}))
