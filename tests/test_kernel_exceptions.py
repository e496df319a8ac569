"""A kernel's own exception, type and message, from every path of ``parallel``, as on ``cpu``.

A kernel raising on a thread of a parallel loop used to give a ``SystemError`` (the exception
set on the wrong thread) or nothing at all (the call returned with elements never written).
Each case here puts the bad element in the first, a middle or the last of the parallel loop's
chunks (10**6 elements: about 60 chunks) and compares what ``parallel`` raises with ``cpu``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba.core import sigutils

import gpufuncs as gf
from gpufuncs.targets.cpu import CpuKernel, loops

N = 10**6
POSITIONS = [0, N // 2 + 12345, N - 1]  # in the first, a middle and the last chunk


class KernelTrouble(Exception):
    """A user's own exception type, raised from nopython code."""


@gf.ufunc(signatures=["float64(float64)"], reference=None, replace=True)
def halve_positive(x):
    if x < 0:
        raise KernelTrouble("halve_positive needs x >= 0")
    if x > 1e300:
        raise ValueError("too large", x)  # a message made of the element's value
    return x / 2


@gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", reference=None,
           replace=True)
def scaled_rows(x, out):
    total = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0:
            raise KernelTrouble("scaled_rows needs x >= 0")
        if x[i] > 1e300:
            raise ValueError("too large", x[i])
        total += x[i]
    for i in range(x.shape[0]):
        out[i] = x[i] / total


def _raised(kernel, *args, **kwargs):
    with pytest.raises(Exception) as info:
        kernel(*args, **kwargs)
    return type(info.value), str(info.value)


def _same_exception(kernel, make_args, out_like, contiguous):
    """For each position of the bad element, with and without ``out=``: the same exception on
    ``parallel`` as on ``cpu``, and the right type and message."""
    for bad, (kind, message) in [(-1.0, (KernelTrouble, f"{kernel.__name__} needs x >= 0")),
                                 (1e301, (ValueError, "('too large', 1e+301)"))]:
        for position in POSITIONS:
            args = make_args(position, bad)
            assert args[0].flags.c_contiguous == contiguous
            for with_out in (False, True):
                kwargs = {"out": out_like(args[0])} if with_out else {}
                found = {t: _raised(kernel, *args, target=t, **kwargs) for t in ("cpu", "parallel")}
                assert found["parallel"] == found["cpu"] == (kind, message), (position, with_out)


def _flat_elements(position, bad):
    x = np.linspace(0.0, 1.0, N)
    x[position] = bad
    return (x,)


def _strided_elements(position, bad):
    x = np.linspace(0.0, 1.0, 2 * N)[::2]
    x[position] = bad
    return (x,)


def _flat_rows(position, bad):
    x = np.linspace(0.0, 1.0, N).reshape(N // 4, 4)
    x.reshape(-1)[position] = bad
    return (x,)


def _strided_rows(position, bad):
    x = np.linspace(0.0, 1.0, 2 * N).reshape(N // 4, 8)[:, ::2]
    x[np.unravel_index(position, x.shape)] = bad
    return (x,)


def test_flat_parallel_ufunc_raises_the_kernels_exception():
    _same_exception(halve_positive, _flat_elements, np.empty_like, contiguous=True)


def test_strided_parallel_ufunc_raises_the_kernels_exception():
    _same_exception(halve_positive, _strided_elements, lambda x: np.empty(2 * N)[1::2],
                    contiguous=False)


def test_flat_parallel_gufunc_raises_the_kernels_exception():
    _same_exception(scaled_rows, _flat_rows, np.empty_like, contiguous=True)


def test_strided_parallel_gufunc_raises_the_kernels_exception():
    _same_exception(scaled_rows, _strided_rows, lambda x: np.empty((N // 4, 8))[:, 1::2],
                    contiguous=False)


def test_the_first_bad_element_in_order_wins():
    # Two bad elements in different chunks: the serial loop stops at the first; so must parallel.
    x = np.linspace(0.0, 1.0, N)
    x[N // 3], x[N - 5] = 1e301, -1.0
    for target in ("cpu", "parallel"):
        with pytest.raises(ValueError, match="too large"):
            halve_positive(x, target=target)
    x[N // 3], x[N - 5] = -1.0, 1e301
    for target in ("cpu", "parallel"):
        with pytest.raises(KernelTrouble, match="halve_positive needs"):
            halve_positive(x, target=target)


@gf.ufunc(signatures=["float64(float64)"], reference=None, replace=True)
def step_down(x):
    if x < 0:
        raise ValueError("negative", x)
    return x - 1


def test_in_place_call_raises_for_the_element_the_serial_loop_stops_at():
    # out is x: the elements before the bad one are -0.5 by then, so running the kernel again
    # on its chunk, rather than on that element, would report -0.5.
    for position in POSITIONS:
        found = {}
        for target in ("cpu", "parallel"):
            x = np.full(N, 0.5)
            x[position] = -7.0
            found[target] = _raised(step_down, x, out=x, target=target)
        assert found["parallel"] == found["cpu"] == (ValueError, "('negative', -7.0)")


def test_a_call_that_raises_nothing_is_computed_in_full():
    x = np.linspace(0.0, 1.0, N)
    np.testing.assert_array_equal(halve_positive(x, target="parallel"), x / 2)
    rows = x.reshape(N // 4, 4)
    np.testing.assert_array_equal(scaled_rows(rows, target="parallel"),
                                  rows / rows.sum(axis=1, keepdims=True))


def _may_raise(kernel):
    compiled = CpuKernel(kernel.spec, "parallel")
    return [loops.may_raise(compiled.scalar(), tuple(sigutils.normalize_signature(loop.signature)[0]))
            for loop in kernel.spec.loops]


def test_which_kernels_can_raise():
    # Kernels that cannot raise keep Numba's threads on strided calls.
    assert _may_raise(halve_positive) == [True]
    assert _may_raise(scaled_rows) == [True]
    for name in ("exp", "gaussian", "clamp", "hermite_norm"):
        assert _may_raise(gf.registry[name]) == [False, False], name


def test_a_kernel_that_raises_on_a_thread_only_is_reported_by_name():
    from gpufuncs.targets.cpu import _checked
    from gpufuncs.targets.cpu.fpflags import STATUS_BITS

    # the parallel loops return 1 + that element above their floating-point status
    run = _checked(halve_positive.spec, lambda *args: (17 + 1) << STATUS_BITS | 1)
    with pytest.raises(RuntimeError, match=r"kernel 'halve_positive' raised .* at loop element 17"):
        run()
    assert _checked(halve_positive.spec, lambda *args: 5)() == 5  # the status alone


@pytest.mark.parametrize("kernel, shape", [(halve_positive, (100,)), (scaled_rows, (25, 4))])
def test_a_parallel_call_of_one_chunk_raises_the_kernels_exception_on_the_callers_thread(kernel, shape):
    """A parallel call too small for two chunks runs the serial loop on the caller's thread
    (no parallel region): the kernel's exception propagates from there as on ``cpu``, and
    the result of a call that raises nothing is ``cpu``'s."""
    x = np.linspace(0.0, 1.0, math.prod(shape)).reshape(shape)
    np.testing.assert_array_equal(kernel(x, target="parallel"), kernel(x, target="cpu"))
    for position in (0, x.size // 2, x.size - 1):
        bad = x.copy()
        bad.reshape(-1)[position] = -1.0
        found = {t: _raised(kernel, bad, target=t) for t in ("cpu", "parallel")}
        assert found["parallel"] == found["cpu"] == (KernelTrouble, f"{kernel.__name__} needs x >= 0")
