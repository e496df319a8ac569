"""The cuda target's own kernels and launch logic on the CUDA simulator (no GPU needed).

``NUMBA_ENABLE_CUDASIM=1`` must be set before ``numba.cuda`` is first imported, so in a normal
run this module holds one test that runs the cuda tests of this module and of the other cuda
modules again in a subprocess with the variable set; there the tests below run on tiny inputs.
The simulator executes the very kernels of the real target (pointer loads, strided offsets,
casts, ``where``, core views), with host memory standing in for device memory; Numba's own CUDA
ufunc objects do not run there.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from simulator import run_on_simulator

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


if not SIMULATED:

    @pytest.mark.slow
    def test_cuda_target_on_the_simulator():
        run_on_simulator(__file__, "test_multigpu.py", "test_cuda_views.py", "test_cuda_axes.py",
                         "test_types.py", "test_lazy.py", "test_several_outputs.py",
                         "test_boundscheck.py", "test_complex.py", "test_errstate.py",
                         "test_fuse.py", "test_reduction_kernels.py", "test_fuse_reduce.py")

    def test_without_a_gpu_cuda_is_refused_with_a_reason_and_auto_stays_on_the_host():
        # Hide every GPU from a fresh process (on CI there is none anyway).
        code = (
            "import numpy as np, gpufuncs as gf\n"
            "x = np.ones(3, np.float32)\n"
            "assert 'cuda' not in gf.available_targets()\n"
            "assert type(gf.exp(x)) is np.ndarray\n"
            "try:\n"
            "    gf.exp(x, target='cuda')\n"
            "except gf.CudaUnavailableError as exc:\n"
            "    print('refused:', exc)\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        env["CUDA_VISIBLE_DEVICES"] = ""
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "refused: exp: target 'cuda' is unavailable:" in proc.stdout, proc.stdout

    def test_launch_parameters_hold_python_floats_as_numpy_converts_them():
        """Python floats go into float32 kernel parameters without a NumPy scalar in between:
        the packed bits are NumPy's conversion, also past float32's range (inf, with NumPy's
        overflow warning, where struct alone would refuse the value)."""
        from gpufuncs.targets.cuda.launch import Packer, _Hole

        rng = np.random.default_rng(7)
        values = [*rng.normal(size=200) * 10.0 ** rng.integers(-45, 38, 200), 3.4028234663852886e38,
                  1.401298464324817e-45, 5e-324, -0.0, float("inf"), float("nan")]
        for launches in (False, True):  # the method, and the closure that launches call
            packer = Packer((_Hole(0, np.dtype(np.float32), False), _Hole(1, np.dtype(np.float32), True)))
            pack = packer.packer() if launches else packer.pack
            for value in values:
                address = pack([value, 0x1234])
                stored = packer._local.store
                assert address == packer._local.address
                assert stored[0].astype(np.uint32) == np.float32(value).view(np.uint32), value
                assert stored[1] == 0x1234
            for huge in (1e300, -1e39, 3.4028235677973366e38):  # the last rounds up past float32's max
                with pytest.warns(RuntimeWarning, match="overflow"):
                    pack([huge, 0x1234])
                stored = np.uint32(packer._local.store[0]).view(np.float32)
                assert stored == np.float32(np.sign(huge) * np.inf)

else:
    from numba import cuda

    # The cuda target's tests, run where it is available: the simulator's child selects them so.
    pytestmark = pytest.mark.cuda

    import gpufuncs as gf
    from gpufuncs.targets.base import collapse
    from gpufuncs.targets.cuda import host
    from gpufuncs.targets.cuda.arrays import stream_handle

    class HostCAI:
        """A ``__cuda_array_interface__`` object over host memory (the simulator's device memory)."""

        def __init__(self, array: np.ndarray) -> None:
            self.array = array

        @property
        def __cuda_array_interface__(self) -> dict:
            a = self.array
            return {"shape": a.shape, "strides": a.strides, "typestr": a.dtype.str,
                    "data": (a.ctypes.data, False), "version": 3, "stream": None}

    RNG = np.random.default_rng(7)

    @pytest.fixture(autouse=True)
    def _same_values_in_any_order():
        """Each test draws its values from a generator of its own, seeded alike: its data do not
        depend on which tests ran before it in the same worker."""
        global RNG
        RNG = np.random.default_rng(7)

    def values(shape, dtype=np.float32):
        return RNG.normal(scale=2.0, size=shape).astype(dtype)

    def cpu(kernel, *args, **kwargs):
        return kernel(*args, target="cpu", **kwargs)

    def to_host(result):
        return result.copy_to_host() if hasattr(result, "copy_to_host") else np.asarray(result)

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    @pytest.mark.parametrize("name", ["exp", "clamp", "gaussian"])
    def test_device_arrays_match_cpu(name, dtype):
        kernel = gf.registry[name]
        args = [values(5, dtype) for _ in range(kernel.nin)]
        if name == "gaussian":
            args[2] = np.abs(args[2]) + dtype(0.5)
        result = kernel(*(cuda.to_device(a) for a in args))
        assert type(result).__name__ == "FakeCUDAArray" and result.dtype == dtype
        np.testing.assert_allclose(to_host(result), cpu(kernel, *args), rtol=4 * np.finfo(dtype).eps)

    def test_strided_broadcast_and_scalars():
        x = values((3, 4))
        x0 = values((3, 1))
        ref = cpu(gf.gaussian, x.T, x0.T, 1.5)
        result = gf.gaussian(HostCAI(x.T), HostCAI(x0.T), np.float32(1.5))
        np.testing.assert_allclose(to_host(result), ref, rtol=1e-6)
        reversed_ = gf.exp(HostCAI(x[::-1, ::2]))
        np.testing.assert_allclose(to_host(reversed_), np.exp(x[::-1, ::2]), rtol=1e-6)

    def test_out_strided_in_place_and_where():
        x = values((4, 3))
        out = np.full((4, 6), -1.0, np.float32)[:, ::2]
        result = gf.clamp(HostCAI(x), -1.0, 1.0, out=HostCAI(out))
        assert isinstance(result, HostCAI)
        np.testing.assert_array_equal(out, np.clip(x, -1, 1))
        out[:] = 9.0
        mask = x > 0
        gf.clamp(HostCAI(x), -1.0, 1.0, out=HostCAI(out), where=mask)
        np.testing.assert_array_equal(out, np.where(mask, np.clip(x, -1, 1), 9.0))
        gf.clamp(HostCAI(x), -1.0, 1.0, out=HostCAI(out), where=HostCAI(~mask))
        np.testing.assert_array_equal(out, np.clip(x, -1, 1))

    def test_float16_computes_in_float32_and_integers_in_float64():
        x = values(6, np.float16)
        result = gf.exp(cuda.to_device(x))
        assert result.dtype == np.float16
        np.testing.assert_array_equal(to_host(result), np.exp(x.astype(np.float32)).astype(np.float16))
        ints = gf.exp(cuda.to_device(np.arange(4)))
        assert ints.dtype == np.float64
        np.testing.assert_allclose(to_host(ints), np.exp(np.arange(4.0)), rtol=1e-15)

    def test_dtype_casting_and_order_keywords_on_device():
        x = values((3, 4), np.float64)
        in_f32 = gf.exp(cuda.to_device(x), dtype=np.float32)
        assert in_f32.dtype == np.float32
        np.testing.assert_array_equal(to_host(in_f32), to_host(gf.exp(cuda.to_device(x.astype(np.float32)))))
        with pytest.raises(TypeError, match="casting='no'"):
            gf.exp(cuda.to_device(x), dtype=np.float32, casting="no")
        with pytest.raises(TypeError, match="to out= dtype int32"):
            gf.exp(cuda.to_device(x), out=cuda.to_device(np.zeros((3, 4), np.int32)))
        fortran = gf.exp(cuda.to_device(x), order="F")
        assert fortran.is_f_contiguous() and not fortran.is_c_contiguous()
        np.testing.assert_array_equal(to_host(fortran), to_host(gf.exp(cuda.to_device(x))))

    def test_host_array_mixed_with_device_arrays():
        x, x0 = values(5), values(5)
        result = gf.gaussian(cuda.to_device(x), x0, 2.0)
        np.testing.assert_allclose(to_host(result), cpu(gf.gaussian, x, x0, 2.0), rtol=1e-6)

    def test_hermite_order_major_result_and_out_layouts():
        x = values(7)
        ref = cpu(gf.hermite_norm, x, 4)
        result = gf.hermite_norm(cuda.to_device(x), 4)
        assert result.shape == (7, 4) and result.strides == (4, 28)  # stored as (4, 7)
        np.testing.assert_allclose(to_host(result), ref, rtol=1e-5)
        buffer = np.zeros((4, 7), np.float32)
        gf.hermite_norm(HostCAI(x), 4, out=HostCAI(buffer.T))  # the transposed view, in place
        np.testing.assert_allclose(buffer.T, ref, rtol=1e-5)
        contiguous = np.zeros((7, 4), np.float32)
        gf.hermite_norm(HostCAI(x), 4, out=HostCAI(contiguous))
        np.testing.assert_allclose(contiguous, ref, rtol=1e-5)
        wider = np.zeros((7, 4), np.float64)  # another dtype: computed in float32, then cast
        gf.hermite_norm(HostCAI(x), 4, out=HostCAI(wider))
        np.testing.assert_array_equal(wider, contiguous)

    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_float16_results_are_rounded_on_their_way_into_a_wider_out(dtype):
        x = np.linspace(-3, 3, 101).astype(np.float16)
        out = np.zeros(101, dtype)
        gf.exp(HostCAI(x), out=HostCAI(out))
        np.testing.assert_array_equal(out, np.exp(x, out=np.zeros(101, dtype)))  # NumPy's float16 loop

    def test_hermite_with_no_orders_and_with_no_samples():
        x = values(5)
        for args in ((x, 0), (x[:0], 3), (x[:0], 0)):
            expected = cpu(gf.hermite_norm, *args)
            for given in (args[0], cuda.to_device(args[0])):  # the host and the device path
                result = gf.hermite_norm(given, args[1], target="cuda")
                assert result.shape == expected.shape and result.dtype == expected.dtype

    def test_hermite_where_keeps_masked_rows():
        x = values((2, 3))
        out = np.full((2, 3, 4), 5.0, np.float32)
        mask = np.array([True, False, True])
        gf.hermite_norm(HostCAI(x), 4, out=HostCAI(out), where=mask)
        ref = cpu(gf.hermite_norm, x, 4)
        np.testing.assert_allclose(out[:, mask], ref[:, mask], rtol=1e-5)
        np.testing.assert_array_equal(out[:, ~mask], 5.0)

    @pytest.mark.parametrize("shift", [1, 100, -100])
    def test_out_overlapping_an_input_gives_the_result_without_overlap(monkeypatch, shift):
        """NumPy's rule: as if inputs were read before anything is written. Threads (and host
        chunks written back while later ones are read) run in no such order by themselves."""
        from gpufuncs.targets.cuda import arrays

        monkeypatch.setattr(host, "CHUNK_BYTES", 64)
        base = np.linspace(0.0, 1.0, 3001)
        src, dst = (slice(0, -shift), slice(shift, None)) if shift > 0 else \
            (slice(-shift, None), slice(0, shift))
        # The same computation without overlap (the simulator's exp is libm's, the cpu target's
        # a vectorized one: they may differ in the last bit, the overlap must not change one).
        expected = to_host(gf.exp(HostCAI(base[src].copy())))
        for call in (lambda x: gf.exp(HostCAI(x[src]), out=HostCAI(x[dst])),
                     lambda x: gf.exp(x[src], out=x[dst], target="cuda")):
            x = base.copy()
            call(x)
            np.testing.assert_array_equal(x[dst], expected)
        x = base.copy()
        gf.exp(HostCAI(x[::-1]), out=HostCAI(x))
        np.testing.assert_array_equal(x, to_host(gf.exp(HostCAI(base[::-1].copy()))))
        copies = []
        original = arrays.copy_span
        monkeypatch.setattr(arrays, "copy_span", lambda *a: copies.append(a) or original(*a))
        x = base.copy()
        gf.exp(HostCAI(x), out=HostCAI(x))  # element for element in place: no copy needed
        np.testing.assert_array_equal(x, to_host(gf.exp(HostCAI(base.copy()))))
        assert copies == []

    def test_gufunc_out_overlapping_its_input():
        buffer = np.linspace(-1.0, 1.0, 40)
        x = buffer[:10].copy()
        out = buffer.reshape(10, 4)  # out's first rows hold x
        gf.hermite_norm(HostCAI(buffer[:10]), 4, out=HostCAI(out))
        np.testing.assert_allclose(out, cpu(gf.hermite_norm, x, 4), rtol=1e-15)

    def test_host_inputs_in_several_chunks(monkeypatch):
        monkeypatch.setattr(host, "CHUNK_BYTES", 16)  # four float32 values per chunk
        x = values((5, 6))
        np.testing.assert_array_equal(gf.clamp(x, -0.5, 0.5, target="cuda"), np.clip(x, -0.5, 0.5))
        x0 = values((1, 6))  # broadcast: the chunks are gathered from a strided view
        np.testing.assert_allclose(gf.gaussian(x.T, x0.T, 1.5, target="cuda"),
                                   cpu(gf.gaussian, x.T, x0.T, 1.5), rtol=1e-6)
        np.testing.assert_allclose(gf.hermite_norm(x, 3, target="cuda"),
                                   cpu(gf.hermite_norm, x, 3), rtol=1e-5)
        out = np.full((6, 5), 9.0, np.float32)
        gf.clamp(x.T, -0.5, 0.5, out=out, where=x.T > 0, target="cuda")
        np.testing.assert_array_equal(out, np.where(x.T > 0, np.clip(x.T, -0.5, 0.5), 9.0))
        scalar = gf.exp(np.float32(1.0), target="cuda")  # 0-d in: a scalar out, as on cpu
        assert np.ndim(scalar) == 0 and abs(scalar - np.e) < 3e-7

    def test_new_host_results_reuse_pooled_pinned_memory():
        x = values(1000)
        first = gf.exp(x, target="cuda")
        address = first.ctypes.data
        view = first[10:20]
        del first
        assert view.base is not None and gf.exp(x, target="cuda").ctypes.data != address  # in use
        del view
        again = gf.exp(x, target="cuda")  # the freed block comes back
        assert again.ctypes.data == address
        np.testing.assert_allclose(again, np.exp(x), rtol=3e-7)

    def test_stream_handles_of_every_kind():
        assert stream_handle(0) == 0
        assert stream_handle(cuda.default_stream()) == 0

        class TorchLike:
            cuda_stream = 1234

        assert stream_handle(TorchLike()) == 1234
        x = values(3)
        result = gf.exp(cuda.to_device(x), stream=cuda.stream())
        np.testing.assert_allclose(to_host(result), np.exp(x), rtol=1e-6)
        with pytest.raises(TypeError, match="stream="):
            gf.exp(cuda.to_device(x), stream=object())

    def test_outer_on_device_arrays(hypot_kernel):
        a, b = values(3, np.float64), values((2, 2), np.float64)
        result = hypot_kernel.outer(cuda.to_device(a), cuda.to_device(b))
        assert type(result).__name__ == "FakeCUDAArray" and result.shape == (3, 2, 2)
        np.testing.assert_allclose(to_host(result), np.hypot.outer(a, b), rtol=1e-15)

    @pytest.mark.parametrize(("shape", "axis"), [((7,), 0), ((5, 4), 0), ((5, 3), 1), ((2, 3, 5), -1)])
    def test_reduce_on_device_arrays(hypot_kernel, shape, axis):
        m = values(shape, np.float64)
        result = hypot_kernel.reduce(cuda.to_device(m), axis=axis)
        np.testing.assert_allclose(to_host(result), np.hypot.reduce(m, axis=axis), rtol=1e-15)
        kept = hypot_kernel.reduce(cuda.to_device(m), axis=axis, keepdims=True, initial=100.0)
        np.testing.assert_allclose(to_host(kept), np.hypot.reduce(m, axis=axis, keepdims=True,
                                                                   initial=100.0), rtol=1e-15)

    def test_reduce_on_device_arrays_dtype_and_length_one_axis(hypot_kernel):
        m = values((1, 3), np.float64)
        device = cuda.to_device(m)
        single = hypot_kernel.reduce(device, axis=0)
        # NumPy starts from hypot's identity, 0: the values' magnitudes (this said "unchanged"
        # and checked the copy, which NumPy does not give for negative values)
        np.testing.assert_array_equal(to_host(single), np.hypot.reduce(m, axis=0))
        assert (m[0] < 0).any()
        in_f32 = hypot_kernel.reduce(device, axis=1, dtype=np.float32)
        assert in_f32.dtype == np.float32
        np.testing.assert_allclose(to_host(in_f32), np.hypot.reduce(m.astype(np.float32), axis=1),
                                   rtol=1e-6)
        device.copy_to_device(np.zeros_like(m))
        np.testing.assert_array_equal(to_host(single), np.abs(m[0]))  # a new array, not a view

    def test_reduce_of_integer_device_arrays_keeps_integers_into_out_and_under_where():
        """The device copies of ``reduce`` (into ``out=``, the identity under ``where=``) keep
        the array's integer dtype, as NumPy's reduce does (a float-only copy turned int64 into
        float64 and refused the int64 out=)."""
        @gf.ufunc(signatures=["int64(int64, int64)"], identity=0, reference=np.add, replace=True,
                  name="sim_int_add")
        def int_add(a, b):
            return a + b

        m = np.arange(-7, 8, dtype=np.int64).reshape(3, 5) * 3
        out = cuda.to_device(np.zeros(5, np.int64))
        assert int_add.reduce(cuda.to_device(m), axis=0, out=out) is out
        np.testing.assert_array_equal(to_host(out), m.sum(axis=0))
        mask = (m % 2 == 0)
        masked = int_add.reduce(cuda.to_device(m), axis=1, where=cuda.to_device(mask))
        assert masked.dtype == np.int64
        np.testing.assert_array_equal(to_host(masked), np.add.reduce(m, axis=1, where=mask))

    @pytest.mark.parametrize("out_dtype", [np.int64, np.float64, np.int16, np.float16])
    def test_reduce_into_out_computes_in_the_loop_of_out_and_values(out_dtype):
        """NumPy's rule on the device too: out= is the accumulator, so float32 values sum into
        an int64 or float64 out= in float64 (16777216 + 1 is 16777217, 1 + 0.99999994 truncates
        to 1), into an int16 or float16 one in float32 (1 + 0.99999994 rounds to 2), and the
        sum is cast into out= unsafely, as NumPy's reduce casts it."""
        @gf.ufunc(signatures=gf.float_signatures(2), identity=0, reference=np.add, replace=True,
                  name="sim_float_add")
        def float_add(a, b):
            return a + b

        m = np.array([[1.0, 0.99999994, 0.0], [16777216.0, 0.0, 1.0]], np.float32)
        m = m if np.dtype(out_dtype).itemsize >= 4 else m[:1]  # (16777217 overflows int16)
        want = np.zeros(len(m), out_dtype)
        with np.errstate(all="ignore"):
            np.add.reduce(m, axis=1, out=want)
        for array in (cuda.to_device(m), m):
            out = cuda.to_device(np.zeros(len(m), out_dtype))
            with np.errstate(all="ignore"):
                assert float_add.reduce(array, axis=1, out=out, target="cuda") is out
            np.testing.assert_array_equal(to_host(out), want)

    def test_reduce_of_host_arrays_runs_in_pieces(hypot_kernel, monkeypatch):
        """Host arrays on cuda reduce in pieces, a thread each, then the pieces' results, until
        one is left (small pieces here): every element once, in the same order every run."""
        from gpufuncs.dispatch import pieces

        monkeypatch.setattr(pieces, "GPU_THREADS", 12)
        monkeypatch.setattr(pieces, "GPU_PIECE", 4)
        levels, real = [], pieces.in_pieces

        def counted(kernel, operands, *args):
            levels.append(operands[0].shape)
            return real(kernel, operands, *args)

        monkeypatch.setattr(pieces, "in_pieces", counted)
        m = values((3, 203), np.float64)
        for axis in (1, 0, -1):
            result = hypot_kernel.reduce(m, axis=axis, target="cuda")
            # hypot rounds at each step, and the pieces combine in another order than NumPy's
            # left to right: up to a rounding per value apart (8 ulp at 203 values was seen)
            rtol = m.shape[axis] * np.finfo(np.float64).eps
            np.testing.assert_allclose(result, np.hypot.reduce(m, axis=axis), rtol=rtol)
        # axis 1: 3 rows of 4 pieces of 50 and 3 more, then their 7 results in one thread a
        # row; axis 0: 203 columns of 3, one thread each. A last level (one thread a row)
        # starts from hypot's identity in the same launch, not through in_pieces: only the
        # first level of axis 1 (and of axis -1) is counted here.
        assert levels == [(3, 1, 203), (3, 1, 203)]
        kept = hypot_kernel.reduce(m.T, axis=0, keepdims=True, initial=100.0, target="cuda")
        np.testing.assert_allclose(kept, np.hypot.reduce(m.T, axis=0, keepdims=True, initial=100.0),
                                   rtol=rtol)
        again = hypot_kernel.reduce(m, axis=1, target="cuda")
        assert again.tobytes() == hypot_kernel.reduce(m, axis=1, target="cuda").tobytes()

    @pytest.mark.parametrize("on_device", [False, True], ids=["host-array", "numba-device-array"])
    def test_reduce_on_cuda_takes_axis_tuples_out_and_where_as_numpy(hypot_kernel, on_device):
        """Host arrays reduce in pieces, Numba device arrays in trees, over any axes; NumPy's
        results, its start from the identity included (hypot of one -3.0 is 3.0), ``where=``
        (the identity where false), ``out=`` (checked first) and ``keepdims``."""
        m = np.random.default_rng(5).standard_normal((3, 4, 5))
        m[0, 0, :] = -3.0  # single negative values, where NumPy's identity shows
        take = (lambda r: r.copy_to_host()) if on_device else np.asarray
        given = cuda.to_device(m) if on_device else m
        options = {} if on_device else {"target": "cuda"}
        for axis in (None, (0, 2), (2, 0), 1, (), -1):
            for keepdims in (False, True):
                got = hypot_kernel.reduce(given, axis=axis, keepdims=keepdims, **options)
                np.testing.assert_allclose(take(got), np.hypot.reduce(m, axis=axis, keepdims=keepdims),
                                           rtol=1e-14)
        mask = np.random.default_rng(6).random(m.shape) > 0.5
        np.testing.assert_allclose(take(hypot_kernel.reduce(given, axis=(0, 2), where=mask, **options)),
                                   np.hypot.reduce(m, axis=(0, 2), where=mask), rtol=1e-14)
        out = cuda.to_device(np.full(4, -1.0)) if on_device else np.full(4, -1.0)
        assert hypot_kernel.reduce(given, axis=(0, 2), out=out, initial=2.0, **options) is out
        np.testing.assert_allclose(take(out), np.hypot.reduce(m, axis=(0, 2), initial=2.0), rtol=1e-14)
        wrong = cuda.to_device(np.full(3, -1.0)) if on_device else np.full(3, -1.0)
        with pytest.raises(ValueError, match=r"test_hypot.reduce: out= has shape \(3,\), the reduction has"):
            hypot_kernel.reduce(given, axis=(0, 2), out=wrong, **options)
        np.testing.assert_array_equal(take(wrong), -1.0)  # nothing written

    def test_reduce_on_device_refuses_what_it_cannot_do(hypot_kernel):
        device = cuda.to_device(values((3, 2), np.float64))
        with pytest.raises(ValueError, match="cannot reduce an empty axis"):
            hypot_kernel.reduce(cuda.to_device(np.zeros((0, 2))))
        with pytest.raises(np.exceptions.AxisError, match=r"test_hypot\.reduce: axis 2 is out of bounds"):
            hypot_kernel.reduce(device, axis=2)

        @gf.ufunc(signatures=gf.float_signatures(2), name="test_no_identity", replace=True)
        def no_identity(a, b):
            return a + b

        mask = np.array([True, False])
        with pytest.raises(ValueError, match="does not have an identity, so to use a where mask"):
            no_identity.reduce(device, axis=0, where=mask)
        with pytest.raises(TypeError, match=r"where= needs the kernel's identity \(declared with"):
            no_identity.reduce(device, axis=0, where=mask, initial=0.0)

    @pytest.mark.parametrize("scalar", [np.float64, np.float32], ids=["one-type", "two-types"])
    @pytest.mark.parametrize("n", [1, 5, 16, 17, 200, 700])
    def test_single_pass_reduction_template_combines_every_block_once(n, scalar):
        """The one-launch reduction's kernel (blocks in shared memory, the last block by its
        ticket): generic and compensated, one block and several (four at most here, with
        blocks of 16 threads), a start combined first; operands of one loop type and of two."""
        import math

        from numba import cuda

        from gpufuncs.targets.cuda import single_pass as sp
        from gpufuncs.targets.cuda.compat import SimPointer
        from gpufuncs.targets.cuda.compose import device_function

        def value(args):
            return np.float64(args[0] * args[1])

        def combine(a, b):  # (a maximum: exact, so any order of combination gives NumPy's value)
            return a if a > b else b

        x = np.random.default_rng(n).standard_normal(n)
        for compensated, expected in ((False, np.max(x * 2)), (True, math.fsum(x * 2))):
            body = sp.template(device_function(value), None if compensated else device_function(combine),
                               (np.float64(0), scalar(0)), np.dtype(np.float64), np.float64, compensated)
            out, ticket = np.zeros(1), np.zeros(1, np.uint32)
            partials, comps = np.zeros(4), np.zeros(4)
            start = np.float64(1e300 if not compensated else 0)
            ops = (SimPointer(x.ctypes.data, x.dtype), 2.0)
            cuda.jit(body)[sp.blocks_for(n, 4), sp.BLOCK](ops, n, start, not compensated, out, partials,
                                                     comps, ticket)
            assert ticket[0] == 0  # left ready for the next launch
            if compensated:
                assert abs(out[0] - expected) <= 2 * np.finfo(np.float64).eps * np.sum(abs(x * 2))
            else:
                assert out[0] == 1e300  # the start, combined first
                out[0] = 0
                cuda.jit(body)[sp.blocks_for(n, 4), sp.BLOCK](ops, n, start, False, out, partials, comps,
                                                         ticket)
                assert out[0] == expected
        assert sp.blocks_for(n, 4) == max(1, min(4, -(-n // (sp.BLOCK * sp.MIN_PER_THREAD))))

    def test_single_pass_float32_sums_add_groups_in_float64_within_a_rounding():
        """Float32 values are added in float64 in groups before each compensated step: the
        sum of cancelling terms of very different sizes is the exact sum rounded once (up to
        the groups' float64 rounding), never further from it than NumPy's."""
        import math

        from numba import cuda

        from gpufuncs.targets.cuda import single_pass as sp
        from gpufuncs.targets.cuda.compat import SimPointer
        from gpufuncs.targets.cuda.compose import device_function

        def value(args):
            return np.float32(args[0])

        rng = np.random.default_rng(11)
        n = 4099  # grouped steps and a rest, in every one of four blocks
        x = rng.permutation(np.concatenate([np.full(1000, 1e7), np.full(1000, -1e7),
                                            rng.uniform(0, 1, n - 2000)])).astype(np.float32)
        body = sp.template(device_function(value), None, (np.float32(0),), np.dtype(np.float32),
                           np.float32, True)
        out, ticket = np.zeros(1, np.float32), np.zeros(1, np.uint32)
        partials, comps = np.zeros(4), np.zeros(4)
        cuda.jit(body)[sp.blocks_for(n, 4), sp.BLOCK]((SimPointer(x.ctypes.data, x.dtype),), n,
                                                     np.float32(0), False, out, partials, comps, ticket)
        exact = math.fsum(x.astype(np.float64))
        grouped = 8 * np.finfo(np.float64).eps * float(np.abs(x.astype(np.float64)).sum())
        assert abs(float(out[0]) - exact) <= abs(float(np.float32(exact)) - exact) + grouped
        assert abs(float(out[0]) - exact) <= abs(float(np.sum(x)) - exact)

    @pytest.mark.parametrize("compensated", [False, True], ids=["combined", "compensated"])
    def test_single_pass_finish_is_applied_to_the_value_rounded_to_its_dtype(compensated):
        """A reduction kernel's finish runs in the last block, on the one value rounded to the
        accumulation dtype (float32 here), as a call on the stored result would see it, and the
        stored value is the finish's (float64 here)."""
        from numba import cuda

        from gpufuncs.targets.cuda import single_pass as sp
        from gpufuncs.targets.cuda.compat import SimPointer
        from gpufuncs.targets.cuda.compose import device_function

        def value(args):
            return np.float32(args[0])

        def combine(a, b):
            return np.float32(a + b)

        def finish(r):  # (float32 in: its rounding shows in the float64 out)
            return np.float64(r) / 3.0

        x = np.random.default_rng(5).uniform(0, 1, 300).astype(np.float32)
        body = sp.template(device_function(value), None if compensated else device_function(combine),
                           (np.float32(0),), np.dtype(np.float32), np.float64, compensated,
                           device_function(finish))
        out, ticket = np.zeros(1), np.zeros(1, np.uint32)
        partials, comps = np.zeros(4), np.zeros(4)
        cuda.jit(body)[sp.blocks_for(x.size, 4), sp.BLOCK]((SimPointer(x.ctypes.data, x.dtype),), x.size,
                                                          np.float32(0), False, out, partials, comps, ticket)
        unfinished = np.zeros(1, np.float32)
        plain = sp.template(device_function(value), None if compensated else device_function(combine),
                            (np.float32(0),), np.dtype(np.float32), np.float32, compensated)
        cuda.jit(plain)[sp.blocks_for(x.size, 4), sp.BLOCK]((SimPointer(x.ctypes.data, x.dtype),), x.size,
                                                           np.float32(0), False, unfinished, partials,
                                                           comps, ticket)
        assert out[0] == np.float64(unfinished[0]) / 3.0  # bit for bit
        assert out[0] != np.float64(float(np.sum(x, dtype=np.float64))) / 3.0  # the float32 rounding shows

    def test_collapse_merges_what_every_operand_steps_through_evenly():
        # C-contiguous (3, 4) with a broadcast row vector: only the inner dimension merges.
        assert collapse((3, 4), [[4, 1], [0, 1]]) == ((3, 4), [(4, 1), (0, 1)])
        assert collapse((3, 4), [[4, 1], [4, 1]]) == ((12,), [(1,), (1,)])
        assert collapse((1, 5, 1), [[0, 2, 0]]) == ((5,), [(2,)])
        assert collapse((1, 1), [[0, 0]]) == ((), [()])

    def test_numba_object_is_not_available_on_the_simulator():
        with pytest.raises(NotImplementedError, match="NUMBA_ENABLE_CUDASIM"):
            gf.get("exp", target="cuda")(np.ones(2))

    def test_any_number_of_inputs(restore_registry):
        """One kernel template serves every arity (no per-arity variants, no cap)."""
        @gf.ufunc(signatures=gf.float_signatures(7), reference=None, replace=True)
        def weighted7(a, b, c, d, e, f, g):
            return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g

        args = [values(6, np.float64) for _ in range(7)]
        args[3] = np.float64(0.5)  # a scalar among the arrays
        result = weighted7(*(a if np.ndim(a) == 0 else cuda.to_device(a) for a in args))
        np.testing.assert_allclose(to_host(result), cpu(weighted7, *args), rtol=1e-15)

    def test_gufunc_scalar_output_written_the_numba_way(restore_registry):
        """A ``()`` output arrives as a one-element array, as Numba's guvectorize passes it."""
        @gf.gufunc(signatures=["void(float64[:], float64[:], float64[:])"], layout="(n),(n)->()",
                   reference=None, replace=True)
        def dot(a, b, out):
            acc = 0.0
            for i in range(a.shape[0]):
                acc += a[i] * b[i]
            out[0] = acc

        a, b = values((5, 3), np.float64), values(3, np.float64)
        expected = a @ b
        np.testing.assert_allclose(cpu(dot, a, b), expected, rtol=1e-15)
        np.testing.assert_allclose(to_host(dot(cuda.to_device(a), cuda.to_device(b))), expected, rtol=1e-15)
        np.testing.assert_allclose(dot(a, b, target="cuda"), expected, rtol=1e-15)
