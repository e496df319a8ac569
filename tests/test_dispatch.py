"""Call semantics and errors (issue 2, items 4-5) on the host targets.

Values are checked against NumPy/SciPy, or bit for bit against the same kernel on contiguous
float64 copies (the compiled loop is the same, so layout must not change a single bit).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

import gpufuncs as gf
from gpufuncs.dispatch import kernel as kernel_module
from gpufuncs.kernels import builtin_names
from gpufuncs.testing import compare

HOST = ["cpu", "parallel"]


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    uint = f"u{a.itemsize}"
    return (a.dtype == b.dtype and a.shape == b.shape
            and bool(np.all((a.view(uint) == b.view(uint)) | (np.isnan(a) & np.isnan(b)))))


# -- broadcasting, scalars, 0-d, empty --------------------------------------------------------------
@pytest.mark.parametrize("target", HOST)
def test_broadcasting_like_numpy(target):
    x = np.linspace(-3, 3, 7)[:, None]
    x0 = np.array([-1.0, 0.0, 1.0])
    r = gf.gaussian(x, x0, 0.5, target=target)
    assert r.shape == (7, 3)
    np.testing.assert_allclose(r, norm.pdf(x, loc=x0, scale=0.5), rtol=1e-15)
    full = [np.ascontiguousarray(a) for a in np.broadcast_arrays(x, x0, np.float64(0.5))]
    assert same_bits(r, gf.gaussian(*full, target=target))


@pytest.mark.parametrize("target", HOST)
def test_broadcasting_gufunc_loop_dimensions(target):
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    r = gf.hermite_norm(x, 4, target=target)
    assert r.shape == (2, 3, 4)
    assert same_bits(r[1, 2], gf.hermite_norm(x[1, 2:3], 4, target=target)[0])


@pytest.mark.parametrize("target", HOST)
def test_python_and_numpy_scalars(target):
    r = gf.gaussian(np.float32(0.5), 0, 1, target=target)
    assert type(r) is np.float32
    compare(gf.gaussian, (np.float32(0.5), 0, 1), r, target=target)
    r = gf.exp(1.0, target=target)
    assert type(r) is np.float64
    compare(gf.exp, (1.0,), r, target=target)
    assert type(gf.clamp(3, 0, 2, target=target)) is np.float64
    assert gf.clamp(3, 0, 2, target=target) == 2.0


@pytest.mark.parametrize("target", HOST)
def test_zero_dim_input_gives_numpy_scalar(target):
    r = gf.exp(np.array(0.5), target=target)
    assert type(r) is type(np.exp(np.array(0.5))) is np.float64
    compare(gf.exp, (np.array(0.5),), r, target=target)
    h = gf.hermite_norm(np.array(0.5), 3, target=target)  # a gufunc's core output stays an array
    assert isinstance(h, np.ndarray) and h.shape == (3,)


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
def test_empty_arrays(shape, target):
    x = np.empty(shape, np.float32)
    r = gf.gaussian(x, 0.0, 1.0, target=target)
    assert r.shape == shape and r.dtype == np.float32
    h = gf.hermite_norm(x, 5, target=target)
    assert h.shape == (*shape, 5) and h.dtype == np.float32


# -- memory layouts ---------------------------------------------------------------------------------
def _layouts():
    base = np.linspace(-4, 4, 60).reshape(6, 10)
    return {
        "strided": base[:, ::3],
        "negative": base[::-1, ::-2],
        "transposed": base.T,
        "fortran": np.asfortranarray(base),
        "column": base[:, 4],
    }


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("layout", list(_layouts()))
def test_non_contiguous_and_negative_strides(layout, target):
    x = _layouts()[layout]
    copy = np.ascontiguousarray(x)
    assert same_bits(gf.exp(x, target=target), gf.exp(copy, target=target))
    assert same_bits(gf.clamp(x, -1.0, x[..., :1], target=target),
                     gf.clamp(copy, -1.0, np.ascontiguousarray(x[..., :1]), target=target))
    assert same_bits(gf.hermite_norm(x, 3, target=target), gf.hermite_norm(copy, 3, target=target))
    np.testing.assert_allclose(gf.exp(x, target=target), np.exp(x), rtol=2.3e-16)


def _out_views(shape):
    """(buffer, out view) pairs: out= of every layout, inside a buffer of sentinels."""
    n = math.prod(shape)
    views = {}
    buf = np.full(3 * n, SENTINEL)
    views["strided"] = (buf, buf[n // 2: n // 2 + 2 * n: 2].reshape(shape))
    buf = np.full(3 * n, SENTINEL)
    views["reversed"] = (buf, buf[n: 2 * n][::-1].reshape(shape))
    buf = np.full(3 * n, SENTINEL)
    views["fortran"] = (buf, buf[n: 2 * n].reshape(shape[::-1]).T)
    buf = np.full((shape[0], 2 * shape[1]), SENTINEL)
    views["every-other-column"] = (buf, buf[:, ::2])
    return views


SENTINEL = -7.25


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("inputs", ["C", "F", "reversed"])
@pytest.mark.parametrize("out_layout", list(_out_views((4, 5))))
def test_out_of_any_layout(out_layout, inputs, target):
    """Numba's own vectorize loop mis-writes such outputs (see targets/cpu.py); gpufuncs must not."""
    x = np.linspace(-3, 3, 20).reshape(4, 5)
    x = {"C": x, "F": np.asfortranarray(x), "reversed": np.ascontiguousarray(x[::-1])[::-1]}[inputs]
    lo, hi = np.full_like(x, -1.0), np.full_like(x, 1.0)
    buf, out = _out_views((4, 5))[out_layout]
    assert gf.clamp(x, lo, hi, out=out, target=target) is out
    assert same_bits(out, np.clip(np.ascontiguousarray(x), -1.0, 1.0))
    outside = np.ones(buf.shape, bool)
    outside[np.unravel_index(_positions(buf, out), buf.shape)] = False
    assert (buf[outside] == SENTINEL).all(), "wrote outside out="


