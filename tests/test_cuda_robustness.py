"""The cuda target under threads, processes, memory pressure and failures (GPU only: every test is
marked ``cuda`` and skipped, with the reason, without one). Run with ``pytest -m cuda``.

- threads, each on its own stream, calling fresh kernels on device and host arrays, get the
  results of a single-threaded run, which agree with the references;
- a child forked after the parent used CUDA gets a clear error naming the fork (never a hang),
  and can still use the host targets; a spawned child uses CUDA normally;
- out-of-memory is a ``MemoryError``; after any error (out of memory, Ctrl-C in the middle of a
  chunked host call) the pool's used memory is back where it was, and a loop of failing calls
  does not grow it; the pinned result pool stays within its bound and is reused;
- a kernel that Numba cannot compile for CUDA fails the same way on every retry, and runs on
  the host targets.
"""

from __future__ import annotations

import gc
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.kernels import builtin_names
from gpufuncs.testing import compare

pytestmark = pytest.mark.cuda

HERE = Path(__file__).resolve()
THREADS, CALLS = 8, 40
KERNEL_NAMES = ("gaussian", "exp", "clamp", "hermite_norm")  # thread_args has their arguments


@pytest.fixture(scope="module")
def cuda():
    from numba import cuda

    return cuda


@pytest.fixture(scope="module")
def runtime():
    from gpufuncs.targets import get_target

    return get_target("cuda").runtimes.get()


def to_host(result):
    """A device result (Numba's device array, the kind of the inputs here) as a NumPy array."""
    return result.copy_to_host() if hasattr(result, "copy_to_host") else np.asarray(result)


def used_memory(cuda, runtime) -> int:
    """Bytes in use in the target's pool and in CuPy's (which serves new Numba outputs where
    CuPy is imported), once everything pending has finished and every unreachable result has
    been freed back."""
    gc.collect()
    cuda.synchronize()
    cupy = sys.modules.get("cupy")
    return runtime.pool_attribute("USED_MEM_CURRENT") + (cupy.get_default_memory_pool().used_bytes()
                                                         if cupy else 0)


def reserved_memory(runtime) -> int:
    """Bytes the target's pool and CuPy's keep reserved (in use or not)."""
    cupy = sys.modules.get("cupy")
    return runtime.pool_attribute("RESERVED_MEM_CURRENT") + (cupy.get_default_memory_pool().total_bytes()
                                                             if cupy else 0)


@pytest.fixture(params=["driver", "cupy"])
def pool(request, monkeypatch):
    """The pool that new Numba outputs come from in the test: the target's own, or CuPy's
    where CuPy is imported (see ``Runtime.allocator``). Resolved calls keep the allocator they
    chose, so the kernels' are forgotten for the test."""
    from gpufuncs.targets.cuda import runtime as runtime_module

    if request.param == "cupy":
        pytest.importorskip("cupy")
    else:
        monkeypatch.setattr(runtime_module, "cupy_loaded", lambda: False)
    for name in KERNEL_NAMES:
        kernel = getattr(gf, name)
        monkeypatch.setattr(kernel, "_resolved", {t: {} for t in kernel._resolved})
    return request.param


# -- threads on their own streams ------------------------------------------------------------------
def thread_args(name: str, t: int) -> tuple:
    """Host arguments of thread ``t``: its own values and size (float32)."""
    x = (np.random.default_rng(t).normal(size=(1 << 15) + 1000 * t) * 2).astype(np.float32)
    return {"gaussian": (x, 0.25, 1.5), "exp": (x,), "clamp": (x, -0.5, x[::-1].copy()),
            "hermite_norm": (x, 6)}[name]


def _device_args(cuda, args: tuple, stream=0) -> tuple:
    return tuple(cuda.to_device(a, stream=stream) if isinstance(a, np.ndarray) else a for a in args)


def test_threads_on_their_own_streams_get_correct_results(cuda):
    """Fresh kernels (their first cuda calls are concurrent), device arrays on each thread's
    stream and host arrays with ``stream=``; every result equal to a single-threaded run's on
    the same path, which agrees with the reference."""
    single = {n: gf.Kernel(gf.registry[n].spec) for n in KERNEL_NAMES}
    expected = {}
    for name in KERNEL_NAMES:
        for t in range(THREADS):
            args = thread_args(name, t)
            expected[name, t, "host"] = single[name](*args, target="cuda")
            expected[name, t, "device"] = to_host(single[name](*_device_args(cuda, args)))
            for path in ("host", "device"):
                compare(name, args, expected[name, t, path], target="cuda")
    kernels = {n: gf.Kernel(gf.registry[n].spec) for n in KERNEL_NAMES}
    barrier = threading.Barrier(THREADS)

    def work(t: int) -> int:
        stream = cuda.stream()
        device = {n: _device_args(cuda, thread_args(n, t), stream) for n in KERNEL_NAMES}
        wrong = 0
        barrier.wait()
        for i in range(CALLS):
            name = KERNEL_NAMES[(t + i) % len(KERNEL_NAMES)]
            on_device = kernels[name](*device[name], stream=stream)
            on_host = kernels[name](*thread_args(name, t), target="cuda", stream=stream)
            result = on_device.copy_to_host(stream=stream)
            stream.synchronize()
            wrong += not np.array_equal(result, expected[name, t, "device"], equal_nan=True)
            wrong += not np.array_equal(on_host, expected[name, t, "host"], equal_nan=True)
        return wrong

    with ThreadPoolExecutor(THREADS) as pool:
        assert list(pool.map(work, range(THREADS))) == [0] * THREADS


