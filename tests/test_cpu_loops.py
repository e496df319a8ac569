"""The cpu target's flat loops: they vectorize, agree with the Numba ufuncs, and keep accuracy.

Contiguous calls run a plain ``@njit`` loop per kernel with the kernel inlined and its ``math``
replaced by ``targets/cpu/vecmath.py``; these tests look at the compiled loops themselves (the
LLVM IR has vector instructions) and at the values (exp within 1 ULP of the correctly rounded
result, mpmath at 100 digits).
"""

from __future__ import annotations

import math
import re

import mpmath
import numba
import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.targets.cpu import _rows_plan, loops, vecmath

DTYPES = (np.float32, np.float64)


def _vector_ir(kernel: gf.Kernel, dtype: type, *args: object) -> str:
    """The optimized LLVM IR of the flat loop that ``kernel(*args)`` runs on cpu, compiled
    afresh (a loop loaded from the disk cache carries no IR)."""
    compiled = kernel.compiled("cpu")
    declared = kernel.spec.loop_for(np.dtype(dtype))
    compiled.inline(declared)  # the scalar function, marked for inlining
    loop = loops.ufunc_loops(compiled.scalar(), tuple(d.type for d in declared.inputs), None)[0]
    loop(np.empty(np.shape(args[0]), dtype), *args)
    return loop.inspect_llvm(loop.signatures[0])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", ["exp", "gaussian", "clamp"])
def test_flat_loops_vectorize(name, dtype):
    x = np.linspace(-3, 3, 1000, dtype=dtype)
    scalars = {"exp": (), "gaussian": (0.5, 1.5), "clamp": (-0.5, 0.5)}[name]
    ir = _vector_ir(gf.registry[name], dtype, x, *scalars)
    lanes = "float" if dtype == np.float32 else "double"
    assert re.search(rf"<\d+ x {lanes}>", ir), f"{name} {dtype.__name__}: no vector instructions"
    assert not re.search(r"call \w+ @(exp|expf|llvm\.exp\.f)", ir), "a scalar libm exp is left"


def _has_avx512() -> bool:
    return vecmath.has_avx512(numba.njit(lambda: None).targetctx.codegen())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_flat_loops_ask_for_512_bit_vectors(dtype):
    """LLVM's tuning for AVX-512 Xeons keeps loops to 256 bits unless the function asks for
    512 (``loops.wide_vectors``): with AVX-512 the exp loop holds 512-bit vectors, with the
    same values as Numba's own ufunc (NumPy's loop over the same scalar code)."""
    x = np.linspace(-30, 30, 1000, dtype=dtype)
    ir = _vector_ir(gf.exp, dtype, x)
    lanes = "float" if dtype == np.float32 else "double"
    widest = max(int(n) for n in re.findall(rf"<(\d+) x {lanes}>", ir))
    if _has_avx512():
        assert widest * np.dtype(dtype).itemsize * 8 == 512, widest
    got = gf.exp(x, target="cpu")
    numba_ufunc = gf.get("exp", target="cpu")
    np.testing.assert_array_equal(got, numba_ufunc(x))


def test_gufunc_loops_ask_for_512_bit_vectors(restore_registry):
    """A generalized kernel's loop over its rows asks for 512-bit vectors as the flat loops do:
    under the tuning LLVM gives Intel's AVX-512 CPUs (``NUMBA_CPU_NAME=skylake-avx512`` on the
    2-core machine) ``hermite_norm`` of 10^5 samples and 32 orders took 3.3 ms without it and
    1.7 ms with it, as with the machine's own tuning."""
    @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", name="loops_row_exp",
               reference=np.exp, replace=True)
    def row_exp(x, out):
        for i in range(x.shape[0]):
            out[i] = math.exp(x[i])

    compiled = row_exp.compiled("cpu")
    declared = row_exp.spec.loops[0]
    compiled.inline(declared)
    serial = loops.gufunc_loops(compiled.scalar(), (np.float64,), None)[0]  # not the disk cache's
    x = np.linspace(-3, 3, 64).reshape(4, 16)
    out = np.empty_like(x)
    serial((out,), x)
    np.testing.assert_allclose(out, np.exp(x), rtol=4 * np.finfo(np.float64).eps)
    assert '"prefer-vector-width"="512"' in serial.inspect_llvm(serial.signatures[0])


