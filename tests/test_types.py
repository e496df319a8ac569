"""Kernels of every numeric type NumPy's ufuncs have: integers, bool, complex and mixed loops.

Each kernel is checked with ``check_kernel`` (Hypothesis) against the NumPy ufunc it mirrors,
on the loop's own dtypes, integer extremes and complex infinities included: ``np.add`` wraps,
``np.floor_divide`` by zero gives 0, comparisons give bool. On every target: ``cuda`` tests are
marked (``pytest -m cuda`` on a GPU), and the CUDA simulator runs this file on ``cuda`` in CI
(see test_cuda_sim.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import check_kernel

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
TARGETS = [CUDA] if SIMULATED else ["cpu", "parallel", CUDA]
#: NumPy's integer loops of np.add (bool excluded), in its order.
INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


@gf.ufunc(signatures=[f"{t}({t}, {t})" for t in INTEGERS] + gf.float_signatures(2),
          reference=np.add, replace=True)
def types_add(a, b):
    return a + b


@gf.ufunc(signatures=["int64(int64, int64)", "uint64(uint64, uint64)"],
          reference=np.floor_divide, replace=True)
def types_floor_divide(a, b):
    return a // b


def multiply_as_numpys_array_loop(a, b):
    """``np.multiply`` through NumPy's array loop (fused products, which kernels follow): NumPy
    takes its scalar loop, four rounded products, for some broadcasts (``(1, 1)`` times
    ``(1,)``), so the operands are made contiguous first (docs/semantics.md, "Where NumPy is
    not one answer")."""
    a, b = (np.array(x, order="C") for x in np.broadcast_arrays(a, b))  # copies, 0-d kept
    return np.multiply(a, b)


@gf.ufunc(signatures=["complex64(complex64, complex64)", "complex128(complex128, complex128)"],
          reference=multiply_as_numpys_array_loop, replace=True)
def types_multiply(a, b):
    return a * b


@gf.ufunc(signatures=["complex128(complex128, complex128)"], replace=True,
          reference=lambda z, c: z * z + c)
def types_zsq(z, c):
    return z * z + c


@gf.ufunc(signatures=["boolean(int64, int64)", "boolean(float64, float64)"], reference=np.less,
          replace=True)
def types_less(a, b):
    return a < b


@gf.ufunc(signatures=["int64(int64)", "float64(float64)"], reference=np.negative, replace=True)
def types_negative(a):
    return -a


@gf.ufunc(signatures=["float64(float64, int32)"], reference=np.multiply, replace=True)
def types_scale(x, n):
    return x * n


# parallel runs the very code cpu runs (and the tests below run it): the property check runs on
# cpu and cuda
@pytest.mark.parametrize("target", [t for t in TARGETS if t != "parallel"])
@pytest.mark.parametrize("kernel", [
    types_add, types_floor_divide,
    # The simulator runs a kernel as Python on NumPy values: for 0-d operands, NumPy's scalar
    # complex multiply (four rounded products), not the fused array loop the reference runs;
    # at the overflow edge they differ. test_complex.py checks the simulator's multiply there.
    *(pytest.param(k, marks=pytest.mark.skipif(SIMULATED, reason="NumPy's scalar complex "
                                               "multiply on the simulator: see test_complex.py"))
      for k in (types_multiply, types_zsq)),
    types_less, types_scale], ids=lambda k: k.__name__)
def test_kernel_agrees_with_numpy_on_its_own_dtypes(kernel, target):
    # types_add: the widest and narrowest integers of each sign, and float64 (each loop is a
    # compilation per argument kind: all eleven cost minutes of CI on a cold cache)
    loops = ("int8", "uint16", "int64", "uint64", "float64") if kernel is types_add else None
    check_kernel(kernel, targets=[target], dtypes=loops, max_examples=8 if SIMULATED else 30)


@pytest.mark.parametrize("target", TARGETS)
def test_integer_arithmetic_wraps_as_numpy_does(target):
    big = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min], np.int64)
    with np.errstate(over="ignore"):
        assert np.array_equal(types_add(big, big, target=target), big + big)
    small = np.array([127, -128], np.int8)
    assert types_add(small, small, target=target).dtype == np.int8
    assert np.array_equal(types_add(small, small, target=target), small + small)