def _positions(buf: np.ndarray, view: np.ndarray) -> np.ndarray:
    """Flat indices of ``buf`` that ``view`` covers."""
    index = np.arange(buf.size).reshape(buf.shape)
    offset = (view.__array_interface__["data"][0] - buf.__array_interface__["data"][0]) // buf.itemsize
    strides = [s // buf.itemsize for s in view.strides]
    grid = np.indices(view.shape)
    return index.ravel()[offset + sum(g * s for g, s in zip(grid, strides)).ravel()]


# -- out= -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", HOST)
def test_out_is_written_and_returned(target):
    x = np.linspace(-3, 3, 10, dtype=np.float32)
    out = np.empty_like(x)
    assert gf.clamp(x, -1, 1, out=out, target=target) is out
    assert same_bits(out, np.clip(x, np.float32(-1), np.float32(1)))
    h = np.empty((10, 4), np.float32)
    assert gf.hermite_norm(x, 4, out=h, target=target) is h
    assert same_bits(h, gf.hermite_norm(x, 4, target=target))


@pytest.mark.parametrize("target", HOST)
def test_inputs_broadcast_up_to_out(target):
    out = np.empty((3, 4))
    assert gf.exp(np.array([0.0, 1.0, 2.0, 3.0]), out=out, target=target) is out
    assert same_bits(out, np.broadcast_to(np.exp(np.arange(4.0)), (3, 4)).copy())


def _untouched(out) -> bool:
    return bool((out == SENTINEL).all())


def _error_calls():
    """(call, exception, message) where ``call(out, target)`` must fail before writing out."""
    x = np.linspace(-1, 1, 6)
    return {
        "out shape": (lambda out, t: gf.exp(np.ones(5), out=out, target=t), ValueError, r"shape"),
        "unsafe cast to out": (lambda out, t: gf.exp(x, out=out, casting="safe", target=t)
                               if out.dtype == np.float32 else gf.exp(x, out=out, casting="no",
                                                                      dtype=np.float32, target=t),
                               TypeError, "cannot cast"),
        "complex input": (lambda out, t: gf.gaussian(x + 0j, 0.0, 1.0, out=out, target=t), TypeError,
                          "complex"),
        "non-broadcastable": (lambda out, t: gf.gaussian(x, np.ones(4), 1.0, out=out, target=t),
                              ValueError, r"\(6,\) \(4,\)"),
        "gufunc core size": (lambda out, t: gf.hermite_norm(x[:3], 3, out=out.reshape(3, 2), target=t),
                             ValueError, r"core dimension 'n' of out= has size 2, expected 3"),
        "unknown target": (lambda out, t: gf.exp(x, out=out, target="gpu"), ValueError, "valid targets"),
        "bad keyword": (lambda out, t: gf.exp(x, out=out, target=t, axis=0), TypeError, "axis"),
    }


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("case", list(_error_calls()))
def test_errors_leave_out_untouched(case, target):
    call, error, message = _error_calls()[case]
    for dtype in (np.float64, np.float32):
        out = np.full(6, SENTINEL, dtype)
        with pytest.raises(error, match=message):
            call(out, target)
        assert _untouched(out), f"{case}: out was written before the error"


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_out_of_integer_dtype_is_refused(dtype, target):
    out = np.full(6, 3, dtype)
    with pytest.raises(TypeError, match=f"cannot cast the float64 result to out= dtype {np.dtype(dtype)}"):
        gf.exp(np.linspace(-1, 1, 6), out=out, target=target)
    assert (out == np.full(6, 3, dtype)).all()


@pytest.mark.parametrize("target", HOST)
def test_read_only_out(target):
    out = np.full(4, SENTINEL)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        gf.exp(np.zeros(4), out=out, target=target)
    assert _untouched(out)


# -- dtype rules ------------------------------------------------------------------------------------
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize(
    ("args", "dtype"),
    [
        ((np.ones(3, np.float32), 0.0, 1.0), F32),  # Python scalars do not upcast (NEP 50)
        ((np.ones(3, np.float32), 0, 1), F32),
        ((np.ones(3, np.float32), np.float32(0), np.float32(1)), F32),
        ((np.ones(3, np.float32), np.float64(0), 1.0), F64),  # NumPy scalars are typed
        ((np.ones(3, np.float64), 0.0, 1.0), F64),
        ((np.ones(3, np.float32), np.zeros(3, np.float64), 1.0), F64),  # mixed arrays
        ((np.arange(3), 0, 1), F64),  # the first loop an integer casts to safely
        ((np.arange(3, dtype=np.int8), 0, 1), F32),  # (not float16: see docs/semantics.md)
        ((np.arange(3, dtype=np.int16), 0, 1), F32),
        ((np.arange(3, dtype=np.uint64), 0, 1), F64),
        ((np.array([True, False]), np.float32(0), np.float32(1)), F32),  # bool too
        ((np.array([True, False]), 0, 1), F64),  # ints of a kind above bool: int64 (NumPy's)
        ((1, 0, 1), F64),  # Python scalars alone: float64
    ],
)
def test_result_dtype(args, dtype, target):
    r = gf.gaussian(*args, target=target)
    assert np.asarray(r).dtype == dtype
    compare(gf.gaussian, args, r, dtype=dtype, target=target)


@pytest.mark.parametrize("target", HOST)
def test_float16_computes_in_float32(target):
    x = np.linspace(-4, 4, 33).astype(np.float16)
    r = gf.gaussian(x, np.float16(0.5), np.float16(1.5), target=target)
    assert r.dtype == np.float16
    expected = gf.gaussian(x.astype(np.float32), np.float32(0.5), np.float32(1.5), target=target)
    assert same_bits(r, expected.astype(np.float16))
    h = gf.hermite_norm(x, 3, target=target)
    assert h.dtype == np.float16
    assert same_bits(h, gf.hermite_norm(x.astype(np.float32), 3, target=target).astype(np.float16))


@pytest.mark.parametrize("target", HOST)
def test_float_results_equal_the_loop_of_their_dtype(target):
    x32 = np.linspace(-2, 2, 9, dtype=np.float32)
    assert same_bits(gf.exp(x32, target=target), gf.exp(x32, target="cpu"))
    assert same_bits(gf.exp(np.arange(5), target=target), gf.exp(np.arange(5.0), target="cpu"))


# -- targets ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", HOST)
def test_flat_loops_and_numba_ufuncs_agree_bit_for_bit(target):
    """The same values through both executors of a host target: contiguous arrays take the flat
    loop, a strided view of the same values takes the Numba ufunc (see targets/cpu)."""
    x = np.random.default_rng(1).normal(size=(50, 7))
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    assert gf.gaussian.resolve(x, 0.25, 1.5, target=target).plan.inputs[0].strides == x.strides
    for args in [(0.25, 1.5), (x[:1], np.float64(1.5))]:
        assert same_bits(gf.gaussian(x, *args, target=target), gf.gaussian(strided, *args, target=target))
    assert same_bits(gf.hermite_norm(x, 6, target=target), gf.hermite_norm(strided, 6, target=target))
    assert same_bits(gf.clamp(x, -0.5, 0.5, target=target), np.clip(x, -0.5, 0.5))


def test_parallel_agrees_with_cpu_bit_for_bit():
    x = np.random.default_rng(2).normal(size=(3, 70001))  # several parallel chunks
    assert same_bits(gf.gaussian(x, 0.25, 1.5, target="parallel"), gf.gaussian(x, 0.25, 1.5, target="cpu"))
    assert same_bits(gf.exp(x[::-1], target="parallel"), gf.exp(x[::-1], target="cpu"))
    assert same_bits(gf.hermite_norm(x[0], 5, target="parallel"), gf.hermite_norm(x[0], 5, target="cpu"))


def test_calls_with_and_without_keywords_take_the_same_path(monkeypatch):
    """One path: a call without keywords, with target=, and with out= all run a ResolvedCall."""
    from gpufuncs.dispatch import ResolvedCall
    from gpufuncs.dispatch.args import ABSENT

    ran = []
    original = ResolvedCall.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        run = self._run

        def counted(args, out, where, kwargs):
            ran.append((self.target, out is not ABSENT))  # target= is keyed, not passed on
            return run(args, out, where, kwargs)

        self._run = counted

    monkeypatch.setattr(ResolvedCall, "__init__", spy)
    x = np.linspace(0, 1, 5)
    for kernel in (gf.exp, gf.hermite_norm, gf.gaussian):
        monkeypatch.setattr(kernel, "_resolved", {t: {} for t in kernel._resolved})
    for _ in range(2):  # resolved on the first call, found in the cache on the second
        gf.exp(x)  # one, two and three arguments are keyed by separate branches
        gf.exp(x, target="cpu")
        gf.exp(x, out=np.empty(5))
        gf.hermite_norm(x, 3)
        gf.gaussian(x, 0.0, 1.0, out=np.empty(5))
    assert ran == [("cpu", False), ("cpu", False), ("cpu", True), ("cpu", False), ("cpu", True)] * 2
    assert resolved_calls(gf.exp) == 3 and resolved_calls(gf.hermite_norm) == 1
    assert resolved_calls(gf.gaussian) == 1


def test_reused_plans_still_validate_every_call(restore_registry):
    """Plans are cached by argument types, dtypes and shapes: a call that differs in any of them
    (or in the layout that picks the result's order) is validated and planned again."""
    kernel = _fresh_kernel("dispatch_plan_cache")
    x = np.arange(6.0).reshape(2, 3)
    out = np.empty((2, 3))
    assert kernel(x, out=out) is out and (out == 2 * x).all()
    assert kernel(x, out=out) is out and resolved_calls(kernel) == 1  # the same call, reused
    with pytest.raises(ValueError, match=r"out= has shape \(3, 2\)"):
        kernel(x, out=np.empty((3, 2)))
    with pytest.raises(TypeError, match="cannot cast the float64 result to out= dtype int64"):
        kernel(x, out=np.empty((2, 3), np.int64))
    assert kernel(x.astype(np.float32), out=np.empty((2, 3), np.float32)).dtype == np.float32
    assert kernel(x, where=x > 2, out=out) is out
    assert kernel(np.asfortranarray(x), dtype=np.float64).flags.f_contiguous
    assert kernel(x, dtype=np.float64).flags.c_contiguous
    with pytest.raises(TypeError, match=r"dispatch_plan_cache: dtype=\[<class 'numpy.float64'>\] is not"):
        kernel(x, dtype=[np.float64])  # unhashable: never cached, still validated


def test_plan_cache_is_bounded(restore_registry, monkeypatch):
    monkeypatch.setattr(kernel_module, "RESOLVED_CACHE_SIZE", 4)
    kernel = _fresh_kernel("dispatch_plan_bound")
    for n in range(10):
        assert (kernel(np.ones(n), out=np.empty(n)) == 2).all()
    assert 1 <= resolved_calls(kernel) <= 4


def resolved_calls(kernel: gf.Kernel) -> int:
    """How many resolved calls ``kernel`` keeps, for every target asked for."""
    return sum(map(len, kernel._resolved.values()))


def _fresh_kernel(name):
    def fresh(x):
        return x + x

    return gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: 2 * x, name=name,
                    replace=True)(fresh)


