"""The cuda target on a real GPU (every test is marked ``cuda``; skipped, with the reason, without one).

Run on a GPU machine with ``pytest -m cuda``. CuPy and torch tests skip when those are missing.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_properties import known_options

import gpufuncs as gf
from gpufuncs.kernels import builtin_names
from gpufuncs.spec import Tolerance
from gpufuncs.testing import check_kernel, compare, inputs

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(3)
F32_EPS = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def cuda():
    from numba import cuda

    return cuda


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


def normal(shape, dtype=np.float32):
    return RNG.normal(scale=2.0, size=shape).astype(dtype)


def cpu(kernel, *args):
    return kernel(*args, target="cpu")


def assert_ulp(result, x, ulps=2):
    """``result`` within ``ulps`` units in the last place of the correctly rounded ``exp(x)``
    (CUDA's ``expf`` is within 2 ULP)."""
    x = np.asarray(x)
    exact = np.exp(x.astype(np.float64)).astype(x.dtype)
    np.testing.assert_array_max_ulp(np.asarray(result), exact, maxulp=ulps)


def numba_transposed(cuda, buffer):
    """The transposed *view* of a 2-d Numba device array (Numba's own ``.T`` makes a copy)."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    rows, cols = buffer.shape
    item = buffer.dtype.itemsize
    return DeviceNDArray((cols, rows), (item, cols * item), buffer.dtype, gpu_data=buffer.gpu_data)


# -- gf.get and array kinds -------------------------------------------------------------------------
def test_get_returns_numbas_cuda_ufunc_objects(cuda):
    x = normal(1000)
    vectorized = gf.get("gaussian", target="cuda")
    assert "numba" in type(vectorized).__module__
    result = vectorized(cuda.to_device(x), np.float32(0.5), np.float32(2.0)).copy_to_host()
    compare(gf.gaussian, (x, np.float32(0.5), np.float32(2.0)), result, target="numba cuda")
    guvectorized = gf.get("hermite_norm", target="cuda")
    out = cuda.device_array((1000, 8), np.float32)
    guvectorized(cuda.to_device(x), cuda.to_device(np.empty(8, np.float32)), out)  # the size input
    compare(gf.hermite_norm, (x, 8), out.copy_to_host(), target="numba cuda")


class CaiOnly:
    """Any object with the CUDA array interface (v3) and nothing else."""

    def __init__(self, array):
        self._array = array
        self.__cuda_array_interface__ = array.__cuda_array_interface__


class DLPackOnly:
    """A CUDA DLPack producer without the CUDA array interface."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_result_is_the_kind_of_the_first_device_input(cuda, cp, torch):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    x = normal(257)
    cases = {
        "numba": (cuda.to_device(x), DeviceNDArray),
        "cupy": (cp.asarray(x), cp.ndarray),
        "torch": (torch.as_tensor(x, device="cuda"), torch.Tensor),
        "cai": (CaiOnly(cp.asarray(x)), DeviceNDArray),
        "dlpack": (DLPackOnly(cp.asarray(x)), DeviceNDArray),
    }
    for name, (arg, kind) in cases.items():
        result = gf.exp(arg)
        assert isinstance(result, kind), name
        host = result.cpu().numpy() if name == "torch" else (
            result.get() if name == "cupy" else result.copy_to_host())
        assert_ulp(host, x)
    mixed = gf.clamp(torch.as_tensor(x, device="cuda"), cp.asarray(x[::-1].copy()), 1.0)
    assert isinstance(mixed, torch.Tensor)
    np.testing.assert_array_equal(mixed.cpu().numpy(), np.clip(x, x[::-1], 1.0))


def test_out_may_be_a_device_array_of_any_kind(cuda, cp, torch):
    x = normal((40, 30))
    for out in (cp.empty((40, 30), cp.float32), torch.empty((40, 30), device="cuda"),
                cuda.device_array((40, 30), np.float32), cp.empty((30, 40), cp.float32).T):
        result = gf.gaussian(cuda.to_device(x), 0.25, 1.5, out=out)
        assert result is out
        host = out.cpu().numpy() if isinstance(out, torch.Tensor) else (
            out.get() if isinstance(out, cp.ndarray) else out.copy_to_host())
        compare(gf.gaussian, (x, 0.25, 1.5), host, dtype=np.float32, target="cuda")


def test_strided_broadcast_float16_and_where_on_device(cp):
    x = normal((64, 48))
    mu = normal((48,))
    dx = cp.asarray(x)
    compare(gf.gaussian, (x.T, mu[:, None], 2.0), gf.gaussian(dx.T, mu[:, None], 2.0).get(),
            target="cuda")
    assert_ulp(gf.exp(dx[::-2, 1::3]).get(), x[::-2, 1::3])
    half = gf.exp(cp.asarray(x, dtype=cp.float16))
    assert half.dtype == cp.float16
    expected = np.exp(x.astype(np.float16).astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(half.get(), expected, rtol=float(np.finfo(np.float16).eps))
    out = cp.full((64, 48), 7.0, cp.float64)
    mask = cp.asarray(x > 0)
    gf.clamp(dx, -1.0, 1.0, out=out, where=mask)
    np.testing.assert_array_equal(out.get(), np.where(x > 0, np.clip(x, -1, 1), 7.0))


def test_python_float_scalars_in_a_float32_call_are_numpys_float32(cp):
    """Python floats reach float32 kernel parameters packed directly (no NumPy scalar made per
    call): the results are bit for bit those of float32 scalars, also for scalars past float32's
    range (NumPy's cast makes them inf; clamp, exact, then equals np.clip and the cpu target)."""
    x = np.linspace(-3, 3, 1001, dtype=np.float32)
    dx = cp.asarray(x)
    for mu, sigma in ((0.1, 1.7), (1e-3, 3.3333333333), (-2.5e-39, 0.7)):
        expected = gf.gaussian(dx, np.float32(mu), np.float32(sigma)).get()
        np.testing.assert_array_equal(gf.gaussian(dx, mu, sigma).get(), expected)
    with np.errstate(over="ignore"):
        wide = gf.clamp(dx, -1e300, 1e39).get()
        np.testing.assert_array_equal(wide, np.clip(x, np.float32(-1e300), np.float32(1e39)))
        np.testing.assert_array_equal(wide, gf.clamp(x, -1e300, 1e39, target="cpu"))
        np.testing.assert_array_equal(gf.clamp(dx, -1e300, 0.5).get(), np.clip(x, -np.inf, np.float32(0.5)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_and_large_calls_take_their_own_thread_layout_and_agree(dtype, cp):
    """Calls too small to give every multiprocessor a block of several elements per thread run
    one element per thread (lower latency); larger ones several. Around the switch (block edges,
    a partial last block) both layouts meet the kernels' declared tolerances, and an element
    computed in a small call is bit for bit the one computed in a large call."""
    from gpufuncs.targets import get_target
    from gpufuncs.targets.cuda.compile import elements_per_thread
    from gpufuncs.targets.cuda.runtime import BLOCK

    multiprocessors = get_target("cuda").runtimes.get(0).multiprocessors
    per_thread = elements_per_thread(gf.gaussian.spec, np.dtype(dtype), 10**9, multiprocessors)
    switch = BLOCK * per_thread * multiprocessors
    sizes = (1, 1000, switch - 1, switch, switch + 1, 3 * switch + 7)
    assert {elements_per_thread(gf.gaussian.spec, np.dtype(dtype), n, multiprocessors)
            for n in sizes} == {1, per_thread}
    for n in sizes:
        x = normal(n, dtype)
        for kernel, args in ((gf.gaussian, (0.25, 1.5)), (gf.exp, ()), (gf.clamp, (-1.0, 1.0))):
            result = kernel(cp.asarray(x), *args).get()
            compare(kernel, (x, *args), result, dtype=dtype, target="cuda")
            tail = slice(max(0, n - 999), n)
            np.testing.assert_array_equal(kernel(cp.asarray(x[tail]), *args).get(), result[tail])


def test_dtype_casting_and_order_keywords_on_device(cp):
    x = normal((64, 48), np.float64)
    in_f32 = gf.exp(cp.asarray(x), dtype=np.float32)
    assert in_f32.dtype == cp.float32
    assert_ulp(in_f32.get(), x.astype(np.float32))
    with pytest.raises(TypeError, match="casting='no'"):
        gf.exp(cp.asarray(x), dtype=np.float32, casting="no")
    with pytest.raises(TypeError, match="to out= dtype int32"):
        gf.exp(cp.asarray(x), out=cp.zeros((64, 48), cp.int32))
    fortran = gf.exp(cp.asarray(x), order="F")
    assert fortran.flags.f_contiguous and not fortran.flags.c_contiguous
    np.testing.assert_allclose(fortran.get(), cpu(gf.exp, x), rtol=2 * np.finfo(np.float64).eps)


@pytest.mark.parametrize("shift", [1, 4096, -4096])
def test_out_overlapping_an_input_gives_the_result_without_overlap(cp, shift):
    base = np.linspace(0.0, 1.0, 10**6 + 1)
    src, dst = (slice(0, -shift), slice(shift, None)) if shift > 0 else (slice(-shift, None), slice(0, shift))
    expected = gf.exp(cp.asarray(base[src])).get()  # the same computation, without overlap
    x = cp.asarray(base)
    gf.exp(x[src], out=x[dst])
    np.testing.assert_array_equal(x[dst].get(), expected)
    in_place = cp.asarray(base)
    gf.exp(in_place, out=in_place)
    np.testing.assert_array_equal(in_place.get(), gf.exp(cp.asarray(base)).get())
    np.testing.assert_allclose(expected, np.exp(base[src]), rtol=2 * np.finfo(np.float64).eps)


# -- no copies between host and device --------------------------------------------------------------
def _copy_counters(monkeypatch, cp, torch):
    """Count every Python-level host<->device copy entry point we know of."""
    from cuda.bindings import driver as cuda_driver
    from numba.cuda.cudadrv import devicearray
    from numba.cuda.cudadrv import driver as numba_driver

    from gpufuncs.targets.cuda import runtime

    calls: list[str] = []

    def counting(owner, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    for name in dir(cuda_driver):
        if name.startswith("cuMemcpy"):
            counting(cuda_driver, name)
    for name in ("host_to_device", "device_to_host"):
        counting(numba_driver, name)
    counting(devicearray.DeviceNDArray, "copy_to_host")
    counting(numba_driver.Context, "memalloc")  # Numba's own (non-pooled) allocator
    counting(runtime.Runtime, "copy")
    for name in ("asnumpy", "asarray"):
        counting(cp, name)
    counting(cp.ndarray, "get")
    for name in ("memcpy", "memcpyAsync"):
        counting(cp.cuda.runtime, name)
    for name in ("cpu", "numpy", "to"):
        counting(torch.Tensor, name)
    return calls


def test_device_inputs_never_copy_to_or_from_the_host(monkeypatch, cuda, cp, torch):
    """Two proofs: no copy function is called, and 1 GiB in+out takes less than PCIe could move.

    The first counts Python-level entry points only (CUDA driver bindings, Numba, CuPy, torch and
    our runtime's copy); a copy done inside a C extension would escape it. The second is physical:
    a round trip of 2 GiB over PCIe 5 x16 (64 GB/s each way at best) needs more than 33 ms.
    """
    n = 1 << 28  # 1 GiB of float32
    x, out = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    x_numba, x_torch = cuda.to_device(np.ones(1000, np.float32)), torch.ones(1000, device="cuda")
    gf.gaussian(x, 0.0, 1.0, out=out)
    cp.cuda.get_current_stream().synchronize()
    calls = _copy_counters(monkeypatch, cp, torch)
    gf.gaussian(x, 0.0, 1.0, out=out)
    gf.exp(x[:1000])
    gf.clamp(x_numba, 0.0, 0.5)
    gf.hermite_norm(x_torch, 8)
    gf.hermite_norm(x_numba, 8, out=cp.empty((8, 1000), cp.float32).T)
    assert calls == []  # no copies, and Numba outputs came from the pool, not cuMemAlloc
    start = time.perf_counter()
    for _ in range(5):
        gf.gaussian(x, 0.0, 1.0, out=out)
    cp.cuda.get_current_stream().synchronize()
    per_call = (time.perf_counter() - start) / 5
    assert per_call < 0.020, f"{per_call * 1e3:.1f} ms per 1 GiB call: data may have left the GPU"
    assert float(out[12345]) == pytest.approx(float(cpu(gf.gaussian, np.float32(1), 0.0, 1.0)), rel=1e-6)


def _forget_resolved_calls(monkeypatch, kernel):
    """``kernel``'s resolved calls forgotten for the test (each keeps the allocator it chose)."""
    monkeypatch.setattr(kernel, "_resolved", {t: {} for t in kernel._resolved})


def test_numba_results_come_from_the_stream_ordered_pool(cuda, monkeypatch):
    from gpufuncs.targets import get_target
    from gpufuncs.targets.cuda import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "cupy_loaded", lambda: False)  # no CuPy in the process
    _forget_resolved_calls(monkeypatch, gf.exp)
    runtime = get_target("cuda").runtimes.get()
    x_host = normal(1 << 20)
    x = cuda.to_device(x_host)
    before = runtime.pool_attribute("USED_MEM_CURRENT")
    result = gf.exp(x)
    assert runtime.pool_attribute("USED_MEM_CURRENT") - before >= result.nbytes
    compare(gf.exp, (x_host,), result.copy_to_host(), target="cuda")
    del result
    gc.collect()
    cuda.synchronize()
    assert runtime.pool_attribute("USED_MEM_CURRENT") == before  # freed back to the pool


def test_numba_results_come_from_cupys_pool_where_cupy_is_imported(cuda, cp, monkeypatch):
    from gpufuncs.targets import get_target

    _forget_resolved_calls(monkeypatch, gf.exp)
    runtime, pool = get_target("cuda").runtimes.get(), cp.get_default_memory_pool()
    x_host = normal(1 << 20)
    stream = cuda.stream()  # a stream of its own: CuPy's pool must order the block on it
    x = cuda.to_device(x_host, stream=stream)
    ours, theirs = runtime.pool_attribute("USED_MEM_CURRENT"), pool.used_bytes()
    result = gf.exp(x)
    assert pool.used_bytes() - theirs >= result.nbytes
    assert runtime.pool_attribute("USED_MEM_CURRENT") == ours
    assert type(result) is type(x)
    compare(gf.exp, (x_host,), result.copy_to_host(stream=stream), target="cuda")
    del result
    gc.collect()
    assert pool.used_bytes() == theirs  # freed back to CuPy's pool


# -- streams --------------------------------------------------------------------------------------------
SLOW_FILL = r"""
extern "C" __global__ void slow_fill(float* x, float value, long long n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = value;
}
"""


def _slow_fill(cp, x, value):
    """Write ``value`` into ``x`` on CuPy's current stream after ~50 ms of spinning."""
    kernel = cp.RawKernel(SLOW_FILL, "slow_fill")
    n = x.size
    kernel(((n + 255) // 256,), (256,), (x, np.float32(value), np.int64(n), np.int64(10**8)))


def test_cupy_current_stream_orders_the_call(cp):
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.zeros(1 << 20, cp.float32)
        _slow_fill(cp, x, 1.0)
        y = gf.exp(x)  # no sync: must run after the fill, on CuPy's current stream
        stream.synchronize()
    assert bool((y == np.float32(np.e)).all())


@gf.ufunc(signatures=["int64(int32, int64, int64)"], name="test_scaled_add", replace=True)
def scaled_add(a, b, c):
    return a * b + c


def test_cupy_calls_that_allocate_are_checked_on_every_call(cp):
    """All-CuPy calls with a new output (the commonest device call, on its kept executor):
    right values in a new array on the device, every input's alignment checked by its own
    itemsize, and the same call signature with ``out=`` and ``stream=``."""
    a32 = np.arange(-40, 40, dtype=np.int32)
    b64, c64 = np.arange(80, dtype=np.int64) * 3, np.full(80, -7, np.int64)
    expected = scaled_add(a32, b64, c64, target="cpu")
    buffer = cp.zeros(8 * 81, cp.uint8)
    shifted = buffer[4: 4 + 4 * 80].view(cp.int32)  # 4-aligned: fine for int32
    shifted[...] = cp.asarray(a32)
    b, c = cp.asarray(b64), cp.asarray(c64)
    misaligned = buffer[1: 1 + 8 * 80].view(cp.int64)
    for _ in range(3):  # the first call resolves; the others take the kept executor
        result = scaled_add(shifted, b, c)
        assert isinstance(result, cp.ndarray) and result.dtype == np.int64 and result.shape == (80,)
        np.testing.assert_array_equal(result.get(), expected)
        with pytest.raises(ValueError, match=r"test_scaled_add: c is a device array at .* misaligned"):
            scaled_add(shifted, b, misaligned)
        out = cp.full(80, 99, cp.int64)
        assert scaled_add(shifted, b, c, out=out) is out
        np.testing.assert_array_equal(out.get(), expected)
        stream = cp.cuda.Stream(non_blocking=True)
        on_stream = scaled_add(shifted, b, c, stream=stream)
        stream.synchronize()
        np.testing.assert_array_equal(on_stream.get(), expected)


def test_torch_tensors_on_the_cpu_and_the_gpu_are_told_apart_on_every_call(torch):
    """A CPU tensor and a CUDA tensor of one dtype and shape have different call signatures,
    whichever comes first: the CPU one computes on the host, the CUDA one on the GPU."""
    x = np.linspace(-2, 2, 50)
    on_host, on_device = torch.as_tensor(x), torch.as_tensor(x, device="cuda")
    expected = gf.exp(x, target="cpu")
    for tensor in (on_host, on_device, on_host, on_device):
        result = gf.exp(tensor)
        if tensor.is_cuda:
            assert isinstance(result, torch.Tensor) and result.is_cuda
            compare(gf.exp, (x,), result.cpu().numpy(), target="cuda")
        else:
            assert not getattr(result, "is_cuda", False)
            np.testing.assert_array_equal(np.asarray(result), expected)


def test_torch_current_stream_orders_the_call(torch):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(10**8)
        x.fill_(1.0)
        y = gf.exp(x)
        out = torch.empty_like(x)
        gf.exp(x, out=out)
    stream.synchronize()
    assert bool((y == float(np.float32(np.e))).all()) and bool((out == y).all())


@pytest.mark.parametrize("kind", ["numba", "cuda.core", "cupy", "torch"])
def test_stream_argument_waits_for_the_producer_stream(kind, cuda, cp, torch):
    producer = cp.cuda.Stream(non_blocking=True)
    with producer:
        x = cp.zeros(1 << 20, cp.float32)
        producer.synchronize()
        _slow_fill(cp, x, 1.0)
    if kind == "numba":
        stream = cuda.stream()
    elif kind == "cuda.core":
        from cuda.core import Device

        stream = Device().create_stream()
    elif kind == "cupy":
        stream = cp.cuda.Stream(non_blocking=True)
    else:
        stream = torch.cuda.Stream()
    with producer:  # CuPy's current stream is the producer, the call names another
        y = gf.exp(x, stream=stream)
    (stream.synchronize if hasattr(stream, "synchronize") else stream.sync)()
    assert bool((y == np.float32(np.e)).all())


# -- hermite_norm's layout ----------------------------------------------------------------------------
def test_hermite_writes_order_major_and_returns_the_transposed_view(cp):
    x = normal(5000)
    result = gf.hermite_norm(cp.asarray(x), 32)
    assert result.shape == (5000, 32) and result.strides == (4, 5000 * 4)
    compare(gf.hermite_norm, (x, 32), result.get(), target="cuda")  # its declared tolerance
    buffer = cp.zeros((32, 5000), cp.float32)
    assert gf.hermite_norm(cp.asarray(x), 32, out=buffer.T) is not None
    np.testing.assert_array_equal(buffer.get().T, result.get())  # written in place
    contiguous = cp.zeros((5000, 32), cp.float32)
    gf.hermite_norm(cp.asarray(x), 32, out=contiguous)
    np.testing.assert_array_equal(contiguous.get(), buffer.get().T)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hermite_rescaled_recurrence_matches_cpu(cp, dtype):
    """500 orders up to |x| = 30 outgrow 2**64, so the kernel's second, rescaled pass runs (and
    float32 overflows to signed inf): the GPU gives what the cpu target gives (mpmath-checked in
    test_kernels.py), with inf and NaN in the same places."""
    x = np.array([-30.0, -12.5, -1.5, 0.0, 0.75, 7.0, 30.0, np.inf, -np.inf, np.nan], dtype)
    with np.errstate(all="ignore"):
        expected = cpu(gf.hermite_norm, x, 500)
    result = gf.hermite_norm(cp.asarray(x), 500).get()
    if dtype == np.float32:
        assert np.isinf(expected).sum() > 800
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(result) * np.sign(result),
                                  np.isinf(expected) * np.sign(expected))
    finite = np.isfinite(expected)
    scale = np.broadcast_to(np.max(np.abs(np.where(finite, expected, 0)), axis=-1, keepdims=True),
                            expected.shape)
    rtol = gf.hermite_norm.spec.tolerance(dtype, target="cuda").rtol
    with np.errstate(invalid="ignore"):  # inf - inf outside ``finite``
        error = np.abs(result - expected)
    assert (error[finite] <= rtol * scale[finite]).all()


def test_transposed_outs_are_written_in_place_without_copies(monkeypatch, cuda, cp, torch):
    """A transposed ``out`` (a strided view of an ``(n, samples)`` buffer) is written in place.

    DESIGN.md reported Numba's CUDA gufunc losing writes to a transposed Numba ``out``; measured
    here, that comes from Numba's ``DeviceNDArray.T``, which is a transposing *copy* (writes to it
    never reach the buffer, whoever makes them). With a real strided view, numba-cuda 0.30.4's
    gufunc writes correctly too; both results are checked against each other below.
    """
    x = normal(512)
    dx = cuda.to_device(x)
    buffer = cuda.to_device(np.zeros((16, 512), np.float32))
    assert buffer.T.gpu_data.device_ctypes_pointer.value != buffer.gpu_data.device_ctypes_pointer.value
    theirs = cuda.to_device(np.zeros((16, 512), np.float32))
    cupy_buffer = cp.zeros((16, 512), cp.float32)
    gf.hermite_norm(dx, 16, out=numba_transposed(cuda, buffer))  # compile before counting
    calls = _copy_counters(monkeypatch, cp, torch)
    gf.hermite_norm(dx, 16, out=numba_transposed(cuda, buffer))
    gf.hermite_norm(dx, 16, out=cupy_buffer.T)
    assert calls == []
    monkeypatch.undo()
    compare(gf.hermite_norm, (x, 16), buffer.copy_to_host().T, target="cuda")
    np.testing.assert_array_equal(cupy_buffer.get(), buffer.copy_to_host())
    size = cuda.to_device(np.empty(16, np.float32))
    gf.get("hermite_norm", target="cuda")(dx, size, numba_transposed(cuda, theirs))
    np.testing.assert_allclose(theirs.copy_to_host(), buffer.copy_to_host(), rtol=1e-5, atol=1e-6)


# -- host arrays with target="cuda" ----------------------------------------------------------------------
# -- ufunc methods on device arrays ----------------------------------------------------------------
def test_outer_and_reduce_on_device_arrays(hypot_kernel, cp, torch):
    a, m = normal(300, np.float64), normal((257, 6), np.float64)
    outer = hypot_kernel.outer(cp.asarray(a), cp.asarray(m))
    assert isinstance(outer, cp.ndarray) and outer.shape == (300, 257, 6)
    np.testing.assert_allclose(outer.get(), np.hypot.outer(a, m), rtol=1e-15)
    for axis in (0, 1, -1):
        reduced = hypot_kernel.reduce(cp.asarray(m), axis=axis)
        assert isinstance(reduced, cp.ndarray)
        np.testing.assert_allclose(reduced.get(), np.hypot.reduce(m, axis=axis), rtol=1e-14)
    kept = hypot_kernel.reduce(torch.as_tensor(m, device="cuda"), axis=0, keepdims=True, initial=3.0)
    assert isinstance(kept, torch.Tensor) and tuple(kept.shape) == (1, 6)
    np.testing.assert_allclose(kept.cpu().numpy(), np.hypot.reduce(m, axis=0, keepdims=True,
                                                                   initial=3.0), rtol=1e-14)
    out = cp.full(6, -1.0)
    assert hypot_kernel.reduce(cp.asarray(m), axis=0, out=out) is out
    np.testing.assert_allclose(out.get(), np.hypot.reduce(m, axis=0), rtol=1e-14)


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_reduce_of_device_arrays_takes_axis_tuples_out_and_where_as_numpy(hypot_kernel, cp, torch, kind):
    """CuPy arrays reduce in pieces, torch tensors in trees, over any axes, with NumPy's results
    (its start from the identity: hypot of one -3.0 is 3.0), where=, out= and keepdims; the
    result is of the input's kind."""
    m = normal((3, 40, 5), np.float64)
    m[0, 0, :] = -3.0
    to = (lambda a: cp.asarray(a)) if kind == "cupy" else (lambda a: torch.as_tensor(a, device="cuda"))
    back = (lambda r: r.get()) if kind == "cupy" else (lambda r: r.cpu().numpy())
    given = to(m)
    for axis in (None, (0, 2), (2, 0), 1, ()):
        for keepdims in (False, True):
            got = hypot_kernel.reduce(given, axis=axis, keepdims=keepdims)
            assert type(got) is type(given)
            want = np.hypot.reduce(m, axis=axis, keepdims=keepdims)
            np.testing.assert_allclose(back(got), want, rtol=1e-14)
    mask = np.random.default_rng(6).random(m.shape) > 0.5
    for where in (mask, to(mask)):
        np.testing.assert_allclose(back(hypot_kernel.reduce(given, axis=(0, 2), where=where)),
                                   np.hypot.reduce(m, axis=(0, 2), where=mask), rtol=1e-14)
    out = to(np.full(40, -1.0))
    assert hypot_kernel.reduce(given, axis=(0, 2), out=out, initial=2.0) is out
    np.testing.assert_allclose(back(out), np.hypot.reduce(m, axis=(0, 2), initial=2.0), rtol=1e-14)


@gf.ufunc(signatures=["int64(int64, int64)", "float32(float32, float32)", "float64(float64, float64)"],
          reference=lambda a, b: a + b, identity=0, name="test_reduce_add", replace=True)
def reduce_add(a, b):
    return a + b


def test_reduce_of_cupy_arrays_runs_in_pieces_exactly_and_repeats(cp):
    """A long CuPy reduction cuts its axis into pieces, a GPU thread each, then reduces their
    results (one or two launches a level): integers exact, floats as close as a pairwise sum,
    keepdims/initial/dtype as NumPy's, the same bits on every call; a CuPy array comes back."""
    rng = np.random.default_rng(11)
    k = rng.integers(-1000, 1000, (3, 3_000_017))
    result = reduce_add.reduce(cp.asarray(k), axis=1)
    assert isinstance(result, cp.ndarray) and result.dtype == np.int64
    np.testing.assert_array_equal(result.get(), k.sum(axis=1))
    np.testing.assert_array_equal(reduce_add.reduce(cp.asarray(k.T), axis=0, keepdims=True, initial=7).get(),
                                  k.T.sum(axis=0, keepdims=True) + 7)
    x = rng.standard_normal(20_000_003)
    total = reduce_add.reduce(cp.asarray(x))
    # in order within pieces of 76, then levels of 64: well under 300 eps of the magnitudes
    assert abs(float(total) - math.fsum(x)) <= 300 * np.finfo(np.float64).eps * np.abs(x).sum()
    assert total.tobytes() == reduce_add.reduce(cp.asarray(x)).tobytes()
    in_f64 = reduce_add.reduce(cp.asarray(x.astype(np.float32)), dtype=np.float64)
    assert in_f64.dtype == np.float64
    np.testing.assert_allclose(float(in_f64), np.sum(x.astype(np.float32), dtype=np.float64), rtol=1e-10)


def test_reduce_planned_in_one_launch_reruns_only_for_arrays_like_its_own(cp, monkeypatch):
    """A whole-array reduce that ran in one launch is kept as a plan for arrays of the same
    class, dtype, shape and contiguity with the same keywords: new values reuse it, and any
    other kind of call (keepdims, a dtype, out=, initial, a strided array of the same shape,
    another shape) decides afresh; every answer is NumPy's."""
    from gpufuncs.dispatch import methods

    monkeypatch.setattr(methods, "_PLANS", {})  # (none from the tests before)
    rng = np.random.default_rng(12)
    k = rng.integers(-1000, 1000, (400, 300))
    for _ in range(2):
        k = k + 1  # new values, the same kind of array
        assert int(reduce_add.reduce(cp.asarray(k), axis=None)) == k.sum()
    assert len(methods._PLANS) == 1
    d = cp.asarray(k)
    assert reduce_add.reduce(d, axis=None, keepdims=True).shape == (1, 1)
    assert int(reduce_add.reduce(d, axis=(0, 1), initial=5)) == k.sum() + 5
    assert reduce_add.reduce(d, axis=None, dtype=np.float64).dtype == np.float64
    out = cp.zeros((), np.int64)
    assert reduce_add.reduce(d, axis=None, out=out) is out and int(out) == k.sum()
    assert int(reduce_add.reduce(cp.asfortranarray(d), axis=None)) == k.sum()  # the pieces
    assert int(reduce_add.reduce(d[::2], axis=None)) == k[::2].sum()
    assert int(reduce_add.reduce(d.ravel())) == k.sum()  # axis=0 of 1-d: one launch, a plan of its own
    assert int(reduce_add.reduce(k, axis=None)) == k.sum()  # a host array: no plan
    assert len(methods._PLANS) == 4  # and keepdims, dtype, ravel


def test_host_arrays_give_the_cpu_results():
    x = normal((300, 200))
    compare(gf.gaussian, (x, 0.5, 2.0), gf.gaussian(x, 0.5, 2.0, target="cuda"), target="cuda")
    np.testing.assert_array_equal(gf.clamp(x.T, -1.0, x[:, 0], target="cuda"),
                                  np.clip(x.T, -1.0, x[:, 0]))
    compare(gf.hermite_norm, (x, 5), gf.hermite_norm(x, 5, target="cuda"), target="cuda")


def test_host_arrays_go_through_bounded_device_memory(monkeypatch, cuda):
    from gpufuncs.targets import get_target
    from gpufuncs.targets.cuda import host

    runtime = get_target("cuda").runtimes.get()
    monkeypatch.setattr(host, "CHUNK_BYTES", 1 << 20)
    x = normal(1 << 25)  # 128 MiB in, 128 MiB out
    cuda.synchronize()
    runtime.set_pool_attribute("USED_MEM_HIGH", 0)
    result = gf.exp(x, target="cuda")
    used = runtime.pool_attribute("USED_MEM_HIGH")
    assert used <= 16 << 20, f"{used} bytes of device memory in use for 256 MiB of data"
    assert_ulp(result[::997], x[::997])


def test_host_input_larger_than_free_gpu_memory(cp):
    cp.get_default_memory_pool().free_all_blocks()
    free, _ = cp.cuda.runtime.memGetInfo()
    hog = cp.empty(free - (1 << 30), cp.uint8)  # leave 1 GiB free
    try:
        x = np.full(1 << 29, 0.5, np.float32)  # 2 GiB in, 2 GiB out
        x[::4097] = -1.5
        result = gf.exp(x, target="cuda")
    finally:
        del hog
        cp.get_default_memory_pool().free_all_blocks()
    assert_ulp(result[::4097], x[::4097])
    assert_ulp(result[1::4097], x[1::4097])


# -- agreement with references and cpu (Hypothesis) ------------------------------------------------
@pytest.fixture
def cuda_exp(restore_registry):
    """``exp`` with CUDA's documented float32 accuracy: ``expf`` is within 2 ULP (1 for float64)."""
    return gf.ufunc(signatures=gf.float_signatures(1), reference=np.exp, name="exp_cuda", replace=True,
                    tolerances={np.float32: Tolerance(rtol=0.0, ulps=2),
                                np.float64: Tolerance(rtol=0.0, ulps=1)})(gf.exp.spec.pyfunc)


@pytest.mark.parametrize("name", builtin_names())
def test_host_path_agrees_with_reference_and_cpu(name, cuda_exp):
    kernel = cuda_exp if name == "exp" else gf.registry[name]
    check_kernel(kernel, targets=("cpu", "cuda"), max_examples=25, max_dims=2, max_side=6,
                 **known_options(name))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", builtin_names())
def test_device_path_agrees_with_reference_and_cpu(name, dtype, cp, cuda_exp):
    kernel = cuda_exp if name == "exp" else gf.registry[name]

    exclude = known_options(name).get("exclude")

    @settings(max_examples=20, deadline=None)
    @given(inputs(kernel, dtype, max_dims=2, max_side=6), st.booleans())
    def check(args, first_on_host):
        arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.ndim]
        assume(arrays)  # all scalars: the host path's
        # The first array may stay on the host among device ones (copied in by the call).
        on_host = arrays[:1] if first_on_host and len(arrays) > 1 else []
        device = [cp.asarray(a) if i in arrays and i not in on_host else a for i, a in enumerate(args)]
        assume(exclude is None or not exclude(args, dtype))
        result = kernel(*device, target="cuda")
        host = cp.asnumpy(result)
        compare(kernel, args, host, dtype=dtype, target="cuda")
        expected = cpu(kernel, *args)
        if name == "clamp":
            np.testing.assert_array_equal(host, expected)
        np.testing.assert_array_equal(np.isnan(host), np.isnan(expected))

    check()


def test_cuda_expf_is_within_2_ulp():
    x = np.linspace(-103.0, 88.7, 2_000_003, dtype=np.float32)
    got = gf.exp(x, target="cuda").astype(np.float64)
    exact = np.exp(x.astype(np.float64))
    finite = np.isfinite(exact.astype(np.float32)) & (exact > np.finfo(np.float32).tiny)
    ulp = np.spacing(exact[finite].astype(np.float32)).astype(np.float64)
    err = np.abs(got[finite] - exact[finite]) / ulp
    assert err.max() <= 2.0, f"max error {err.max():.2f} ULP"


# -- compile once, cached on disk -------------------------------------------------------------------
_FIRST_CALL = """
import sys, time
import numpy as np, cupy as cp, gpufuncs as gf
from gpufuncs.targets.cuda import cubins
for key in sys.argv[1:]:  # damaged entries: a name and bytes the driver cannot load
    cubins.save(key, "no_such_kernel", b"not a cubin")
del cubins.saved[:]
x = cp.linspace(-3.0, 3.0, 1001, dtype=cp.float32); cp.cuda.Device().synchronize()
t = time.perf_counter(); y = gf.gaussian(x, 0.5, 1.5); cp.cuda.Device().synchronize()
t = time.perf_counter() - t
compiler = "numba.cuda.dispatcher" in sys.modules  # (before the check: the cpu target's call)
expected = gf.gaussian(cp.asnumpy(x), 0.5, 1.5, target="cpu")
np.testing.assert_allclose(cp.asnumpy(y), expected, rtol=1e-6, atol=1e-7)
print("loaded", len(cubins.loaded), "saved", len(cubins.saved), "numba-cuda", compiler,
      f"first call {t:.3f} s")
print(*cubins.saved)
"""


def run_first_call(env: dict[str, str], *damaged: str) -> list[str]:
    """:data:`_FIRST_CALL` in a new process: its two lines of output."""
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL, *damaged], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    return proc.stdout.splitlines()


def test_a_new_process_loads_kernels_from_the_disk_cache(cp, tmp_path):
    """The first process compiles and saves the cubin; the next loads it with the driver alone,
    without importing numba-cuda's compiler (its target context cost 0.7 s of a first call);
    a damaged entry is compiled and written again."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run(*damaged: str) -> list[str]:
        return run_first_call(env, *damaged)

    first = run()
    assert first[0].startswith("loaded 0 saved 1 numba-cuda True"), first
    assert run()[0].startswith("loaded 1 saved 0 numba-cuda False")
    healed = run(first[1])
    assert healed[0].startswith("loaded 0 saved 1 numba-cuda True") and healed[1] == first[1], healed
    assert run()[0].startswith("loaded 1 saved 0 numba-cuda False")


def test_warmup_compiles_cuda_kernels_that_a_new_process_loads(cp, tmp_path):
    """``python -m gpufuncs warmup --targets cuda`` saves the kernels of the commonest calls
    (counted), a second warmup finds them all, and a process's first call loads them."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    argv = [sys.executable, "-m", "gpufuncs", "warmup", "--kernels", "gaussian", "--targets", "cuda",
            "--dtypes", "float32", "--json"]
    rows = []
    for _ in range(2):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows.append(json.loads(proc.stdout)["rows"])
    assert [r["target"] for r in rows[0]] == ["cuda"] and rows[0][0]["compiled"] >= 1, rows
    assert rows[1][0]["compiled"] == 0, rows
    assert run_first_call(env)[0].startswith("loaded 1 saved 0 numba-cuda False")


def test_a_call_signature_first_seen_in_a_new_thread(cp):
    # Dask's threaded scheduler resolves calls in worker threads that never used CUDA before.
    from concurrent.futures import ThreadPoolExecutor

    x = np.linspace(-2.0, 2.0, 777)  # a shape no other test resolves
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(gf.hermite_norm, cp.asarray(x), 5).result()
    compare(gf.hermite_norm, (x, 5), result.get(), target="cuda")  # its declared tolerance


def test_muladd_is_fused_on_the_gpu(cp):
    """The GPU compiler fuses ``gf.muladd``'s ``a * b + c``: the exact -2**-60, which the
    rounded product loses."""
    from test_user_kernels import _A, _B, user_muladd

    result = user_muladd(cp.asarray([_A]), _B, -1.0)
    assert result.get()[0] == -(2.0**-60)