# -- processes -------------------------------------------------------------------------------------------
def _cuda_in_child(queue) -> None:
    """In a child: a cuda call (an error is reported, not raised), then host calls."""
    x = np.linspace(-3, 3, 1 << 22, dtype=np.float32)  # large: the host path's copy threads too
    try:
        result = gf.exp(x, target="cuda")
        compare(gf.exp, (x[::997],), result[::997], target="cuda")
        cuda_outcome = ["ok", ""]
    except Exception as exc:
        cuda_outcome = [type(exc).__name__, str(exc)]
    host = [bool(np.allclose(gf.exp(x, target=t), np.exp(x), rtol=1e-6)) for t in ("cpu", "parallel")]
    queue.put({"cuda": cuda_outcome, "host": host})


def child_after_cuda(method: str) -> dict:
    """Use CUDA here (device and host arrays), then run :func:`_cuda_in_child` in a child made
    with ``method``; what it reported, or "hang" / its exit code."""
    from numba import cuda

    x = np.linspace(-3, 3, 1 << 20, dtype=np.float32)
    gf.exp(x, target="cuda")
    gf.exp(cuda.to_device(x)).copy_to_host()
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    child = ctx.Process(target=_cuda_in_child, args=(queue,))
    child.start()
    child.join(timeout=120)
    if child.exitcode is None:
        child.kill()
        return {"outcome": "hang"}
    if child.exitcode != 0:
        return {"outcome": f"exit code {child.exitcode}"}
    return {"outcome": "reported", **queue.get(timeout=10)}


def _run_script(*argv: str) -> dict:
    done = subprocess.run([sys.executable, str(HERE), *argv], capture_output=True, text=True,
                          timeout=400, env={**os.environ})
    assert done.returncode == 0, f"parent died (rc {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_child_forked_after_cuda_gets_a_clear_error_not_a_hang():
    """CUDA cannot be used in a child forked from a process that initialized it; gpufuncs must
    say so (naming fork, and what to do instead) rather than hang or crash."""
    summary = _run_script("child", "fork")
    assert summary["outcome"] == "reported", summary
    kind, message = summary["cuda"]
    assert kind != "ok" and "fork" in message.lower(), summary
    assert summary["host"] == [True, True]


def test_a_spawned_child_uses_cuda():
    summary = _run_script("child", "spawn")
    assert summary == {"outcome": "reported", "cuda": ["ok", ""], "host": [True, True]}


# -- launchers ----------------------------------------------------------------------------------------------
def launch_without_cupy() -> dict:
    """Every kernel on Numba device arrays in a process that never imports CuPy, so launches go
    through ``cuda.bindings`` (with CuPy imported they go through CuPy's ``launchKernel``)."""
    from numba import cuda

    x = np.linspace(-4, 4, 3001)
    results = {}
    for name in builtin_names():
        kernel = gf.registry[name]
        args = sample_args(name, x)
        device = kernel(*(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args))
        results[name] = to_host(device).tolist()
    return {"cupy imported": "cupy" in sys.modules, "results": results}


def sample_args(name: str, x: np.ndarray) -> tuple:
    """Arguments for ``name`` built from its declared inputs: ``x`` first, then values that
    give every kernel a non-trivial result (a count of 7 orders for a core-size input)."""
    kernel = gf.registry[name]
    sizes = kernel.spec.layout.output_only_dims if kernel.spec.layout else ()
    rest = (0.25, 1.5, 2.0)[: kernel.nin - 1]
    return (x, *rest, *(7 for _ in sizes))


def test_both_launchers_give_the_same_results():
    """The cuda.bindings launch (no CuPy in the process) and CuPy's launch (CuPy imported here)
    compute the same values, bit for bit, for every kernel."""
    import cupy  # noqa: F401  (makes this process launch through CuPy)
    from numba import cuda

    without = _run_script("launch")
    assert without["cupy imported"] is False
    x = np.linspace(-4, 4, 3001)
    for name in builtin_names():
        args = sample_args(name, x)
        here = to_host(gf.registry[name](*(cuda.to_device(a) if isinstance(a, np.ndarray) else a
                                            for a in args)))
        np.testing.assert_array_equal(here, np.array(without["results"][name]), err_msg=name)
        compare(gf.registry[name], args, here, target="cuda")


