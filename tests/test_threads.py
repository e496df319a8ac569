"""Thread safety: one compilation per (kernel, target) under concurrent first calls, and
concurrent ``parallel``-target calls that never take the process down."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.targets import get_target

THREADS = 12


def _fresh_kernel(name: str):
    def scaled_cube(x):
        return x * x * x

    return gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: x**3, name=name,
                    replace=True)(scaled_cube)


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


def _call_together(fn, count: int = THREADS) -> list:
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


def test_concurrent_parallel_calls_in_process():
    x = np.linspace(-5, 5, 200_000)
    expected = gf.exp(x, target="cpu")

    def work():
        return all(np.array_equal(gf.exp(x, target="parallel"), expected) for _ in range(5))

    assert all(_call_together(work, 8))


_WORKQUEUE_SCRIPT = textwrap.dedent("""
    import threading
    import numba
    import numpy as np
    import gpufuncs as gf

    x = np.linspace(-5, 5, 100_000)
    expected = np.exp(x)
    barrier = threading.Barrier(6)
    ok = []

    def work():
        barrier.wait()
        ok.append(all(np.allclose(gf.exp(x, target="parallel"), expected, rtol=1e-15)
                      for _ in range(10)))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(numba.threading_layer(), len(ok), all(ok))
""")


def test_concurrent_parallel_calls_survive_the_workqueue_layer():
    """Numba's workqueue layer aborts the process on concurrent parallel ufunc calls unless
    gpufuncs serializes them; run it in a child process so an abort fails only this test."""
    env = {"NUMBA_THREADING_LAYER": "workqueue"}
    done = subprocess.run([sys.executable, "-c", _WORKQUEUE_SCRIPT], capture_output=True, text=True,
                          timeout=300, env=_child_env(env))
    assert done.returncode == 0, f"child died (rc {done.returncode}): {done.stderr[-2000:]}"
    assert done.stdout.split() == ["workqueue", "6", "True"], done.stdout


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **extra}