@gf.ufunc(signatures=["int64(int64, int64)"], reference=None, replace=True)
def types_absdiff(a, b):
    return abs(a - b)


@pytest.mark.parametrize("target", TARGETS)
def test_an_expression_whose_intermediate_wraps_is_numpys(target):
    """Numba marks signed arithmetic ``nsw`` (overflow undefined), and LLVM compiled
    ``abs(a - b)`` as if ``a - b`` could not wrap: ``-(2**63 - 1)`` for ``1`` and ``-2**63``.
    gpufuncs compiles kernels with wrapping arithmetic (``targets.base.numpys_arithmetic``)."""
    a = np.array([1, 5, -3, np.iinfo(np.int64).max] * 5)
    b = np.array([np.iinfo(np.int64).min, 2, 2**62, -1] * 5)
    for n in (1, 3, 20):  # the vector loop and its scalar remainder
        with np.errstate(over="ignore"):
            want = np.abs(a[:n] - b[:n])
        assert want[0] == np.iinfo(np.int64).max
        np.testing.assert_array_equal(types_absdiff(a[:n], b[:n], target=target), want)
    assert types_absdiff(1, np.iinfo(np.int64).min, target=target) == np.iinfo(np.int64).max


@gf.ufunc(signatures=["int64(int64, int64)", "float64(float64, float64)",
                      "complex128(complex128, complex128)"], reference=np.add, replace=True)
def types_add_three_kinds(a, b):
    return a + b


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("z", [1.5 + 2j, np.complex128(-2.5 + 1j), np.complex64(3.5 - 1j)], ids=repr)
@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_a_complex_scalar_cast_unsafely_into_a_real_loop(target, z, dtype):
    """NumPy casts the value, dropping the imaginary part with a ComplexWarning; the flat loops
    failed to compile (a complex argument of a real loop), the scalar cast raised TypeError."""
    x = np.array([1, 2, -3] * 7)
    with pytest.warns(np.exceptions.ComplexWarning):
        want = np.add(x, z, dtype=dtype, casting="unsafe")
    with pytest.warns(np.exceptions.ComplexWarning):
        got = types_add_three_kinds(x, z, dtype=dtype, casting="unsafe", target=target)
    got = got.copy_to_host() if hasattr(got, "copy_to_host") else got
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)


FIRST_COMPILATIONS = """
import json, sys
import numpy as np
import gpufuncs as gf

@gf.ufunc(signatures=["float64(float64, float64)"])
def first_remainder(a, b):
    return a % b

@gf.ufunc(signatures=["int64(int64, int64)"])
def first_absdiff(a, b):
    return abs(a - b)

target = sys.argv[1]
result = lambda r: (r.copy_to_host() if hasattr(r, "copy_to_host") else np.asarray(r)).tolist()
a, b = np.array([1.0, -1.0, 0.0, 1e300]), np.array([3.06547472e-59, np.inf, np.inf, 1e-300])
print(json.dumps([result(first_remainder(a, b, target=target)),
                  result(first_absdiff(np.array([1] * 20), np.array([-2**63] * 20), target=target))]))
"""


@pytest.mark.parametrize("target", ["cpu", CUDA])
def test_the_first_compilations_of_a_process_are_numpys_too(target, tmp_path):
    """Numba imports the modules that lower arithmetic at its first compilation of a target:
    what gpufuncs replaces there (signed integers that wrap, CUDA's exact float remainder) was
    left in place for a process's first CUDA kernel, which computed ``1.0 % 3e-59`` as
    ``1.2e-17`` (the H100 found it in a fused function). A fresh process, no disk cache."""
    env = {**os.environ, "GPUFUNCS_CACHE_DIR": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(gf.__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FIRST_COMPILATIONS), target], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    remainders, absdiffs = json.loads(done.stdout.splitlines()[-1])
    a, b = np.array([1.0, -1.0, 0.0, 1e300]), np.array([3.06547472e-59, np.inf, np.inf, 1e-300])
    want = np.remainder(a, b)
    assert want[0] == math.fmod(1.0, 3.06547472e-59) < 1e-58 and want[1] == np.inf  # what frem missed
    np.testing.assert_array_equal(np.array(remainders), want)
    assert absdiffs == [2**63 - 1] * 20


