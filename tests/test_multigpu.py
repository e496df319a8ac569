"""Calls on several GPUs: inputs run where they live, host arrays split across every GPU.

Two kinds of test:

* marked ``cuda`` (one GPU is enough): ``device=`` on host arrays, ``device="all"`` with the
  chunks shared between two pipelines on the one GPU there is (two *lanes*: the code that runs
  one pipeline per GPU, each in its own thread), results placed on the input's device, and the
  errors that need no second GPU;
* marked ``cuda`` and ``multigpu`` (skipped with fewer than two GPUs): arrays on GPU 1 computed
  there, mixed devices refused naming both, ``device="all"`` using both GPUs, and device arrays
  on both GPUs from two threads at once.

Results are compared bit for bit with the same kernel on one GPU (the same compiled code), and
with the kernel's reference within its declared tolerance (:func:`gpufuncs.testing.compare`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.dispatch import Kernel
from gpufuncs.kernels import builtin_names
from gpufuncs.testing import compare

pytestmark = pytest.mark.cuda

#: Under ``NUMBA_ENABLE_CUDASIM=1`` (``test_cuda_sim.py`` runs this module there too) kernels run
#: as Python, one thread per element: tiny arrays, tiny chunks.
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
SHAPE, CHUNK = ((6, 5), 16) if SIMULATED else ((512, 96), 1 << 12)

#: Set in a subprocess of :func:`test_every_array_kind_through_the_multi_gpu_machinery`: the
#: process is told it sees this many GPUs (it uses only GPU 0), so each call takes the several-GPU
#: path (devices read from the arrays and keyed, contexts switched and put back, CuPy's stream
#: and allocation per device) on a machine with one.
PRETENDED_GPUS = int(os.environ.get("GPUFUNCS_TEST_PRETEND_GPUS", "0"))
if PRETENDED_GPUS:
    from gpufuncs.targets.cuda import runtime as _runtime

    _runtime.device_count = lambda: PRETENDED_GPUS


@pytest.fixture(scope="module")
def cuda():
    from numba import cuda

    return cuda


def kernel_cases(rng: np.random.Generator, shape: tuple[int, ...], dtype=np.float32) -> dict:
    """Arguments for every built-in kernel: arrays of ``shape``, broadcast ones and scalars."""
    x = rng.normal(scale=2.0, size=shape).astype(dtype)
    row = rng.normal(size=shape[-1:]).astype(dtype)
    cases = {
        "clamp": (x, -1.0, np.abs(row) + dtype(0.5)),
        "exp": (x,),
        "gaussian": (x, row, dtype(1.5)),
        "hermite_norm": (x, 6),
    }
    assert set(cases) == set(builtin_names()), "a new built-in kernel needs a case here"
    return cases


def fresh(name: str) -> Kernel:
    """The built-in kernel ``name`` with caches of its own (a ``device=`` decision is cached per
    call signature, and these tests change how devices are chosen)."""
    return Kernel(gf.registry[name].spec)


def as_host(result):
    """A device result of any kind as a NumPy array."""
    if hasattr(result, "copy_to_host"):
        return result.copy_to_host()
    if hasattr(result, "get"):
        return result.get()
    if hasattr(result, "cpu"):
        return result.cpu().numpy()
    return np.asarray(result)


def played_by_lanes(monkeypatch, count: int = 2) -> None:
    """Make ``device="all"`` mean ``count`` pipelines on GPU 0 (two lanes of one GPU): on one
    GPU, the code of a multi-GPU call runs as on several, threads and shared chunks included."""
    import gpufuncs.targets.cuda as cuda_target

    real = cuda_target.call_devices

    def lanes_of_gpu0(spec, plan, count_):
        return (0,) * count if plan.device == "all" else real(spec, plan, count_)

    monkeypatch.setattr(cuda_target, "call_devices", lanes_of_gpu0)


def threads_of_chunks(monkeypatch, pipelines: int = 2) -> list[str]:
    """The name of the thread that issues each chunk, in order. Each of the ``pipelines``
    threads waits at its first chunk until all have one: however fast one thread is, every
    pipeline takes part (given as many chunks), so the count of threads is deterministic."""
    from gpufuncs.targets.cuda import host

    names: list[str] = []
    issue = host._Pipeline._issue
    started = threading.Barrier(pipelines)

    def recording(self, lane, slot, index, stream):
        name = threading.current_thread().name
        first = name not in names
        names.append(name)
        if first and name.startswith("gpufuncs-device"):
            started.wait(timeout=30)
        return issue(self, lane, slot, index, stream)

    monkeypatch.setattr(host._Pipeline, "_issue", recording)
    return names


# -- one GPU ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", builtin_names())
def test_device_all_shares_the_chunks_between_pipelines_and_gives_one_gpus_values(name, monkeypatch):
    from gpufuncs.targets.cuda import host

    played_by_lanes(monkeypatch)
    monkeypatch.setattr(host, "CHUNK_BYTES", CHUNK)  # dozens of chunks
    args = kernel_cases(np.random.default_rng(5), SHAPE)[name]
    kernel = fresh(name)
    one = kernel(*args, target="cuda")
    threads = threads_of_chunks(monkeypatch)
    both = kernel(*args, target="cuda", device="all")
    np.testing.assert_array_equal(both, one)
    compare(kernel, args, both, target="cuda")
    assert len(set(threads)) == 2 and all(t.startswith("gpufuncs-device") for t in threads), threads
    # out= and where=: masked positions keep their values; nothing else is touched.
    out = np.full(np.shape(one), 7.0, np.float32)
    mask = np.asarray(args[0]) > 0  # over the loop dimensions (a gufunc's core ones are whole)
    kernel(*args, target="cuda", device="all", out=out, where=mask)
    written = mask[..., None] if np.ndim(one) > np.ndim(mask) else mask
    np.testing.assert_array_equal(out, np.where(written, one, np.float32(7.0)))


def test_device_all_failure_stops_every_pipeline_and_frees_the_lanes(monkeypatch):
    from gpufuncs.targets.cuda import host

    played_by_lanes(monkeypatch)
    monkeypatch.setattr(host, "CHUNK_BYTES", CHUNK)
    x = np.linspace(-3, 3, 64 * CHUNK // 4, dtype=np.float32)  # 64 chunks
    issue, issued = host._Pipeline._issue, []

    def failing(self, lane, slot, index, stream):
        issued.append(index)
        if len(issued) == 9:
            raise RuntimeError("chunk 9 failed")
        return issue(self, lane, slot, index, stream)

    kernel = fresh("exp")
    monkeypatch.setattr(host._Pipeline, "_issue", failing)
    with pytest.raises(RuntimeError, match="chunk 9 failed"):
        kernel(x, target="cuda", device="all")
    assert len(issued) < 64  # stopped: 64 chunks in all
    monkeypatch.setattr(host._Pipeline, "_issue", issue)
    np.testing.assert_array_equal(kernel(x, target="cuda", device="all"), kernel(x, target="cuda"))


def test_host_calls_from_two_threads_run_at_once_on_their_own_lanes(monkeypatch):
    from gpufuncs.targets.cuda import host

    monkeypatch.setattr(host, "CHUNK_BYTES", CHUNK)
    rng = np.random.default_rng(11)
    inputs = [rng.normal(size=16 * CHUNK // 4).astype(np.float32) for _ in range(6)]
    alone = [gf.gaussian(x, 0.25, 1.5, target="cuda") for x in inputs]
    with ThreadPoolExecutor(3) as pool:  # three callers, two lanes: the third waits its turn
        together = list(pool.map(lambda x: gf.gaussian(x, 0.25, 1.5, target="cuda"), inputs))
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


def test_device_keyword_on_host_arrays_and_its_errors(cuda):
    from gpufuncs.targets.cuda.runtime import device_count

    x = np.linspace(-3, 3, SHAPE[0] * SHAPE[1], dtype=np.float32)
    ref = gf.exp(x, target="cuda")
    np.testing.assert_array_equal(gf.exp(x, target="cuda", device=0), ref)
    np.testing.assert_array_equal(gf.exp(x, target="cuda", device="all"), ref)
    count = device_count()
    with pytest.raises(ValueError, match=rf"exp: device={count} is not a visible GPU \({count} visible"):
        gf.exp(x, target="cuda", device=count)
    with pytest.raises(ValueError, match="exp: device='all' splits host arrays across the GPUs"):
        gf.exp(cuda.to_device(x), device="all")
    on_device = gf.exp(cuda.to_device(x), device=0)
    np.testing.assert_array_equal(as_host(on_device), ref)


def test_host_arrays_without_device_run_on_the_callers_current_gpu(monkeypatch):
    from gpufuncs.targets.cuda import host

    asked = []
    monkeypatch.setattr(host, "current_device", lambda: asked.append("asked") or 0)
    x = np.linspace(-3, 3, SHAPE[0] * SHAPE[1], dtype=np.float32)
    kernel = fresh("exp")
    np.testing.assert_array_equal(kernel(x, target="cuda"), gf.exp(x, target="cuda", device=0))
    kernel(x, target="cuda")
    assert asked == ["asked", "asked"]  # on every call: the current GPU may change between calls
    kernel(x, target="cuda", device=0)
    assert len(asked) == 2


def test_stream_with_device_all_is_refused_before_anything_is_written(monkeypatch, cuda):
    played_by_lanes(monkeypatch)
    x = np.ones(100, np.float32)
    out = np.zeros_like(x)
    with pytest.raises(ValueError, match="exp: stream= belongs to one GPU"):
        fresh("exp")(x, out=out, target="cuda", device="all", stream=cuda.stream())
    assert not out.any()


def test_results_live_on_the_device_of_their_inputs(cuda):
    from gpufuncs.targets.cuda.compat import numba_device
    from gpufuncs.targets.cuda.recognize import device_of

    x = np.linspace(-1, 1, 10, dtype=np.float32)
    result = gf.exp(cuda.to_device(x))
    assert device_of(result) == 0 and (SIMULATED or numba_device(result) == 0)
    cp = pytest.importorskip("cupy")
    assert gf.exp(cp.asarray(x)).device.id == 0
    torch = pytest.importorskip("torch")
    assert gf.exp(torch.from_numpy(x).cuda()).device == torch.device("cuda", 0)


@pytest.mark.skipif(SIMULATED, reason="the simulator has no contexts to switch")
def test_every_array_kind_through_the_multi_gpu_machinery(cuda):
    """Device arrays of every kind, in a process that sees two GPUs as far as gpufuncs knows:
    the same values as the host path, results on GPU 0 and of the input's kind."""
    import subprocess
    import sys

    if not PRETENDED_GPUS:
        env = {**os.environ, "GPUFUNCS_TEST_PRETEND_GPUS": "2"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                               "-k", "test_every_array_kind_through_the_multi_gpu_machinery"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-6000:] + proc.stderr[-3000:]
        return
    from test_cuda import CaiOnly, DLPackOnly

    from gpufuncs.targets import get_target
    from gpufuncs.targets.cuda.recognize import device_of

    cp, torch = pytest.importorskip("cupy"), pytest.importorskip("torch")
    kinds = {"numba": cuda.to_device, "cupy": cp.asarray, "torch": lambda a: torch.from_numpy(a).cuda(),
             "cai": lambda a: CaiOnly(cp.asarray(a)), "dlpack": lambda a: DLPackOnly(cp.asarray(a))}
    for name, args in kernel_cases(np.random.default_rng(8), (200, 30)).items():
        kernel = gf.registry[name]
        expected = kernel(*args, target="cuda", device=0)  # the host path, through GPU 0
        for kind, move in kinds.items():
            on_gpu = [move(a) if isinstance(a, np.ndarray) and a.ndim else a for a in args]
            result = kernel(*on_gpu)
            assert device_of(result) == 0, (name, kind)
            np.testing.assert_array_equal(as_host(result), expected, err_msg=f"{name} {kind}")
            again = kernel(*on_gpu)  # the resolved call, keyed with the device
            np.testing.assert_array_equal(as_host(again), expected, err_msg=f"{name} {kind} again")
        out = cp.zeros(expected.shape, cp.float32)
        assert kernel(*(cp.asarray(a) if isinstance(a, np.ndarray) and a.ndim else a for a in args),
                      out=out) is out
        np.testing.assert_array_equal(out.get(), expected)
    assert get_target("cuda").runtimes.get(0).switching