def test_small_calls_take_the_loop_with_llvms_own_vector_width(restore_registry):
    """Below ``WIDE_MIN`` elements the 512-bit loop would run mostly its one-at-a-time
    remainder: those calls take a loop compiled without the attribute, larger ones the wide one,
    both with the same values."""
    kernel = gf.ufunc(signatures=gf.float_signatures(1), reference=np.exp, name="loops_exp_sizes",
                      replace=True)(gf.exp.spec.pyfunc)
    large = np.linspace(-30, 30, 4 * loops.WIDE_MIN)
    compiled = kernel.compiled("cpu")
    small = kernel(large[:10], target="cpu")
    f64 = "float64(float64)"
    assert set(compiled._loops) == {(f64, False)}
    np.testing.assert_array_equal(kernel(large, target="cpu")[:10], small)
    assert set(compiled._loops) == {(f64, False), (f64, True)}
    narrow = loops.ufunc_loops(compiled.scalar(), (np.float64,), None, wide=False)[0]  # not the disk cache's
    narrow(np.empty(10), large[:10])

    @numba.njit
    def plain(x, out):  # a loop as any Numba user writes it: LLVM's own choice of width
        for i in range(x.size):
            out[i] = vecmath.exp(x[i])

    plain(large[:10], np.empty(10))
    widths = [max(int(n) for n in re.findall(r"<(\d+) x double>", f.inspect_llvm(f.signatures[0])))
              for f in (narrow, plain)]
    assert widths[0] == widths[1], widths


def test_a_user_kernel_calling_two_math_functions_vectorizes(restore_registry):
    """The kernel is inlined into the loop however large its math makes it."""
    @gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: np.logaddexp(0.0, x),
              name="loops_softplus", replace=True)
    def softplus(x):
        return max(x, gf.as_type(0, x)) + math.log1p(math.exp(-abs(x)))

    x = np.linspace(-30, 30, 4001)
    ir = _vector_ir(softplus, np.float64, x)
    assert re.search(r"<\d+ x double>", ir)
    np.testing.assert_allclose(softplus(x), np.logaddexp(0.0, x), rtol=4e-16)


def test_a_user_kernel_importing_math_inside_a_function_vectorizes(restore_registry):
    """``math`` bound in the kernel's closure (a kernel made by a function that imports it)
    gets the vector math as a global ``math`` does: no libm call left in the loop."""
    def make_kernel():
        import math as local_math

        @gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: np.log1p(np.exp(x)),
                  name="loops_local_softplus", replace=True)
        def local_softplus(x):
            return local_math.log1p(local_math.exp(x))

        return local_softplus

    kernel = make_kernel()
    x = np.linspace(-30, 30, 4001)
    ir = _vector_ir(kernel, np.float64, x)
    assert re.search(r"<\d+ x double>", ir)
    assert not re.search(r"call [^@\n]*@(llvm\.)?(exp|log1p)(f|\.|\()", ir)
    np.testing.assert_allclose(kernel(x, target="cpu"), np.log1p(np.exp(x)), rtol=4e-16)


@numba.njit
def _softplus_helper(x):
    """An ``@njit`` helper calling ``math``, as a kernel author factors code out."""
    return math.log1p(math.exp(-abs(x)))


def test_a_user_kernel_calling_an_njit_helper_vectorizes(restore_registry):
    """The helper's ``math`` gets the vector math too (a copy of it, inlined): no libm call."""
    @gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: np.logaddexp(0.0, x),
              name="loops_helper_softplus", replace=True)
    def softplus(x):
        return max(x, gf.as_type(0, x)) + _softplus_helper(x)

    x = np.linspace(-30, 30, 4001)
    ir = _vector_ir(softplus, np.float64, x)
    assert re.search(r"<\d+ x double>", ir)
    assert not re.search(r"call [^@\n]*@(llvm\.)?(exp|log1p)(f|\.|\()", ir)
    np.testing.assert_allclose(softplus(x, target="cpu"), np.logaddexp(0.0, x), rtol=4e-16)
    np.testing.assert_allclose(softplus(x, target="parallel"), np.logaddexp(0.0, x), rtol=4e-16)


def _exact_exp(x: np.ndarray) -> list[mpmath.mpf]:
    with mpmath.workdps(60):
        return [mpmath.exp(mpmath.mpf(float(v))) for v in x]