@pytest.mark.parametrize("target", ["auto", "cpu"])
def test_a_kernels_first_call_may_take_a_list(restore_registry, target):
    """A list is described afresh on every call (its key is UNKEYABLE), the first one included:
    that call once raised TypeError, before any resolved call of its target existed."""
    kernel = _fresh_kernel("dispatch_first_list")
    np.testing.assert_array_equal(kernel([1.0, 2.5], target=target), [2.0, 5.0])
    np.testing.assert_array_equal(kernel([1.0, 2.5], target=target), [2.0, 5.0])
    assert resolved_calls(kernel) == 0


def test_auto_picks_cpu_below_the_threshold_and_parallel_above(restore_registry):
    gf.set_auto_parallel_min_size(1000)  # the rule, not this machine's number
    try:
        small = _fresh_kernel("dispatch_auto_small")
        small(np.ones(999))
        assert list(small._compiled) == ["cpu"]
        large = _fresh_kernel("dispatch_auto_large")
        r = large(np.ones((10, 100)))
        assert list(large._compiled) == ["parallel"] and (r == 2).all()
    finally:
        gf.set_auto_parallel_min_size(None)


def test_cuda_target_without_gpu_is_a_clear_error():
    if "cuda" in gf.available_targets():
        pytest.skip("a usable GPU is present; the cuda target is covered by tests/test_cuda*.py")
    with pytest.raises(gf.CudaUnavailableError, match=r"exp: target 'cuda' is unavailable: \S"):
        gf.exp(np.ones(3), target="cuda")