# -- two GPUs -----------------------------------------------------------------------------------------
def _gpu_count() -> int:
    from gpufuncs.targets.cuda.runtime import device_count

    return device_count()


multigpu = pytest.mark.multigpu


def _on_gpu(kind: str, array: np.ndarray, device: int):
    """``array`` as a device array of ``kind`` on GPU ``device``."""
    if kind == "numba":
        from numba import cuda

        with cuda.gpus[device]:
            return cuda.to_device(array)
    if kind == "cupy":
        cp = pytest.importorskip("cupy")
        with cp.cuda.Device(device):
            return cp.asarray(array)
    torch = pytest.importorskip("torch")
    return torch.from_numpy(array).to(f"cuda:{device}")


@multigpu
@pytest.mark.parametrize("kind", ["numba", "cupy", "torch"])
@pytest.mark.parametrize("name", builtin_names())
def test_arrays_on_gpu1_are_computed_there(name, kind):
    from gpufuncs.targets.cuda.recognize import device_of

    args = kernel_cases(np.random.default_rng(9), (300, 40))[name]
    on_1 = [_on_gpu(kind, a, 1) if isinstance(a, np.ndarray) and a.ndim else a for a in args]
    on_0 = [_on_gpu(kind, a, 0) if isinstance(a, np.ndarray) and a.ndim else a for a in args]
    kernel = gf.registry[name]
    result = kernel(*on_1)
    assert device_of(result) == 1
    np.testing.assert_array_equal(as_host(result), as_host(kernel(*on_0)))
    compare(kernel, args, as_host(result), target="cuda")
    out = _on_gpu(kind, np.zeros(np.shape(as_host(result)), np.float32), 1)
    assert kernel(*on_1, out=out) is out
    np.testing.assert_array_equal(as_host(out), as_host(result))