# -- memory ----------------------------------------------------------------------------------------------
def _oom_calls(cuda) -> list:
    """Calls whose result cannot fit in GPU memory (1.5x the device's), from small inputs."""
    _, total = cuda.current_context().get_memory_info()
    elements = math.ceil(1.5 * total / 4)
    col = cuda.to_device(np.ones((1 << 16, 1), np.float32))
    row = cuda.to_device(np.ones((1, -(-elements // (1 << 16))), np.float32))
    x = cuda.to_device(np.ones(1 << 20, np.float32))
    return [lambda: gf.gaussian(col, row, 2.0), lambda: gf.hermite_norm(x, -(-elements // (1 << 20)))]


def test_out_of_memory_is_a_memory_error_and_gives_the_memory_back(cuda, runtime, pool):
    calls = _oom_calls(cuda)
    before = used_memory(cuda, runtime)
    for call in calls:
        with pytest.raises(MemoryError, match=r"(?i)out of memory"):
            call()
        assert used_memory(cuda, runtime) == before
    x = np.linspace(-3, 3, 1 << 20, dtype=np.float32)
    compare(gf.exp, (x,), to_host(gf.exp(cuda.to_device(x))), target="cuda")


def test_a_loop_of_failing_calls_does_not_grow_the_pool(cuda, runtime, pool):
    calls = _oom_calls(cuda)
    before = used_memory(cuda, runtime)
    with pytest.raises(MemoryError):
        calls[1]()
    reserved = reserved_memory(runtime)
    for _ in range(10):
        for call in calls:
            with pytest.raises(MemoryError):
                call()
    assert used_memory(cuda, runtime) == before
    assert reserved_memory(runtime) <= reserved


def test_ctrl_c_in_a_chunked_host_call_gives_the_memory_back(monkeypatch, cuda, runtime):
    from test_failures import interrupted

    from gpufuncs.targets.cuda import host

    monkeypatch.setattr(host, "CHUNK_BYTES", 1 << 20)  # hundreds of chunks: Python between them
    x = np.linspace(-3, 3, 1 << 27, dtype=np.float32)
    gf.exp(x[: 1 << 20], target="cuda")
    before = used_memory(cuda, runtime)
    assert interrupted(lambda: gf.exp(x, target="cuda"), seconds=0.05)
    assert used_memory(cuda, runtime) == before
    # The pipeline's lock and buffers are free: the next call runs (in a thread, bounded).
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(gf.exp, x, target="cuda").result(timeout=120)
    compare(gf.exp, (x[::4097],), result[::4097], target="cuda")
    assert used_memory(cuda, runtime) == before


def test_the_pinned_result_pool_stays_bounded_and_is_reused(monkeypatch):
    from gpufuncs.targets import get_target

    gc.collect()
    pool = get_target("cuda").host_resources().pinned_results
    limit = pool.held + (64 << 20)
    monkeypatch.setattr(pool, "limit", limit)
    x = np.linspace(-3, 3, 1 << 22, dtype=np.float32)  # 16 MiB results
    kept = [gf.exp(x + i, target="cuda") for i in range(12)]  # 192 MiB: most in plain memory
    assert pool.held <= limit
    for i in (0, 5, 11):
        compare(gf.exp, ((x + i)[::997],), kept[i][::997], target="cuda")
    grown = pool.held
    del kept
    gc.collect()
    again = [gf.exp(x - i, target="cuda") for i in range(12)]
    assert pool.held == grown  # freed blocks were reused, none added
    compare(gf.exp, ((x - 3)[::997],), again[3][::997], target="cuda")


# -- compile failures -----------------------------------------------------------------------------------
def test_a_kernel_numba_cannot_compile_for_cuda_fails_alike_each_time_and_runs_on_the_host(
        restore_registry):
    def pair_sum(x):
        values = [x, x * 2.0]  # a list: Numba's CPU targets build it, CUDA has no allocator
        return values[0] + values[1]

    kernel = gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: 3.0 * x,
                      name="cuda_failing_pair_sum", replace=True)(pair_sum)
    x = np.linspace(-3, 3, 5000)
    errors = []
    for _ in range(3):
        with pytest.raises(Exception, match="failed to compile for target 'cuda'") as info:
            kernel(x, target="cuda")
        errors.append((type(info.value), str(info.value)))
        for target in ("cpu", "parallel"):
            compare(kernel, (x,), kernel(x, target=target), target=target)
    assert errors == [errors[0]] * 3
    compare(gf.exp, (x,), gf.exp(x, target="cuda"), target="cuda")  # other kernels unaffected


def test_kernels_of_one_factory_never_share_cached_code(restore_registry):
    """Kernels with the same source and different closure values: each computes its own (the
    disk cache must key on closure values too, see ``gpufuncs.targets.cpu.cache``)."""
    from test_failures import scaled_by

    x = np.linspace(-3, 3, 5000)
    for scale in (2.0, 3.0, 2.0, 5.0):
        kernel = scaled_by(scale, f"cuda_factory_{scale:g}")
        np.testing.assert_array_equal(kernel(x, target="cuda"), x * scale)


if __name__ == "__main__":
    if sys.argv[1] == "child":
        print(json.dumps(child_after_cuda(sys.argv[2])))
    elif sys.argv[1] == "launch":
        print(json.dumps(launch_without_cupy()))
