"""A gufunc's ``axes=``, ``axis=`` and ``keepdims=`` on the cuda target, against NumPy's gufuncs.

Marked ``cuda``: run on a GPU with ``pytest -m cuda``, and on Numba's CUDA simulator through
``tests/test_cuda_sim.py`` (which runs this file with ``NUMBA_ENABLE_CUDASIM=1``). Host arrays,
Numba device arrays, ``__cuda_array_interface__`` objects and (where installed, on a GPU) CuPy
arrays and torch tensors: each kind is viewed with its axes moved by its own library, and new
outputs are of the kind of the inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_gufunc_axes import CASES, cumsum, dot

pytestmark = pytest.mark.cuda

#: Cases run with device arrays (a few of every kind: keywords, broadcasting, two core dims).
DEVICE_CASES = ["dot axes", "dot axis", "dot keepdims axes", "dot broadcast", "cumsum axes negative",
                "matmul axes output first"]


def _host(array):
    """A device array's values on the host, whatever its library."""
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if type(array).__module__.startswith("cupy"):
        return array.get()
    return array.cpu().numpy()


class Interface:
    """A bare ``__cuda_array_interface__`` object over a device array's memory (by default the
    array's own view of it)."""

    def __init__(self, base, shape=None, strides=None, offset=0):
        from gpufuncs.targets.cuda.arrays import CAI, SIM, kind_of, pointer_getter

        address = pointer_getter(SIM if kind_of(type(base)) == SIM else CAI)(base)
        self.__cuda_array_interface__ = {
            "shape": shape or base.shape, "strides": strides or base.strides, "typestr": base.dtype.str,
            "data": (address + offset, False), "version": 3, "stream": None}
        self.base = base


@pytest.mark.parametrize("case", CASES)
def test_host_arrays(case):
    kernel, reference, inputs, keywords = CASES[case]
    expected = reference(*inputs, **keywords)
    result = kernel(*inputs, target="cuda", **keywords)
    assert result.shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=1e-13, atol=1e-13)
    out = np.full(expected.shape[::-1], np.nan).T
    assert kernel(*inputs, out=out, target="cuda", **keywords) is out
    np.testing.assert_allclose(out, expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("case", DEVICE_CASES)
def test_numba_device_arrays_in_and_out(case):
    from numba import cuda

    kernel, reference, inputs, keywords = CASES[case]
    expected = reference(*inputs, **keywords)
    for _ in range(2):  # the second call runs the resolved call kept for its signature
        result = kernel(*(cuda.to_device(np.ascontiguousarray(x)) for x in inputs), **keywords)
        assert getattr(type(result), "__cuda_ndarray__", False) and result.shape == expected.shape
        np.testing.assert_allclose(_host(result), expected, rtol=1e-13, atol=1e-13)
    out = cuda.to_device(np.full(expected.shape, np.nan))
    assert kernel(*(cuda.to_device(np.ascontiguousarray(x)) for x in inputs), out=out, **keywords) is out
    np.testing.assert_allclose(out.copy_to_host(), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("case", DEVICE_CASES)
def test_interface_objects_in_and_out(case):
    from numba import cuda

    kernel, reference, inputs, keywords = CASES[case]
    expected = reference(*inputs, **keywords)
    result = kernel(*(Interface(cuda.to_device(np.ascontiguousarray(x))) for x in inputs), **keywords)
    np.testing.assert_allclose(_host(result), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_cupy_and_torch_stay_their_own_kind(library):
    module = pytest.importorskip(library)
    if library == "torch" and not module.cuda.is_available():
        pytest.skip("torch without CUDA")
    kernel, reference, inputs, keywords = CASES["matmul axes output first"]
    expected = reference(*inputs, **keywords)
    to = module.asarray if library == "cupy" else (lambda x: module.as_tensor(x, device="cuda"))
    result = kernel(*map(to, inputs), **keywords)
    assert type(result) is type(to(inputs[0]))
    np.testing.assert_allclose(_host(result), expected, rtol=1e-13, atol=1e-13)
    kept = dot(*(to(x) for x in CASES["dot keepdims axis"][2]), axis=0, keepdims=True)
    np.testing.assert_allclose(_host(kept), CASES["dot keepdims axis"][1](*CASES["dot keepdims axis"][2],
                                                                           axis=0, keepdims=True), rtol=1e-13)


def test_only_the_elements_of_a_device_out_change():
    """``out=`` a transposed interleaved view of a device buffer: every other byte stays."""
    from numba import cuda

    a = CASES["cumsum axes"][2][0]
    values = cumsum(a, axes=[0, 2], target="cuda")  # shape (3, 4, 2) from (2, 3, 4)
    start = np.random.default_rng(5).uniform(-9, 9, 3 * values.size + 2)
    expected = start.copy()
    # out[i, j, k] at float 1 + 3 * (i + 3 * j + 12 * k): every third float, in Fortran order
    steps = (24, 72, 288)
    np.ndarray(values.shape, np.float64, buffer=expected, offset=8, strides=steps)[...] = values
    base = cuda.to_device(start)
    out = Interface(base, values.shape, steps, offset=8)
    assert cumsum(cuda.to_device(a), axes=[0, 2], out=out) is out
    np.testing.assert_array_equal(base.copy_to_host(), expected)


def test_an_error_on_device_writes_nothing():
    from numba import cuda

    base = cuda.to_device(np.arange(24.0))
    with pytest.raises(ValueError, match="with keepdims=True its axes"):
        dot(cuda.to_device(CASES["dot axes"][2][0]), cuda.to_device(CASES["dot axes"][2][1]),
            keepdims=True, out=base.reshape(2, 3, 4))
    np.testing.assert_array_equal(base.copy_to_host(), np.arange(24.0))


def test_dlpack_only_arrays_are_refused_with_their_axes_moved():
    from gpufuncs.targets.cuda.views import strided_view

    class Capsule:
        def __dlpack__(self, stream=None):
            raise AssertionError("not read")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match=r"a DLPack-only array \(Capsule\) cannot be viewed"):
        strided_view(Capsule(), (2, 3), (8, 16))