def test_unknown_target_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown target 'gpu'; valid targets: auto, cpu, parallel, cuda"):
        gf.exp(np.ones(3), target="gpu")
    with pytest.raises(ValueError, match=r"unknown target 'gpu'; compiled targets: cpu, parallel, cuda"):
        gf.get("exp", target="gpu")
    with pytest.raises(ValueError, match=r"unknown target 'auto'; compiled targets: cpu, parallel, cuda "
                                         r"\('auto' chooses one of them per call\)"):
        gf.get("exp", target="auto")  # a compiled object exists per concrete target only


# -- errors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (np.array([1, "a"], dtype=object), "object"),
        (np.array(["a", "b"]), "string"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime"),
    ],
)
@pytest.mark.parametrize("target", HOST)
def test_unsupported_dtypes_name_kernel_and_dtype(value, kind, target):
    dtype = re.escape(str(np.asarray(value).dtype))
    with pytest.raises(TypeError, match=rf"gaussian: unsupported {kind} dtype {dtype} for input 'x'"):
        gf.gaussian(value, 0.0, 1.0, target=target)


@pytest.mark.parametrize("value", [np.ones(3, np.complex128), 1 + 2j])
@pytest.mark.parametrize("target", HOST)
def test_complex_inputs_to_a_real_kernel_find_no_loop(value, target):
    """As for a NumPy ufunc without complex loops (np.floor): no loop, naming the inputs."""
    message = r"gaussian: no loop for inputs \(complex128, float(64)?, float(64)?\)"
    with pytest.raises(TypeError, match=message):
        gf.gaussian(value, 0.0, 1.0, target=target)
    with pytest.raises(TypeError):
        np.floor(value)