def _ulp_error(result: np.ndarray, exact: list[mpmath.mpf]) -> np.ndarray:
    """|result - exact| in units in the last place of ``result``'s dtype at the exact value
    (measured in mpmath: no double rounding through float64 for float32 results)."""
    info = np.finfo(result.dtype)
    errors = []
    with mpmath.workdps(60):
        for r, e in zip(result.astype(np.float64), exact):
            exponent = max(int(mpmath.floor(mpmath.log(e, 2))), info.minexp)
            ulp = mpmath.ldexp(1, exponent - info.nmant)
            errors.append(float(abs(mpmath.mpf(float(r)) - e) / ulp))
    return np.array(errors)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_exp_within_one_ulp_of_the_correctly_rounded_value(dtype, target):
    info = np.finfo(dtype)
    high, low = math.log(float(info.max)), math.log(float(info.smallest_subnormal))
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(low, high, 3000), rng.normal(0, 2, 1000),
                        np.linspace(high - 1, high, 200), np.linspace(low, low + 1, 200)]).astype(dtype)
    result = gf.exp(x, target=target)
    exact = _exact_exp(x)
    overflows = np.array([e > float(info.max) for e in exact])
    assert np.isposinf(result[overflows]).all()
    assert _ulp_error(result[~overflows], [e for e, o in zip(exact, overflows) if not o]).max() <= 1


def test_the_kernels_own_math_module_is_untouched():
    """The cpu loops compile a copy of the kernel: the registered function keeps ``math``."""
    assert gf.exp.spec.pyfunc.__globals__["math"] is math


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_a_gufunc_input_inside_its_out_is_read_before_writing(target):
    """``hermite_norm``'s samples lie in the memory of its ``out=`` (every row of which it
    writes in full), also with ``where=``: the result is that of the same call on a copy."""
    rng = np.random.default_rng(7)
    for masks in (False, True):
        out = rng.normal(size=(50_001, 6))
        x = out.reshape(-1)[5:50_006]  # contiguous, overlapping the first rows of out
        where = rng.random(50_001) > 0.5 if masks else np.ones(50_001, bool)
        expected = np.where(where[:, None], gf.hermite_norm(x.copy(), 6, target=target), out)
        gf.hermite_norm(x, 6, out=out, where=where if masks else True, target=target)
        np.testing.assert_array_equal(out, expected)


# -- broadcast and strided calls: the rows loops ---------------------------------------------------
#: Shapes of (x, mu, sigma) that broadcast, each array C-contiguous over its own shape: an outer
#: product, a row and a column of parameters, three dimensions, a loop of one dimension.
BROADCASTS = [
    ((300, 1), (1, 200), ()),
    ((300, 200), (200,), (300, 1)),
    ((4, 30, 50), (30, 1), (1, 1, 50)),
    ((6, 1, 5), (1, 7, 1), (5,)),
    ((1,), (1000,), (1, 1)),
]


def _broadcast_args(shapes, rng):
    x, mu, sigma = (rng.normal(size=s) for s in shapes)
    return x, mu, np.abs(sigma) + 0.25


def _strided_args(rng):
    """Views that are not contiguous: stepped, reversed, a block of columns, a transpose; each
    of more than :data:`loops.MIN_CHUNK` elements (``parallel`` runs them on its threads)."""
    base = rng.normal(size=(300, 400))
    flat = base.reshape(-1)
    return {
        "stepped": (flat[::3], 0.5, 1.5),
        "reversed": (flat[::-1], flat, 2.0),
        "columns": (base[:, 10:110], base[0, :100], np.abs(base[:, :1]) + 0.25),
        "transposed against a column": (base.T, base[:, 0], 1.5),
        "stepped columns": (base[::2, ::3], base[1, ::3], 0.75),
        "F order": (np.asfortranarray(base), 0.5, np.abs(np.asfortranarray(base)) + 0.25),
    }


def _runs_rows(kernel, *args, **kwargs):
    """Whether the call takes the rows loops (its plan, as the target decides from it)."""
    return _rows_plan(kernel.spec.executed, kernel.resolve(*args, **kwargs).plan) is not None


#: (target, case): every case on ``cpu``, those in ``threaded`` on ``parallel``, whose loops take
#: 2 to 3 s each to compile on 2 cores (one per number of dimensions).
def _on_targets(cases, threaded):
    return [("cpu", c) for c in cases] + [("parallel", c) for c in threaded]


