"""The cuda target on views of one shared buffer: NumPy's answer, or a clear error naming the
kernel, and every byte outside the elements ``out=`` names left as it was.

Marked ``cuda``: run on a GPU with ``pytest -m cuda``, and on Numba's CUDA simulator through
``tests/test_cuda_sim.py`` (which runs this file with ``NUMBA_ENABLE_CUDASIM=1``). Each case
runs on host arrays (the pinned pipeline) and on device arrays: views described by the CUDA
array interface over a device copy of the buffer (described afresh on every call), and, where
Numba's device arrays can express the view, sliced device arrays, called twice (the second call
runs the executor kept for its call signature).
"""

from __future__ import annotations

import numpy as np
import pytest

import gpufuncs as gf

pytestmark = pytest.mark.cuda

F8, I4 = np.dtype(np.float64), np.dtype(np.int32)

#: name -> (buffer bytes, [input views], out view); a view is (offset, shape, strides, dtype).
CASES = {
    "interleaved": (160, [(8, (10,), (16,), F8)], (0, (10,), (16,), F8)),
    "negative strides": (160, [(144, (10,), (-16,), F8)], (152, (10,), (-16,), F8)),
    "shifted": (160, [(0, (19,), (8,), F8)], (8, (19,), (8,), F8)),
    "same elements": (160, [(0, (20,), (8,), F8)], (0, (20,), (8,), F8)),
    "imag into real": (80, [(8, (5,), (16,), F8)], (0, (5,), (16,), F8)),
    # Fields of a record [("a", "f8"), ("i", "i4")]: a 12-byte stride over an 8-byte field.
    "record field": (60, [(8, (5,), (12,), I4)], (0, (5,), (12,), F8)),
    "byte-swapped": (160, [(0, (10,), (16,), F8.newbyteorder())], (8, (10,), (16,), F8.newbyteorder())),
    "unaligned": (161, [(1, (10,), (8,), F8)], (81, (10,), (8,), F8)),
}
#: Device cases refused, with the start of their message (NumPy's answer is beyond the kernels).
REFUSED = {"record field": r"exp: a device array with strides \(12,\) that are not multiples",
           "byte-swapped": "exp: x is a device array of byte-swapped dtype",
           "unaligned": "exp: x is a device array at address"}


def _view(buffer: np.ndarray, offset: int, shape: tuple, strides: tuple, dtype: np.dtype) -> np.ndarray:
    return np.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)


def _start(nbytes: int, ins: list, seed: int = 3) -> np.ndarray:
    """Random canary bytes, with finite values written into the input views."""
    buffer = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    for k, spec in enumerate(ins):
        view = _view(buffer, *spec)
        view[...] = np.linspace(-2.0, 2.0, view.size).reshape(view.shape) + k
    return buffer


def _expected(kernel, nbytes: int, ins: list, out: tuple) -> np.ndarray:
    """The buffer after ``kernel(*ins, out=out)``, computed by the same target from copies (no
    overlap, so the overlap handling cannot change a bit): out's elements replaced, every other
    byte as it was."""
    before = _start(nbytes, ins)
    values = kernel(*(_view(before, *s).copy() for s in ins), target="cuda")
    after = before.copy()
    _view(after, *out)[...] = values
    return after


def _device_view(base, spec: tuple):
    """A ``__cuda_array_interface__`` object for the view ``spec`` of the device array ``base``."""
    from gpufuncs.targets.cuda.arrays import CAI, SIM, kind_of, pointer_getter

    kind = SIM if kind_of(type(base)) == SIM else CAI
    address = pointer_getter(kind)(base)
    offset, shape, strides, dtype = spec

    class View:
        __cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": dtype.str,
                                    "data": (address + offset, False), "version": 3, "stream": None}

    return View()