@pytest.mark.parametrize("target", HOST)
def test_non_broadcastable_shapes_are_listed(target):
    with pytest.raises(ValueError, match=r"gaussian: .*broadcast.* \(3,\) \(4,\) \(\)"):
        gf.gaussian(np.ones(3), np.ones(4), 1.0, target=target)


def test_wrong_number_of_arguments():
    with pytest.raises(TypeError, match=r"gaussian\(\) takes 3 positional arguments \(x, x0, sigma\)"):
        gf.gaussian(np.ones(3), 0.0)
    with pytest.raises(TypeError, match=r"hermite_norm\(\) takes 2 .*\(x, n\)"):
        gf.hermite_norm(np.ones(3))
    with pytest.raises(TypeError, match=r"^exp\(\) takes 1 positional argument \(x\) and up to 1 output "
                                        r"array, got 3$"):
        gf.exp(np.ones(3), np.ones(3), np.ones(3))


@pytest.mark.parametrize("out", [None, np.empty(3)], ids=["None", "array"])
def test_out_given_both_positionally_and_by_keyword(out):
    x, positional = np.ones(3), np.empty(3)
    with pytest.raises(TypeError, match="cannot specify 'out' as both a positional and keyword"):
        np.exp(x, positional, out=out)  # the behaviour matched
    for _ in range(2):  # the second call's signature is cached, if ever it were kept
        with pytest.raises(TypeError, match="exp: cannot specify 'out' as both a positional and keyword"):
            gf.exp(x, positional, out=out)


def test_unknown_kernel_lists_the_names():
    with pytest.raises(KeyError, match=r"unknown kernel 'gausian'; registered kernels: .*gaussian"):
        gf.registry["gausian"]
    with pytest.raises(KeyError, match=r"clamp, .*exp, .*gaussian, .*hermite_norm"):  # test kernels too
        gf.get("nope")


@pytest.mark.parametrize("target", HOST)
def test_uncompilable_kernel_names_kernel_and_target(target, restore_registry):
    """A lazy kernel (no signatures to check at definition) fails at its first call."""
    def broken(x):
        return x.no_such_attribute

    kernel = gf.ufunc(reference=np.negative, name="dispatch_broken", replace=True)(broken)
    with pytest.raises(gf.KernelCompileError,
                       match=r"kernel 'dispatch_broken' failed to compile for inputs float64: "
                             r"Unknown attribute 'no_such_attribute'") as info:
        kernel(np.ones(2), target=target)
    assert "\x1b[" not in str(info.value)  # Numba's message without its terminal colours
    assert info.value.__cause__ is not None  # Numba's own exception is chained, message kept
    with pytest.raises(gf.KernelCompileError):  # and it is not cached as compiled
        kernel(np.ones(2), target=target)


@pytest.mark.parametrize(
    ("signatures", "message"),
    [
        (["float64(float64)", "float32(float32)"], "'float32\\(float32\\)' is never selected"),
        (["int64(int64)", "int32(int32)"], "'int32\\(int32\\)' is never selected"),
        (["float32(float32)", "float32(float32)"], "duplicate"),
        (["float64(float64)", "int64(float64)"], "duplicate"),
        (["float16(float16)"], "float16 is a storage type"),
        (["float64(float64)", "UniTuple(float64, 2)(float32)"], "same number of outputs"),
        (["float64(float64)", "float64[:](float32)"], "returns scalars"),
        (["NPDatetime('D')(float64)"], "is not a loop type"),
        (["void(float64)"], "declares no return type"),
        (["float32(float32, float32)"], "has 2 arguments, the function takes 1"),
        (["not a signature"], "cannot parse"),
    ],
)
def test_bad_signatures_fail_at_registration(signatures, message, restore_registry):
    def kernel(x):
        return x

    before = set(gf.names())
    with pytest.raises(gf.KernelDefinitionError, match=message):
        gf.ufunc(signatures=signatures, reference=np.positive, name="dispatch_bad_sig")(kernel)
    assert set(gf.names()) == before


def test_bad_gufunc_layout_fails_at_registration(restore_registry):
    def kernel(x, out):
        out[0] = x

    for layout, message in [("()(n)", "needs '->'"), ("()->", "no output"),
                            ("(),()->(n)", "has 3 arguments, the function takes 2")]:
        with pytest.raises(gf.KernelDefinitionError, match=re.escape(message)):
            gf.gufunc(signatures=["void(float64, float64[:])"], layout=layout, reference=None,
                      name="dispatch_bad_layout")(kernel)