@pytest.mark.parametrize(("target", "shapes"), _on_targets(BROADCASTS, BROADCASTS[:2]), ids=str)
def test_broadcast_calls_run_the_rows_loops_with_the_numba_ufuncs_values(target, shapes):
    """Arrays that broadcast against each other run the rows loops (not NumPy's iterator over
    Numba's ufunc, which does not vectorize them), with the values of Numba's own ufunc on the
    same arguments, bit for bit, and of NumPy's expression within rounding."""
    rng = np.random.default_rng(3)
    x, mu, sigma = _broadcast_args(shapes, rng)
    assert _runs_rows(gf.gaussian, x, mu, sigma, target=target)
    expected = gf.get("gaussian", target="cpu")(x, mu, sigma)
    got = gf.gaussian(x, mu, sigma, target=target)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(got, np.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi)),
                               rtol=1e-14)
    out = np.full(expected.shape, np.nan)
    assert gf.gaussian(x, mu, sigma, out=out, target=target) is out
    np.testing.assert_array_equal(out, expected)


STRIDED = list(_strided_args(np.random.default_rng(0)))


@pytest.mark.parametrize(("target", "case"), _on_targets(STRIDED, ["stepped", "columns"]), ids=str)
def test_strided_calls_run_the_rows_loops_with_the_numba_ufuncs_values(target, case):
    """Views that are not contiguous run the rows loops (a strided row copied into scratch a
    block at a time, rows longer than a block among them), with Numba's own ufunc's values and
    layout; into a strided ``out=`` (stored from scratch) every element of ``out`` is written
    and no other byte of its memory changes."""
    x, mu, sigma = _strided_args(np.random.default_rng(5))[case]
    assert _runs_rows(gf.gaussian, x, mu, sigma, target=target)
    numba_ufunc = gf.get("gaussian", target="cpu")
    expected = numba_ufunc(x, mu, sigma)
    got = gf.gaussian(x, mu, sigma, target=target)
    np.testing.assert_array_equal(got, expected)
    assert got.flags.c_contiguous == expected.flags.c_contiguous
    assert got.flags.f_contiguous == expected.flags.f_contiguous
    memory = np.random.default_rng(6).normal(size=(2 * expected.size + 7,))
    before = memory.copy()
    out = memory[3:3 + 2 * expected.size:2].reshape(expected.shape)  # every other element
    assert _runs_rows(gf.gaussian, x, mu, sigma, out=out, target=target)
    gf.gaussian(x, mu, sigma, out=out, target=target)
    np.testing.assert_array_equal(out, expected)
    written = np.zeros(memory.size, bool)
    written[3:3 + 2 * expected.size:2] = True
    np.testing.assert_array_equal(memory[~written], before[~written])


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_a_broadcast_input_inside_its_out_is_read_before_writing(target):
    """x, a column in the memory that ``out=`` covers (and beyond it): the result is that of
    the same call on a copy of x, and no byte outside ``out`` changes."""
    rng = np.random.default_rng(4)
    memory = rng.normal(size=70_000)
    before = memory.copy()
    out = memory[100:60_100].reshape(300, 200)
    x, mu = memory[:300].reshape(300, 1), rng.normal(size=200)
    assert _runs_rows(gf.gaussian, x, mu, 0.5, out=out, target=target)
    expected = gf.gaussian(x.copy(), mu, 0.5, target=target)
    gf.gaussian(x, mu, 0.5, out=out, target=target)
    np.testing.assert_array_equal(out, expected)
    outside = np.ones(memory.size, bool)
    outside[100:60_100] = False
    np.testing.assert_array_equal(memory[outside], before[outside])


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_rows_loops_vectorize(target):
    """A row's pieces are contiguous, whatever the layout (copied into scratch where it is
    not): the loop holds vector instructions and no scalar libm exp (compiled afresh: cached
    code has no IR), and one loop serves a broadcast and a strided call."""
    compiled = gf.gaussian.compiled("cpu")
    declared = gf.gaussian.spec.loop_for(np.dtype(np.float64))
    compiled.inline(declared)
    casts = tuple(d.type for d in declared.inputs)
    serial, parallel = loops.rows_loops(compiled.scalar(), casts, None)
    loop = serial if target == "cpu" else parallel
    numba_ufunc = gf.get("gaussian", target="cpu")
    x, mu, out = np.linspace(-3, 3, 300).reshape(300, 1), np.linspace(-1, 1, 200)[None], np.empty((300, 200))
    # bytes per row and along a row: x, mu, 0.5, out
    loop(out, np.array([300, 200]), np.array([[8, 0, 0, 1600]]), np.array([0, 8, 0, 8]), x, mu, 0.5)
    np.testing.assert_array_equal(out, numba_ufunc(x, mu, 0.5))
    wide = np.linspace(-3, 3, 2 * 300 * 200).reshape(300, 400)
    loop(out, np.array([300, 200]), np.array([[3200, 0, 0, 1600]]), np.array([16, 8, 0, 8]), wide, mu, 0.5)
    np.testing.assert_array_equal(out, numba_ufunc(wide[:, ::2], mu, 0.5))
    assert len(loop.signatures) == 1
    ir = loop.inspect_llvm(loop.signatures[0])
    assert re.search(r"<\d+ x double>", ir), "no vector instructions"
    assert not re.search(r"call \w+ @(exp|llvm\.exp\.f)", ir), "a scalar libm exp is left"


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_broadcast_calls_report_floating_point_errors_as_numpy(restore_registry, target):
    """The rows loops' status goes through NumPy's error handling as the flat loops' does:
    overflow where NumPy's expression overflows, and nothing for a NaN argument (which IEEE
    arithmetic passes through silently, and vector compares would flag)."""
    @gf.ufunc(signatures=["float64(float64, float64)"], reference=lambda a, b: np.exp(a * b),
              name="exp_product")
    def exp_product(a, b):
        return math.exp(a * b)

    a, b = np.linspace(-30, 30, 401).reshape(401, 1), np.linspace(-30, 30, 50)  # (threaded on parallel)
    assert _runs_rows(exp_product, a, b, target=target)
    with pytest.raises(FloatingPointError, match="overflow"), np.errstate(over="raise"):
        exp_product(a, b, target=target)
    a[7, 0] = np.nan
    small = b / 100
    with np.errstate(all="raise"):
        got = exp_product(a, small, target=target)
    with np.errstate(all="raise"):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(np.exp(a * small)))


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_a_kernel_raising_on_a_broadcast_call_raises_its_own_exception(restore_registry, target):
    """A kernel that can raise runs its rows serially on ``parallel`` (Numba's threads lose an
    exception): the caller gets the kernel's own exception, as on ``cpu``."""
    @gf.ufunc(signatures=["float64(float64, float64)"], reference=lambda a, b: np.sqrt(a * b),
              name="checked_root")
    def checked_root(a, b):
        if a * b < 0:
            raise ValueError("negative product")
        return math.sqrt(a * b)

    a, b = np.linspace(0, 1, 200).reshape(200, 1), np.linspace(0, 1, 300)
    np.testing.assert_array_equal(checked_root(a, b, target=target), np.sqrt(a * b))
    b[150] = -1.0
    assert _runs_rows(checked_root, a, b, target=target)
    with pytest.raises(ValueError, match="negative product"):
        checked_root(a, b, target=target)