@multigpu
def test_mixed_devices_are_refused_naming_both():
    cp = pytest.importorskip("cupy")
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    a, b = _on_gpu("cupy", x, 0), _on_gpu("cupy", x, 1)
    with pytest.raises(ValueError, match=r"gaussian: 'x0' is on cuda:1 but 'x' is on cuda:0"):
        gf.gaussian(a, b, 1.0)
    out = cp.zeros(100, cp.float32)  # on the current device, 0
    with cp.cuda.Device(1):
        b_out = cp.zeros(100, cp.float32)
    with pytest.raises(ValueError, match=r"exp: out= is on cuda:1 but 'x' is on cuda:0"):
        gf.exp(a, out=b_out)
    assert not b_out.any()
    gf.exp(a, out=out)
    np.testing.assert_array_equal(out.get(), gf.exp(x, target="cuda"))
    with pytest.raises(ValueError, match=r"exp: device=0 but the device arrays are on cuda:1"):
        gf.exp(b, device=0)


@multigpu
def test_a_call_on_gpu1_leaves_the_callers_current_device_alone():
    cp = pytest.importorskip("cupy")
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    on_1 = _on_gpu("cupy", x, 1)
    with cp.cuda.Device(0):
        result = gf.exp(on_1)
        assert cp.cuda.Device().id == 0
        assert cp.zeros(3).device.id == 0
    assert result.device.id == 1
    with cp.cuda.Device(1):
        host_result = gf.exp(x, target="cuda")  # the current GPU, 1
        assert cp.cuda.Device().id == 1
    np.testing.assert_array_equal(host_result, result.get())