def test_domains_must_name_arguments(restore_registry):
    with pytest.raises(gf.KernelDefinitionError, match=r"unknown arguments \['y'\]"):
        gf.ufunc(signatures=gf.float_signatures(1), reference=np.positive, domains={"y": (0, 1)},
                 name="dispatch_bad_domain")(lambda x: x)


def test_importing_compiles_nothing_and_leaves_cuda_alone():
    """``import gpufuncs`` only declares kernels: nothing is compiled (each target compiles on
    first use) and neither numba.cuda nor a GPU is touched. Its time is measured by
    ``python -m benchmarks --suite cpu`` (import gpufuncs beyond numba)."""
    code = (
        "import sys, gpufuncs as gf\n"
        "compiled = {name: list(gf.registry[name]._compiled) for name in gf.names()}\n"
        "assert compiled == {name: [] for name in gf.names()}, compiled\n"
        "assert 'numba.cuda' not in sys.modules\n"
        "print('ok', len(compiled))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"ok {len(builtin_names())}\n"), proc.stdout


FIFTH_KERNEL = '''"""``cube(x)``: a fifth built-in, added as one file (a test's copy of the package)."""

import numpy as np

from ..registry import float_signatures, ufunc
from ..spec import Benchmark


@ufunc(signatures=float_signatures(1), reference=lambda x: np.asarray(x, dtype=np.float64) ** 3,
       benchmark=Benchmark({"numpy": lambda x: x * x * x}))
def cube(x):
    """``x**3``."""
    return x * x * x
'''


def test_a_new_kernel_module_needs_no_other_edit(tmp_path):
    """A module added to ``gpufuncs/kernels`` (in a copy of the package) is registered, is an
    attribute of ``gpufuncs`` and in its ``__all__``, and is one of the built-ins that the tests,
    the benchmarks and the docs' kernel list iterate; it computes on the host targets."""
    shutil.copytree(Path(gf.__file__).parent, tmp_path / "gpufuncs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "gpufuncs" / "kernels" / "cube.py").write_text(FIFTH_KERNEL)
    code = (
        "import numpy as np, gpufuncs as gf\n"
        "from gpufuncs.kernels import builtin_names\n"
        f"assert gf.__file__.startswith({str(tmp_path)!r}), gf.__file__\n"
        "assert gf.cube is gf.registry['cube'] and 'cube' in gf.__all__ and 'cube' in dir(gf)\n"
        "x = np.linspace(-2, 2, 7)\n"
        "for t in ('cpu', 'parallel'):\n"
        "    np.testing.assert_array_equal(gf.cube(x, target=t), x * x * x)\n"
        "print(' '.join(builtin_names()))\n"
    )
    # Run from the copy: ``-c`` puts the working directory first on sys.path.
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == sorted([*builtin_names(), "cube"])


# -- array subclasses (issue 10) ----------------------------------------------------------------------
class Tagged(np.ndarray):
    """A user's own subclass, carrying an attribute through ``__array_finalize__``."""

    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", "fresh")


@pytest.mark.parametrize("target", HOST)
def test_masked_array_keeps_its_mask_like_numpy(target):
    x = np.ma.masked_array([0.5, 1.5, -2.0], mask=[False, True, False])
    r, expected = gf.exp(x, target=target), np.exp(x)
    assert type(r) is np.ma.MaskedArray
    np.testing.assert_array_equal(r.mask, expected.mask)
    assert same_bits(r.data, expected.data)
    both = gf.clamp(x, np.ma.masked_array([0.0, 0.0, 0.0], mask=[True, False, False]), 1.0, target=target)
    np.testing.assert_array_equal(both.mask, [True, True, False])  # the inputs' masks combined


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("target", HOST)
def test_matrix_and_user_subclasses_are_kept(target):
    m = np.matrix([[0.5, 1.0], [2.0, -1.0]])
    r = gf.exp(m, target=target)
    assert type(r) is np.matrix and same_bits(np.asarray(r), np.asarray(np.exp(m)))
    t = np.linspace(0, 1, 4).view(Tagged)
    t.tag = "mine"
    r, expected = gf.exp(t, target=target), np.exp(t)
    assert type(r) is Tagged and r.tag == expected.tag and same_bits(np.asarray(r), np.asarray(expected))
    assert type(gf.exp(t[1:2].reshape(()), target=target)) is type(np.exp(t[1:2].reshape(())))


@pytest.mark.parametrize("target", HOST)
def test_masked_out_takes_the_inputs_mask_like_numpy(target):
    x = np.ma.masked_array([0.5, 1.5, -2.0], mask=[False, True, False])
    ours = np.ma.masked_array(np.zeros(3), mask=[True, False, False])
    theirs = ours.copy()
    assert gf.exp(x, out=ours, target=target) is ours
    np.exp(x, out=theirs)
    np.testing.assert_array_equal(ours.mask, theirs.mask)
    assert same_bits(ours.data, theirs.data)


# -- dtypes and casting (issue 10) ------------------------------------------------------------------
@pytest.mark.parametrize("target", HOST)
def test_longdouble_has_no_loop_like_any_ufunc_without_one(target):
    """NumPy's answer for a ufunc without a longdouble loop (np.exp has one, gf.exp does not)."""
    x = np.linspace(0, 1, 3, dtype=np.longdouble)
    with pytest.raises(TypeError, match=r"exp: no loop for inputs \(float128\)"):
        gf.exp(x, target=target)
    with pytest.raises(TypeError, match="no loop for inputs \\(float64\\) with dtype=float128"):
        gf.exp(x.astype(np.float64), dtype=np.longdouble, target=target)
    r = gf.exp(x, dtype=np.float64, target=target)  # asked for: a same_kind cast, as in NumPy
    assert r.dtype == np.float64 and same_bits(r, gf.exp(x.astype(np.float64), target=target))
    out = np.zeros(3, np.longdouble)
    gf.exp(x.astype(np.float64), out=out, target=target)
    assert (out == np.exp(x.astype(np.float64)).astype(np.longdouble)).all()


@pytest.mark.parametrize("target", HOST)
def test_float16_is_a_loop_of_its_own_like_numpys(target):
    x16, x32 = np.linspace(-2, 2, 9, dtype=np.float16), np.linspace(-2, 2, 9, dtype=np.float32)
    assert gf.exp.types == ["e->e", "f->f", "d->d"]
    assert same_bits(gf.exp(x16, casting="no", target=target), np.exp(x16, casting="no"))
    for call in (gf.exp, np.exp):  # float32 -> float16 is same_kind, not safe
        with pytest.raises(TypeError):
            call(x32, dtype=np.float16, casting="safe")
    # dtype=float16 reads the input as float16 first, as NumPy's float16 loop does.
    assert same_bits(gf.exp(x32 / 3, dtype=np.float16, target=target), np.exp(x32 / 3, dtype=np.float16))
    # A float16 result is rounded to float16 before it is cast into a wider out=.
    ours, theirs = np.zeros(9, np.float32), np.zeros(9, np.float32)
    gf.exp(x16, out=ours, target=target)
    np.exp(x16, out=theirs)
    assert same_bits(ours, theirs)


@pytest.mark.parametrize("target", HOST)
def test_small_integers_skip_the_float16_loop_a_deliberate_difference(target):
    """NumPy's np.exp computes an int8 in float16, its first safe loop; a gpufuncs kernel picks
    as a ufunc of its declared loops alone does (float32 here): the float16 loop is for float16
    inputs."""
    x = np.arange(-3, 4, dtype=np.int8)
    r = gf.exp(x, target=target)
    assert r.dtype == np.float32 and same_bits(r, gf.exp(x.astype(np.float32), target=target))
    assert np.exp(x).dtype == np.float16
    assert gf.get("exp", "cpu").ufunc(x).dtype == np.float32
    big = np.arange(3, dtype=np.int32)  # int32 does not fit float32 safely: float64, as NumPy
    assert gf.exp(big, target=target).dtype == np.exp(big).dtype == np.float64


def test_python_bool_casts_are_checked_and_weak_scalars_are_not():
    x32 = np.ones(3, np.float32)
    for call in (gf.clamp, np.clip):  # a Python bool is np.bool_ under casting='no', as in NumPy
        with pytest.raises(TypeError):
            call(x32, True, 2.0, casting="no")
    # Deliberate: Python ints and floats beside arrays are weak under every rule; NumPy 2.4
    # checks them (as int64/float64) under 'equiv' only, not under the stricter 'no'.
    assert same_bits(gf.clamp(x32, 0, 2.0, casting="equiv"), np.clip(x32, np.float32(0), np.float32(2)))
    with pytest.raises(TypeError):
        np.add(x32, 1, casting="equiv")
    np.add(x32, 1, casting="no")
    # With one input, NumPy checks a lone Python scalar as int64/float64, and so does gpufuncs.
    for call in (gf.exp, np.exp):
        with pytest.raises(TypeError):
            call(3, dtype=np.float16, casting="safe")


@pytest.mark.parametrize("target", HOST)
def test_floating_point_errors_follow_errstate_on_the_host(target):
    """The compiled loops read the floating-point status, as NumPy's do (see test_errstate.py)."""
    x = np.array([1000.0, 0.0])
    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError, match="overflow encountered in exp"):
            gf.exp(x, target=target)
        with pytest.raises(FloatingPointError):
            np.exp(x)
    with np.errstate(over="ignore"):
        assert same_bits(gf.exp(x, target=target), np.array([np.inf, 1.0]))


def test_order_k_keeps_fortran_order_only():
    """Deliberate: order='K' gives Fortran order when every multi-dimensional input is
    Fortran-contiguous, else C order; NumPy follows any input's stride order."""
    x = np.arange(24.0).reshape(2, 3, 4).transpose(1, 0, 2)
    assert gf.exp(x).flags.c_contiguous and not np.exp(x).flags.c_contiguous
    assert same_bits(gf.exp(x), gf.exp(np.ascontiguousarray(x)))
    assert gf.exp(np.asfortranarray(x)).flags.f_contiguous


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_strided_out_of_another_dtype_and_a_masked_0d_out(target, dtype):
    # The targets themselves handle both (Numba's loop wrote a reversed out= of another dtype
    # as if contiguous when the inputs step the same way; the blocked copy indexed a 0-d out=
    # into a scalar).
    x = np.linspace(-2, 2, 101)
    for out, step in ((np.zeros(101, dtype)[::-1], x[::-1]), (np.zeros(202, dtype)[::-2], x[::-1])):
        gf.exp(step, out=out, target=target)
        np.testing.assert_array_equal(out, gf.exp(step, target=target).astype(dtype))
    kept, written = np.array(5.0, dtype), np.array(5.0, dtype)
    gf.exp(np.array(1.0), out=kept, where=np.array(False), target=target)
    gf.exp(np.array(1.0), out=written, where=np.array(True), target=target)
    assert kept == 5.0 and written == np.asarray(gf.exp(1.0, target=target)).astype(dtype)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_out_and_where_in_either_order_are_one_call_signature(target):
    """``out=`` and ``where=`` given in either order write NumPy's masked result, and resolve to
    one cached call whatever their order, with ``target=`` or without."""
    x = np.linspace(-3, 3, 101)
    mask = np.arange(101) % 3 != 0
    kernel = gf.Kernel(gf.exp.spec)  # its own cache of resolved calls
    first, second = np.full(101, -1.0), np.full(101, -1.0)
    kernel(x, out=first, where=mask, target=target)
    kernel(x, where=mask, out=second, target=target)
    expected = np.full(101, -1.0)
    np.exp(x, out=expected, where=mask)
    np.testing.assert_allclose(first, expected, rtol=1e-15)
    np.testing.assert_array_equal(second, first)
    kernel(x, out=first, where=mask)
    kernel(x, where=mask, out=second)
    assert resolved_calls(kernel) == 2  # with target= and without: one key each, whatever the order


def test_target_keyword_is_keyed_the_same_wherever_it_is_given(monkeypatch):
    """target= alone, with out= before or after it, and target="auto" spelled out: one resolved
    call per call signature, each giving NumPy's values."""
    x, out = np.linspace(-1, 1, 7), np.empty(7)
    monkeypatch.setattr(gf.exp, "_resolved", {t: {} for t in gf.exp._resolved})
    np.testing.assert_allclose(gf.exp(x, target="cpu"), np.exp(x), rtol=1e-15)
    gf.exp(x, target="cpu", out=out)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-15)
    out[:] = 0
    gf.exp(x, out=out, target="cpu")
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-15)
    assert resolved_calls(gf.exp) == 2
    gf.exp(x)
    gf.exp(x, target="auto")
    assert resolved_calls(gf.exp) == 3
    with pytest.raises(ValueError, match="unknown target None"):
        gf.exp(x, target=None)