WITHOUT_NUMBA_CUDA = """
import sys, importlib.abc

class Absent(importlib.abc.MetaPathFinder):  # numba's old bundled numba.cuda has no such modules
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("numba.cuda.cpython", "numba.cuda.np")):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Absent())
import numpy as np
import gpufuncs as gf
import gpufuncs.targets.cuda.compat  # what CPU calls import of the cuda target

@gf.ufunc(signatures=["int64(int64, int64)"])
def halves(a, b):
    return a // b

print(halves(np.array([-2**63, 7]), np.array([-1, 2]), target="cpu").tolist())
"""


def test_cpu_kernels_compile_where_numba_cuda_is_not_installed(tmp_path):
    """Without numba-cuda, numba.cuda is Numba's old bundled target: the replacements of
    numba-cuda's modules are the cuda target's, or every compilation fails importing them (the
    README's main job failed so on a fresh machine: "No module named 'numba.cuda.cpython'")."""
    env = {**os.environ, "GPUFUNCS_CACHE_DIR": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(gf.__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WITHOUT_NUMBA_CUDA)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [-2**63, 3]


@pytest.mark.parametrize("target", TARGETS)
def test_integer_division_by_zero_gives_zero(target):
    a, b = np.array([7, -7, 5, 0]), np.array([2, 2, 0, 0])
    with np.errstate(divide="ignore"):
        want = np.floor_divide(a, b)
    assert np.array_equal(types_floor_divide(a, b, target=target), want)
    assert want.tolist() == [3, -4, 0, 0]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("args", "dtype"), [
    ((np.ones(3, np.int8), 1), np.int8),  # a weak Python int keeps the array's type
    ((np.ones(3, np.int16), np.ones(3, np.uint8)), np.int16),
    ((np.ones(3, np.int8), 1.5), np.float64),  # a float above the arrays' kind: float64, strong
    ((np.ones(3, np.uint64), np.ones(3, np.int64)), np.float64),  # NumPy's answer too
    ((np.ones(3, np.float32), 2), np.float32),
    ((1, 2), np.int64),
])
def test_loop_selection_matches_numpy(args, dtype, target):
    result = types_add(*args, target=target)
    assert result.dtype == dtype == np.add(*args).dtype
    assert np.array_equal(result, np.add(*args))


