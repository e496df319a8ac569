"""Lazy kernels (``@gf.ufunc`` bare, or without signatures): a loop per new input type
combination, as Numba's ``DUFunc``; checked against the kernel run as plain Python."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import check_kernel

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
TARGETS = [CUDA] if SIMULATED else ["cpu", "parallel", CUDA]


def _lazy_muladd():
    @gf.ufunc
    def lazy_muladd(a, b):
        return a * b + 1

    return lazy_muladd


@pytest.mark.parametrize("target", TARGETS)
def test_a_bare_kernel_compiles_a_loop_per_new_input_types(target, restore_registry):
    kernel = _lazy_muladd()
    assert kernel.types == [] and kernel.spec.lazy
    ints = kernel(np.arange(4), 3, target=target)
    assert ints.dtype == np.int64 and np.array_equal(np.asarray(ints), np.arange(4) * 3 + 1)
    assert kernel.types == ["ll->l"]
    floats = kernel(np.linspace(0, 1, 4), 2.5, target=target)
    assert floats.dtype == np.float64 and np.array_equal(np.asarray(floats), np.linspace(0, 1, 4) * 2.5 + 1)
    assert kernel.types == ["ll->l", "dd->d"]
    small = kernel(np.arange(4, dtype=np.int8), np.int8(2), target=target)
    assert small.dtype == np.int64 and kernel.types == ["ll->l", "dd->d"]  # int8 fits 'll->l'
    z = kernel(np.ones(2, np.complex128), np.ones(2, np.complex128), target=target)
    assert z.dtype == np.complex128 and kernel.types[-1] == "DD->D"


def test_options_without_signatures_are_lazy_too(restore_registry):
    @gf.ufunc(name="lazy_ratio", doc="x / 2, typed by Numba")
    def lazy_ratio(x):
        return x / 2

    assert lazy_ratio.__doc__ == "x / 2, typed by Numba" and lazy_ratio.types == []
    assert lazy_ratio(np.float32(3)).dtype == np.float64  # Numba types float32 / int as float64
    assert lazy_ratio.types == ["f->d"] or lazy_ratio.types == ["e->d", "f->d"]


def test_a_lazy_kernel_is_checked_against_itself_run_in_python(restore_registry):
    kernel = _lazy_muladd()
    kernel(np.arange(3), 1)
    kernel(np.ones(3), 1.0)
    check_kernel(kernel, targets=["cpu"], max_examples=20)


def test_a_body_that_does_not_compile_for_the_inputs_names_the_kernel(restore_registry):
    @gf.ufunc
    def lazy_broken(x):
        return x.no_such_attribute

    message = r"kernel 'lazy_broken' failed to compile for inputs int64"
    with pytest.raises(gf.KernelCompileError, match=message):
        lazy_broken(np.arange(3))
    assert lazy_broken.types == []


def test_a_gufunc_needs_signatures():
    with pytest.raises(gf.KernelDefinitionError, match="a gufunc needs signatures"):
        gf.gufunc(signatures=[], layout="()->()", name="lazy_gufunc")(lambda x, out: None)