def test_a_resolved_call_is_not_run_on_arguments_it_was_not_resolved_for():
    """``kernel.resolve`` returns the validated call, not a way around the kernel's keyed call:
    its compiled loop trusts that the arguments are of its signature (a list of arrays or
    arrays of another dtype made it read out of bounds)."""
    x = np.arange(4.0)
    resolved = gf.gaussian.resolve(x, 0.0, 1.0, target="cpu")
    assert resolved.target == "cpu" and resolved.plan.inputs[0].dtype == x.dtype
    with pytest.raises(TypeError, match="not callable"):
        resolved((x, 0.0, 1.0))  # the point: a ResolvedCall cannot be called


def test_0d_arrays_run_the_loop_of_numpy_scalars_without_a_compilation(restore_registry):
    """A 0-d array is a NumPy scalar of its dtype to NumPy's rules: it runs the loop Python and
    NumPy scalars compiled, with their results (a NumPy scalar where every input is 0-d)."""
    from numba.core import event

    kernel = gf.ufunc(signatures=["float64(float64, float64)"], reference=lambda a, b: a * b + 1,
                      name="test_zero_d", replace=True)(lambda a, b: a * b + 1)
    x = np.linspace(0, 1, 50)
    kernel(x, 2.0, target="cpu")
    kernel(0.5, 2.0, target="cpu")
    compiled = []

    class Count(event.Listener):
        def on_start(self, ev):
            compiled.append(ev)

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Count()):
        with_0d = kernel(x, np.array(2.0), target="cpu")
        all_0d = kernel(np.array(0.5), np.array(2.0), target="cpu")
    assert compiled == []
    np.testing.assert_array_equal(with_0d, x * 2.0 + 1)
    assert type(all_0d) is np.float64 and all_0d == 2.0