@pytest.mark.parametrize("target", TARGETS)
def test_python_ints_that_do_not_fit_raise_numpys_overflow_error(target):
    x = np.ones(3, np.int8)
    with pytest.raises(OverflowError, match="Python integer 300 out of bounds for int8"):
        types_add(x, 300, target=target)
    with pytest.raises(OverflowError):
        np.add(x, 300)
    assert np.array_equal(types_add(x, 100, target=target), x + 100)  # the same call, in range
    with pytest.raises(OverflowError):  # two Python ints past int64: NumPy raises too
        np.add(2**63, 1)
    with pytest.raises(OverflowError):
        types_add(2**63, 1, target=target)
    # A deliberate difference (docs/semantics.md): alone, NumPy types 2**63 by its value (as
    # uint64, which a ufunc of int64 and float64 loops computes in float64); here a Python int
    # selects the int64 loop whatever its value, and does not fit it.
    numba_ufunc = gf.get("types_negative", "cpu").ufunc
    assert numba_ufunc.types == ["l->l", "d->d"] and numba_ufunc(2**63).dtype == np.float64
    with pytest.raises(OverflowError):
        types_negative(2**63, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_complex_values_and_scalars(target):
    z = np.array([1 + 2j, np.inf + 0j, complex(np.nan, 1), -0.0 - 1j], np.complex64)
    got = types_multiply(z, 1j, target=target)
    with np.errstate(invalid="ignore"):  # inf * 0 in a part, as in NumPy
        want = np.multiply(z, 1j)
    assert got.dtype == want.dtype == np.complex64
    assert np.array_equal(got, want, equal_nan=True)
    with pytest.raises(TypeError, match=r"types_scale: no loop for inputs \(complex128, int32\)"):
        types_scale(z.astype(np.complex128), np.ones(4, np.int32), target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_bool_results_and_out(target):
    a, b = np.array([1.0, np.nan, 3.0]), np.array([2.0, 2.0, 2.0])
    assert types_less(a, b, target=target).tolist() == [True, False, False]
    out = np.ones(3, np.int64)  # bool results cast into an integer out=, as NumPy's
    types_less(a, b, out=out, target=target)
    assert out.tolist() == [1, 0, 0]
    with pytest.raises(TypeError, match="cannot cast the bool result"):
        types_less(a, b, out=np.empty(3, np.int8), casting="no", target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_mixed_loop_reads_each_input_as_its_own_type(target):
    x, n = np.array([0.5, 1.5, -2.0]), np.array([3, -1, 7], np.int32)
    got = types_scale(x, n, target=target)
    assert got.dtype == np.float64 and np.array_equal(got, x * n)
    assert np.array_equal(types_scale(x, 4, target=target), x * 4)
    strided = np.arange(12, dtype=np.int32)[::3]
    assert np.array_equal(types_scale(1.5, strided, target=target), 1.5 * strided)


@gf.ufunc(signatures=["float32(float32, float64)"], replace=True)
def types_scale_by_double(x, a):
    return x * a  # computed in float64, rounded to float32 on store


@pytest.mark.parametrize("target", TARGETS)
def test_a_float64_scalar_with_float32_arrays_is_read_as_float64(target):
    """The GPU stages a call's array inputs, several elements per thread at this size (a fused
    function's Python floats are such float64 scalars): the scalar keeps its own loop type."""
    n = 1000 if SIMULATED else 3 * 2**18 + 7
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    a = 1 / 3
    got = types_scale_by_double(x, a, target=target)
    expected = (x.astype(np.float64) * a).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    assert np.array_equal(types_scale_by_double(x[::-3], a, target=target), expected[::-3])


def test_arrays_of_one_loop_type_are_staged_whatever_the_scalars_types():
    """Which loop type the GPU's elementwise kernel stages its array inputs in, and so how many
    elements a thread takes (16 bytes of each array input; several loop types: one)."""
    from numba.core import types

    from gpufuncs.targets.cuda.compile import elements_per_thread, staged_dtype

    spec = types_scale_by_double.spec
    loop = spec.loops[0]
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    pointer = types.CPointer
    assert staged_dtype(loop, (pointer(types.float32), types.float64)) == f32
    assert staged_dtype(types_mixed_add.spec.loops[0], (pointer(types.float64), types.float32)) == f64
    assert staged_dtype(types_mixed_add.spec.loops[0],
                        (pointer(types.float64), pointer(types.float32))) is None
    assert [elements_per_thread(spec, staged, 10**8, 132) for staged in (f32, f64, None)] == [4, 2, 1]
    assert elements_per_thread(spec, f32, 1000, 132) == 1


@gf.ufunc(signatures=["float64(float64, float32)", "float64(float64, float64)"], replace=True)
def types_mixed_add(a, b):
    return a + b


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_float_never_takes_a_float16_twins_place(target):
    """A float32 loop's float16 twin serves float16 inputs in its float16 places: a float16
    array in the float64 place of ``df->d`` with a Python float in the float32 place takes
    ``df->d`` itself, the float read as float32 (its twin ``de->d`` rounded 1e-7 to float16's
    1.19e-7, a lazy kernel's learned loops included)."""
    half = np.array([0.0, 1.0], np.float16)
    assert types_mixed_add.resolve_loop([half.dtype, float]).types == "df->d"
    got = types_mixed_add(half, 1e-7, target=target)
    expected = half.astype(np.float64) + np.float64(np.float32(1e-7))
    assert got.dtype == np.float64 and np.array_equal(got, expected), (got, expected)
    # a float16 array in the float32 place does take the twin, read exactly
    assert types_mixed_add.resolve_loop([np.dtype(np.float64), half.dtype]).types == "de->d"
    assert np.array_equal(types_mixed_add(np.array([1.0, 2.0]), half, target=target), [1.0, 3.0])


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_float_cast_unsafely_into_an_integer_loop_as_numpy(target):
    """``dtype=int64, casting="unsafe"`` with a float beyond int64 or a NaN: NumPy's cast (C's
    conversion, with its warning), where the integer type's constructor would refuse it."""
    for x in (np.zeros(3, bool), np.arange(3), np.arange(6)[::2]):
        for value in (1e30, float("nan"), -3.7):
            with np.errstate(invalid="ignore"):
                want = np.add(x, value, dtype=np.int64, casting="unsafe")
                got = types_add(x, value, dtype=np.int64, casting="unsafe", target=target)
            assert got.dtype == np.int64 and got.tolist() == want.tolist()


@gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative, replace=True)
def types_float_negative(a):
    return -a


@pytest.mark.cuda
@pytest.mark.skipif(SIMULATED, reason="the GPU's arithmetic: the simulator computes with NumPy")
def test_nan_bits_on_the_gpu_are_the_gpus_as_cupys():
    """NaN results are NaN wherever NumPy's are; their sign and payload are the GPU's, as CuPy
    gives them (docs/semantics.md): float32 arithmetic makes ``0x7fffffff``, float64 negation
    keeps the sign, float16 loads make ``0x7fff``."""
    cp = pytest.importorskip("cupy")
    for dtype, bits in ((np.float16, np.uint16), (np.float32, np.uint32), (np.float64, np.uint64)):
        x = np.array([np.nan, -np.nan, 1.5, -np.inf], dtype)
        got = types_float_negative(x, target="cuda")
        assert np.array_equal(np.isnan(got), np.isnan(np.negative(x)))
        assert np.array_equal(got[2:], np.negative(x[2:]))
        assert got.view(bits).tolist() == cp.negative(cp.asarray(x)).get().view(bits).tolist()


@gf.ufunc(signatures=["float64(bool, float64)"], replace=True)
def types_gate(on, x):
    return x if on else -x


@pytest.mark.parametrize("target", TARGETS)
def test_a_bool_input_given_as_a_scalar(target):
    """A bool loop input from a Python or NumPy bool (passed by value), beside arrays."""
    x = np.array([1.5, -2.0, 0.0])
    assert types_gate(True, 2.5, target=target) == 2.5
    assert types_gate(np.False_, 2.5, target=target) == -2.5
    assert types_gate(False, x, target=target).tolist() == (-x).tolist()
    on = np.array([True, False, True])
    assert types_gate(on, 3.0, target=target).tolist() == [3.0, -3.0, 3.0]


def test_types_lists_every_loop_in_selection_order():
    assert types_add.types[:8] == ["bb->b", "BB->B", "hh->h", "HH->H", "ii->i", "II->I", "ll->l", "LL->L"]
    assert types_add.types[8:] == ["ee->e", "ff->f", "dd->d"]
    assert types_less.types == ["ll->?", "dd->?"]



@pytest.mark.parametrize("target", TARGETS)
def test_a_gufunc_with_two_outputs_of_different_types(target, restore_registry):
    """What a divmod-like kernel is written as: np.divmod on int64, and a frexp-like pair."""
    @gf.gufunc(signatures=["void(int64, int64, int64[:], int64[:])"], layout="(),()->(),()",
               reference=np.divmod, name="types_divmod")
    def types_divmod(a, b, quotient, remainder):
        quotient[0] = a // b
        remainder[0] = a - (a // b) * b

    a, b = np.array([7, -7, 7, -7, 5]), np.array([2, 2, -2, -2, 3])
    q, r = types_divmod(a, b, target=target)
    want_q, want_r = np.divmod(a, b)
    assert q.dtype == r.dtype == np.int64
    assert np.array_equal(np.asarray(q), want_q) and np.array_equal(np.asarray(r), want_r)

    @gf.gufunc(signatures=["void(float64, float64[:], int32[:])"], layout="()->(),()",
               name="types_split")
    def types_split(x, whole, sign):
        whole[0] = float(int(x))
        sign[0] = 1 if x >= 0 else -1

    w, s = types_split(np.array([2.5, -1.5]), target=target)
    assert w.dtype == np.float64 and s.dtype == np.int32
    assert np.asarray(w).tolist() == [2.0, -1.0] and np.asarray(s).tolist() == [1, -1]