@multigpu
def test_a_thread_without_a_context_is_left_without_one():
    from cuda.bindings import driver

    x = np.linspace(-1, 1, 100, dtype=np.float32)
    on_1 = _on_gpu("numba", x, 1)
    left: list[int] = []

    def call_in_a_new_thread():  # a new thread has no current context
        left.append(int(driver.cuCtxGetCurrent()[1]))
        gf.exp(on_1)
        left.append(int(driver.cuCtxGetCurrent()[1]))

    thread = threading.Thread(target=call_in_a_new_thread)
    thread.start()
    thread.join()
    assert left == [0, 0], "a call on GPU 1 left its context current (CuPy would then use GPU 1)"


@multigpu
def test_a_numba_result_copies_to_host_with_another_gpu_current():
    from numba import cuda

    x = np.linspace(-1, 1, 100, dtype=np.float32)
    result = gf.exp(_on_gpu("numba", x, 0))  # memory of GPU 0's pool
    with cuda.gpus[1]:
        copied = result.copy_to_host()
    np.testing.assert_array_equal(copied, gf.exp(x, target="cuda"))


@multigpu
def test_device_all_uses_every_gpu_and_gives_one_gpus_values(monkeypatch):
    from gpufuncs.targets import get_target
    from gpufuncs.targets.cuda import host

    runtimes = get_target("cuda").runtimes
    monkeypatch.setattr(host, "CHUNK_BYTES", 1 << 20)
    x = np.random.default_rng(2).normal(size=1 << 24).astype(np.float32)
    one = gf.gaussian(x, 0.5, 1.5, target="cuda", device=0)
    for device in range(_gpu_count()):
        runtimes.get(device).set_pool_attribute("USED_MEM_HIGH", 0)
    threads = threads_of_chunks(monkeypatch)
    every = gf.gaussian(x, 0.5, 1.5, target="cuda", device="all")
    np.testing.assert_array_equal(every, one)
    used = [runtimes.get(d).pool_attribute("USED_MEM_HIGH") for d in range(_gpu_count())]
    assert all(u > 0 for u in used), f"device memory used per GPU: {used}"
    assert len(set(threads)) == _gpu_count()
    on_1 = gf.gaussian(x, 0.5, 1.5, target="cuda", device=1)
    np.testing.assert_array_equal(on_1, one)


@multigpu
def test_device_arrays_on_both_gpus_from_two_threads_at_once():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(4)
    host_inputs = [rng.normal(size=1 << 20).astype(np.float32) for _ in range(2)]
    expected = [gf.gaussian(x, 0.5, 1.5, target="cuda") for x in host_inputs]

    def work(device: int):
        x = _on_gpu("cupy", host_inputs[device], device)
        results = [gf.gaussian(x, 0.5, 1.5) for _ in range(50)]
        with cp.cuda.Device(device):
            cp.cuda.get_current_stream().synchronize()
        return results

    with ThreadPoolExecutor(2) as pool:
        per_device = list(pool.map(work, [0, 1]))
    for device, results in enumerate(per_device):
        assert all(r.device.id == device for r in results)
        for r in results[::10]:
            np.testing.assert_array_equal(r.get(), expected[device])