# -- generalized kernels: an input that is one core for every row -----------------------------------
def _gufuncs():
    """``(n),(n)->()`` and ``(m,n),(n)->(m)`` kernels: a dot product and a matrix-vector product."""
    @gf.gufunc(signatures=["void(float32[:], float32[:], float32[:])",
                           "void(float64[:], float64[:], float64[:])"],
               layout="(n),(n)->()", reference=lambda a, b: np.einsum("...i,...i->...", a, b),
               name="whole_dot")
    def whole_dot(a, b, out):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        out[0] = s

    @gf.gufunc(signatures=["void(float64[:, :], float64[:], float64[:])"], layout="(m,n),(n)->(m)",
               reference=lambda a, x: np.einsum("...ij,...j->...i", a, x), name="whole_matvec")
    def whole_matvec(a, x, out):
        for i in range(a.shape[0]):
            s = 0.0
            for j in range(a.shape[1]):
                s += a[i, j] * x[j]
            out[i] = s

    return whole_dot, whole_matvec


def _takes_flat_loops(kernel, *args, **kwargs):
    from gpufuncs.targets.cpu import _flat_order

    return _flat_order(kernel.spec.executed, kernel.resolve(*args, **kwargs).plan) is not None


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_an_input_of_one_core_for_every_row_runs_the_flat_loops(restore_registry, target):
    """A generalized kernel's input without loop dimensions (or with ones only) is passed whole
    to every row of the flat loops, on ``parallel`` on the threads, where it went through
    Numba's gufunc object (serially there): the values of the same call on the input repeated
    for every row, bit for bit, with a new output, with ``out=`` and with ``where=``."""
    whole_dot, whole_matvec = _gufuncs()
    rng = np.random.default_rng(11)
    rows, vector = rng.normal(size=(40_000, 16)), rng.normal(size=16)
    matrices = rng.normal(size=(5_000, 3, 4))
    cases = [
        (whole_dot, (rows, vector)), (whole_dot, (vector, rows)), (whole_dot, (rows, vector[None, :])),
        (whole_dot, (rows.astype(np.float32), vector.astype(np.float32))),
        (whole_matvec, (matrices, vector[:4])), (whole_matvec, (matrices[0], rows[:, :4].copy())),
    ]
    for kernel, args in cases:
        assert _takes_flat_loops(kernel, *args, target=target), kernel
        cores = [len(c) for c in kernel.spec.layout.inputs]
        shape = np.broadcast_shapes(*(a.shape[: a.ndim - c] for a, c in zip(args, cores)))
        repeated = [np.ascontiguousarray(np.broadcast_to(a, shape + a.shape[a.ndim - c:]))
                    for a, c in zip(args, cores)]
        expected = kernel(*repeated, target=target)
        np.testing.assert_array_equal(kernel(*args, target=target), expected)
        # NumPy's sums in float64, against the loop's in its dtype: within n rounding errors of
        # the sum of the products' magnitudes (n: the summed length)
        wide = [r.astype(np.float64) for r in repeated]
        bound = args[-1].shape[-1] * np.finfo(expected.dtype).eps * kernel.spec.reference(*map(np.abs, wide))
        assert np.all(np.abs(expected - kernel.spec.reference(*wide)) <= bound)
        out = np.full_like(expected, np.nan)
        assert kernel(*args, out=out, target=target) is out
        np.testing.assert_array_equal(out, expected)
        where = rng.random(shape) > 0.5
        out = np.full_like(expected, -7.0)
        kernel(*args, out=out, where=where, target=target)
        chosen = where.reshape(where.shape + (1,) * (out.ndim - where.ndim))
        np.testing.assert_array_equal(out, np.where(chosen, expected, -7.0))


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_an_input_of_one_core_inside_its_out_is_read_before_writing(restore_registry, target):
    """The core passed whole lies in the memory of ``out=``: the result is that of the same
    call on a copy of it, and no byte outside ``out`` changes."""
    whole_dot, _ = _gufuncs()
    rng = np.random.default_rng(12)
    rows = rng.normal(size=(30_000, 16))
    buffer = rng.normal(size=30_016)
    out, vector = buffer[16:], buffer[10:26]  # the vector overlaps the first six outputs
    before = buffer.copy()
    expected = whole_dot(rows, vector.copy(), target=target)
    whole_dot(rows, vector, out=out, target=target)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(buffer[:16], before[:16])


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_an_input_of_one_core_reports_floating_point_errors_as_the_repeated_call(restore_registry, target):
    """Floating-point errors of a call with a core passed whole are those of the same call on
    the input repeated for every row, also where the check runs the loop again without the
    rows that hold an infinity (a loop compiled for rows, on copies)."""
    @gf.gufunc(signatures=["void(float64[:], float64[:], float64[:])"], layout="(n),(n)->()",
               reference=lambda a, b: np.exp(np.einsum("...i,...i->...", a, b)), name="whole_exp_dot")
    def whole_exp_dot(a, b, out):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        out[0] = math.exp(s)

    rng = np.random.default_rng(13)
    rows, vector = rng.normal(size=(20_000, 8)), rng.normal(size=8)
    repeated = np.ascontiguousarray(np.broadcast_to(vector, rows.shape))
    for overflow in (False, True):
        bad = rows.copy()
        bad[7, 2] = np.inf  # (an infinite argument: its row's overflow is not reported)
        if overflow:
            bad[9] = 1e3 * np.sign(vector)  # a finite row whose exp overflows
        for given in (vector, repeated):
            with np.errstate(over="raise"):
                if overflow:
                    with pytest.raises(FloatingPointError, match="overflow"):
                        whole_exp_dot(bad, given, target=target)
                else:
                    whole_exp_dot(bad, given, target=target)