@pytest.mark.parametrize("case", CASES)
def test_host_views_of_one_buffer(case):
    nbytes, ins, out = CASES[case]
    buffer = _start(nbytes, ins)
    gf.exp(*(_view(buffer, *s) for s in ins), out=_view(buffer, *out), target="cuda")
    np.testing.assert_array_equal(buffer, _expected(gf.exp, nbytes, ins, out))


@pytest.mark.parametrize("case", CASES)
def test_device_views_of_one_buffer(case):
    from numba import cuda

    nbytes, ins, out = CASES[case]
    base = cuda.to_device(_start(nbytes, ins))

    def call() -> None:
        gf.exp(*(_device_view(base, s) for s in ins), out=_device_view(base, out))

    if case in REFUSED:
        with pytest.raises((TypeError, ValueError), match=REFUSED[case]):
            call()
        np.testing.assert_array_equal(base.copy_to_host(), _start(nbytes, ins))  # nothing written
        return
    call()
    np.testing.assert_array_equal(base.copy_to_host(), _expected(gf.exp, nbytes, ins, out))


@pytest.mark.parametrize(("source", "target"), [(np.s_[1::2], np.s_[::2]), (np.s_[-2::-2], np.s_[::-2]),
                                                (np.s_[:-1], np.s_[1:]), (np.s_[:], np.s_[:])])
def test_sliced_device_arrays_overlapping_out_twice(source, target):
    """Keyed device arrays: the second call runs the executor kept for the call signature,
    whose overlap check is made per call."""
    from numba import cuda

    start = np.linspace(-1.0, 1.0, 20)
    for _ in range(2):
        base = cuda.to_device(start)
        gf.exp(base[source], out=base[target])
        host = start.copy()
        host[target] = gf.exp(start[source].copy(), target="cuda")
        np.testing.assert_array_equal(base.copy_to_host(), host)


def test_misaligned_device_array_is_refused_on_every_call():
    from numba import cuda

    raw = cuda.to_device(np.zeros(8 * 10 + 1, np.uint8))
    misaligned = raw[1:].view(np.float64)
    for _ in range(2):  # the second call: the executor kept for the call signature
        with pytest.raises(ValueError, match=r"exp: x is a device array at address .* misaligned"):
            gf.exp(misaligned)
        with pytest.raises(ValueError, match=r"exp: out is a device array at address .* misaligned"):
            gf.exp(cuda.to_device(np.ones(10)), out=misaligned)


@pytest.fixture
def reverse(restore_registry):
    @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", reference=None,
               replace=True)
    def reverse_rows(x, out):
        n = x.shape[0]
        for i in range(n):
            out[i] = x[n - 1 - i]

    return reverse_rows


def test_gufunc_in_place_with_a_core_dimension(reverse):
    """``out=x`` on a core operand: read as a copy (NumPy: ``np.matmul(a, a, out=a)``)."""
    from numba import cuda

    x = np.arange(6.0).reshape(2, 3)
    expected = [[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]
    for _ in range(2):  # the second call: the executor kept for the call signature
        host = x.copy()
        reverse(host, out=host, target="cuda")
        np.testing.assert_array_equal(host, expected)
        device = cuda.to_device(x)
        reverse(device, out=device)
        np.testing.assert_array_equal(device.copy_to_host(), expected)
        record = cuda.to_device(np.zeros((2, 3), [("a", "f8"), ("i", "i4")]).view(np.uint8))
        field = _device_view(record, (0, (2, 3), (36, 12), np.dtype(np.float64)))  # core stride 12
        with pytest.raises(ValueError, match=r"reverse_rows: a device array with strides \(36, 12\)"):
            reverse(field, out=device)
        shifted = cuda.to_device(np.arange(9.0).reshape(3, 3))  # rows 0-1 into rows 1-2
        reverse(shifted[:2], out=shifted[1:])
        np.testing.assert_array_equal(shifted.copy_to_host(), [[0, 1, 2], [2, 1, 0], [5, 4, 3]])
