"""Tests of ``gpufuncs.targets.cpu.vecmath``: accuracy, special values, vectorization, isolation.

Accuracy is measured against results correctly rounded from mpmath at 256 bits. The sample
sizes keep the file fast; ``VECMATH_SAMPLES=1048576 pytest tests/test_vecmath.py -k accuracy``
repeats the measurement behind the module docstring's table.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import warnings
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from gpufuncs.targets.cpu import vecmath as vm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_vecmath import make_loop

UNARY = ("exp", "exp2", "expm1", "log", "log1p", "sqrt")
DTYPES = (np.float32, np.float64)
SAMPLES = int(os.environ.get("VECMATH_SAMPLES", "16000"))
MP = {
    "exp": mpmath.exp,
    "exp2": lambda x: mpmath.power(2, x),
    "expm1": mpmath.expm1,
    "log": mpmath.log,
    "log1p": mpmath.log1p,
    "sqrt": mpmath.sqrt,
    "pow": mpmath.power,
}
NUMPY = {"exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
         "sqrt": np.sqrt, "pow": np.power}


# --- compiled loops --------------------------------------------------------------------------


@functools.cache
def loop(name: str):
    """An ``@njit`` loop ``out[i] = vm.<name>(x[i], ...)`` over contiguous arrays (the one
    ``benchmarks/bench_vecmath.py`` times)."""
    return make_loop(getattr(vm, name), 2 if name == "pow" else 1)


def run(name: str, *args: np.ndarray) -> np.ndarray:
    args = tuple(np.ascontiguousarray(a) for a in args)
    out = np.empty_like(args[0])
    loop(name)(*args, out)
    return out


# --- correctly rounded references and ULP distances ------------------------------------------


def correctly_rounded(value: mpmath.mpf, dtype: type) -> float:
    """``value`` rounded to nearest-even in ``dtype``, subnormals and overflow included."""
    info = np.finfo(dtype)
    if not mpmath.isfinite(value):
        return float(value)
    if abs(value) < info.tiny:  # subnormal spacing 2**(minexp - nmant)
        step = mpmath.ldexp(1, int(info.minexp) - int(info.nmant))
        return float(mpmath.nint(value / step) * step)
    with mpmath.workprec(int(info.nmant) + 1):
        rounded = +value
    if abs(rounded) >= mpmath.ldexp(1, int(info.maxexp)):
        return math.copysign(math.inf, value)
    return float(rounded)


def reference(name: str, dtype: type, *args: np.ndarray) -> np.ndarray:
    """The correctly rounded ``name(*args)`` element by element (finite real results only)."""
    with mpmath.workprec(256):
        values = [MP[name](*(mpmath.mpf(float(a)) for a in point)) for point in zip(*args)]
        return np.array([correctly_rounded(v, dtype) for v in values], dtype=dtype)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between same-dtype arrays (0 where both are NaN)."""
    itype = np.int32 if a.dtype == np.float32 else np.int64
    lowest = np.iinfo(itype).min

    def ordered(x: np.ndarray) -> np.ndarray:  # monotonic in the float's value, -0 == +0
        bits = x.view(itype).astype(np.int64)
        return np.where(bits < 0, lowest - bits, bits)

    ka, kb = ordered(a), ordered(b)
    same_side = (ka >= 0) == (kb >= 0)
    dist = np.where(same_side, np.abs(ka - kb), np.iinfo(np.int64).max)
    both_nan = np.isnan(a) & np.isnan(b)
    one_nan = np.isnan(a) ^ np.isnan(b)
    return np.where(both_nan, 0, np.where(one_nan, np.iinfo(np.int64).max, dist))


def max_ulps(name: str, dtype: type, *args: np.ndarray) -> tuple[int, tuple]:
    """Largest error of the compiled ``name`` over the points, and the worst point."""
    args = tuple(np.asarray(a, dtype=dtype) for a in args)
    if not args[0].size:
        return 0, ()
    dist = ulps(run(name, *args), reference(name, dtype, *args))
    worst = int(np.argmax(dist))
    return int(dist[worst]), tuple(float(a[worst]) for a in args)


# --- samplers: every binade of each domain, plus its edges -----------------------------------


def between(lo: float, hi: float, dtype: type, n: int, rng: np.random.Generator) -> np.ndarray:
    """Floats with ``0 <= lo < x < hi`` spread evenly over bit patterns: every binade alike."""
    itype = np.int32 if dtype == np.float32 else np.int64
    bits = np.array([lo, hi], dtype=dtype).view(itype)
    return rng.integers(bits[0], bits[1], n, dtype=itype).view(dtype)


def signed(lo: float, hi: float, dtype: type, n: int, rng: np.random.Generator) -> np.ndarray:
    """Like :func:`between` with random signs."""
    return between(lo, hi, dtype, n, rng) * rng.choice(np.array([-1, 1], dtype=dtype), n)


def sample(name: str, dtype: type, n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Arguments of ``name`` in its domain, a quarter of them on the overflow/underflow edges."""
    rng = np.random.default_rng([seed, DTYPES.index(dtype), sorted(MP).index(name)])
    f32 = dtype == np.float32
    tiny = float(np.finfo(dtype).smallest_subnormal)
    big = float(np.finfo(dtype).max)
    k = n // 4
    parts: list[np.ndarray]
    if name in ("exp", "exp2", "expm1"):
        scale = 1.0 if name != "exp2" else 1 / math.log(2)
        lo, hi = (-103.98 * scale, 88.73 * scale) if f32 else (-745.2 * scale, 709.8 * scale)
        # subnormal results (expm1: results near -1) and the overflow threshold
        low_edge = (lo, (-87.3 if f32 else -708.0) * scale) if name != "expm1" else (-45.0, -1.0)
        parts = [signed(tiny, hi, dtype, k, rng), rng.uniform(lo, hi, k).astype(dtype),
                 -between(tiny, -lo, dtype, k, rng),
                 rng.uniform(*low_edge, k // 2).astype(dtype),
                 rng.uniform(hi - 0.05, hi + 0.01, k - k // 2).astype(dtype)]
    elif name in ("log", "sqrt"):
        parts = [between(tiny, big, dtype, 3 * k, rng), rng.uniform(0.5, 2.0, k).astype(dtype)]
    elif name == "log1p":
        parts = [between(tiny, big, dtype, 2 * k, rng), -between(tiny, 1.0, dtype, k, rng),
                 rng.uniform(-0.3, 0.42, k).astype(dtype)]
    else:  # pow
        eps = float(np.finfo(dtype).eps)
        x = np.concatenate([
            between(tiny, big, dtype, 2 * k, rng),  # every binade
            (1 + signed(eps, 1e-2, np.float64, k // 2, rng)).astype(dtype),  # huge y, see below
            between(tiny, big, dtype, k - k // 2, rng),
        ])
        # results across their whole range, subnormal to the overflow threshold: y * log(x)
        # is where float64 pow needs its double-double logarithm
        lo, hi = (-103.9, 88.7) if f32 else (-745.1, 709.7)
        with np.errstate(all="ignore"):
            y = (rng.uniform(lo, hi, x.size) / np.log(x.astype(np.float64))).astype(dtype)
        y[-(k - k // 2):] = signed(1e-3, 1e3, dtype, k - k // 2, rng)  # and plain exponents
        negative = -between(0.5, 40.0, dtype, k, rng)  # negative bases, integer exponents
        return (np.concatenate([x, negative]),
                np.concatenate([y, rng.integers(-60, 60, k).astype(dtype)]))
    return (np.concatenate(parts),)


# --- accuracy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", [*UNARY, "pow"])
@pytest.mark.slow
def test_accuracy_within_one_ulp(name, dtype):
    n = SAMPLES if name != "pow" else SAMPLES // 2
    worst, at = max_ulps(name, dtype, *sample(name, dtype, n))
    limit = 0 if name == "sqrt" else 1
    assert worst <= limit, f"{name}({', '.join(map(repr, at))}) is {worst} ULP off"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", [*UNARY, "pow"])
def test_close_to_numpy_on_many_points(name, dtype):
    """NumPy agrees to 2 ULP on 2**16 points; where it differs at all, mpmath has the last word.

    float32 is compared with NumPy's float64 result rounded to float32 (nearly always the
    correctly rounded value); float64 with NumPy's float64 (libm or SIMD, near 1 ULP).
    """
    args = sample(name, dtype, 1 << 16, seed=1)
    with np.errstate(all="ignore"):
        expected = NUMPY[name](*(a.astype(np.float64) for a in args)).astype(dtype)
    dist = ulps(run(name, *args), expected)
    assert dist.max() <= 2
    differ = np.flatnonzero(dist)[:300]
    worst, at = max_ulps(name, dtype, *(a[differ] for a in args))
    assert worst <= 1, f"{name}({', '.join(map(repr, at))}) is {worst} ULP off"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", ["exp", "exp2", "expm1"])
def test_overflow_and_underflow_thresholds(name, dtype):
    """inf from exactly NumPy's threshold; the subnormal results and the last nonzero one."""
    info = np.finfo(dtype)
    scale = 1.0 if name != "exp2" else 1 / math.log(2)
    top = float(np.log(np.float64(info.max))) * scale  # above: overflow
    bottom = (float(info.minexp - info.nmant) - 1) * math.log(2) * scale  # below: 0
    edges = []
    for edge in (top, bottom) if name != "expm1" else (top,):
        centre = dtype(edge)
        edges.append(np.nextafter(centre, np.array([-np.inf, np.inf], dtype=dtype)))
        steps = np.arange(-300, 300, dtype=np.float64)
        spacing = float(np.spacing(centre)) * (1 if dtype == np.float32 else 2**20)
        edges.append((np.float64(centre) + steps * spacing).astype(dtype))
    x = np.concatenate(edges)
    worst, at = max_ulps(name, dtype, x)
    assert worst <= 1, f"{name}{at} is {worst} ULP off"
    with np.errstate(all="ignore"):
        expected_inf = np.isinf(NUMPY[name](x.astype(np.float64)).astype(dtype))
    assert np.array_equal(np.isinf(run(name, x)), expected_inf)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", UNARY)
def test_hypothesis_unary_within_one_ulp(name, dtype, data):
    width = 32 if dtype == np.float32 else 64
    x = data.draw(st.floats(width=width, allow_nan=False, allow_infinity=False))
    domain_ok = {"log": x > 0, "sqrt": x >= 0, "log1p": x > -1}.get(name, True)
    if not domain_ok:
        return
    worst, at = max_ulps(name, dtype, np.array([x]))
    assert worst <= (0 if name == "sqrt" else 1), f"{name}{at} is {worst} ULP off"


@settings(max_examples=80, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_hypothesis_pow_within_one_ulp(dtype, data):
    width = 32 if dtype == np.float32 else 64
    finite = st.floats(width=width, allow_nan=False, allow_infinity=False)
    x = data.draw(finite.filter(lambda v: v != 0))
    y = data.draw(st.one_of(finite, st.integers(-200, 200).map(float)))
    if x < 0 and not float(y).is_integer():
        return  # NaN: checked with the special values
    worst, at = max_ulps("pow", dtype, np.array([x]), np.array([y]))
    assert worst <= 1, f"pow{at} is {worst} ULP off"


# --- special values ----------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1e-30, -1e-30, 1e-310,
           -1e-310, 1e-45, 100.0, -100.0, 1e30, -1e30, math.inf, -math.inf, math.nan,
           np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0), np.nextafter(-1.0, 0.0), 0.25]


def same(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Equal as values and in the sign of zeros, NaN equal to NaN."""
    zeros = (expected == 0) & (actual == 0)
    return np.array_equal(actual, expected, equal_nan=True) and np.array_equal(
        np.signbit(actual[zeros]), np.signbit(expected[zeros])
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", UNARY)
def test_special_values_match_numpy(name, dtype):
    with np.errstate(all="ignore"):
        x = np.array(SPECIAL, dtype=dtype)
        expected = NUMPY[name](x.astype(np.float64)).astype(dtype)
    exact = ~np.isfinite(x) | (x == 0) | ~np.isfinite(expected) | (expected == 0)
    actual = run(name, x)
    assert same(actual[exact], expected[exact]), (x[exact], actual[exact], expected[exact])
    assert ulps(actual, expected).max() <= 2  # each within 1 ULP of the correctly rounded value


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_pow_special_cases_match_numpy(dtype):
    """C99 Annex F: every pair of special operands, bit for bit (sign of zero included)."""
    values = np.array([*SPECIAL, 7.0, -7.0, 2.5, -2.5, 1e20, -1e20], dtype=dtype)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    with np.errstate(all="ignore"):
        expected = np.power(x.astype(np.float64), y.astype(np.float64)).astype(dtype)
    actual = run("pow", x, y)
    exact = ~np.isfinite(expected) | (expected == 0) | (np.abs(expected) == 1)
    bad = ~(np.isnan(actual) & np.isnan(expected)) & (actual != expected) & exact
    assert same(actual[exact], expected[exact]), list(zip(x[bad], y[bad], actual[bad], expected[bad]))
    assert ulps(actual, expected).max() <= 2


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_pow_negative_base_integer_exponent(dtype):
    x = np.array([-2.0, -2.0, -3.0, -0.5, -1.5, -10.0, -1.0, -1.0], dtype=dtype)
    y = np.array([3.0, 4.0, -3.0, 5.0, 20.0, -7.0, 1e30, 3e7 + 1], dtype=dtype)
    actual = run("pow", x, y)
    assert np.array_equal(np.sign(actual), [-1, 1, -1, -1, 1, -1, 1, 1 if dtype == np.float32 else -1])
    assert actual[0] == -8 and actual[1] == 16 and actual[3] == -1 / 32
    assert max_ulps("pow", dtype, x, y)[0] <= 1


# --- typing and the Python-level functions -----------------------------------------------------


def test_float32_stays_float32_and_integers_become_float64():
    @njit
    def both(a, b):
        return vm.exp(a), vm.pow(a, a), vm.exp(b), vm.pow(b, a)

    r32 = both(np.float32(1.5), 2)
    returned = both.nopython_signatures[0].return_type
    assert [str(t) for t in returned] == ["float32", "float32", "float64", "float64"]
    assert r32[2] == pytest.approx(math.exp(2.0), rel=4e-16) and r32[3] == pytest.approx(2.0**1.5, rel=4e-16)


def test_python_level_functions_follow_numpy():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vm.exp(1000.0) == math.inf
        assert math.isnan(vm.log(-1.0)) and vm.log(0.0) == -math.inf
        assert math.isnan(vm.pow(-8.0, 1 / 3)) and vm.pow(0.0, -1.0) == math.inf
        assert vm.log1p(-1.0) == -math.inf and math.isnan(vm.sqrt(-1.0))
    assert vm.exp(2) == np.exp(2.0) and vm.expm1(1e-20) == 1e-20
    assert isinstance(vm.exp(np.float32(1)), np.float32)
    assert isinstance(vm.pow(np.float32(2), np.float32(3)), np.float32)


# --- vectorization -----------------------------------------------------------------------------

LIBM_CALL = re.compile(r"call [^@]*@(llvm\.)?(exp|exp2|expm1|log|log1p|pow|sqrt)f?\b(?!\.v)")
ANY_MATH_CALL = re.compile(r"call [^@]*@(llvm\.)?(exp|exp2|expm1|log|log1p|pow)(f|\.)")
VECTOR = re.compile(r"<(\d+) x (float|double)>")


def signature(dispatcher, dtype: type) -> tuple:
    """The compiled signature of an array loop whose first argument has ``dtype``."""
    return next(s for s in dispatcher.signatures if str(s[0].dtype) == np.dtype(dtype).name)


def llvm_ir(dispatcher, *dtypes: type) -> str:
    """Optimized LLVM IR of ``dispatcher`` compiled for arrays of ``dtypes`` (and an out)."""
    dispatcher(*(np.ones(64, dtype=d) for d in dtypes), np.empty(64, dtype=dtypes[0]))
    return dispatcher.inspect_llvm(signature(dispatcher, dtypes[0]))


def vector_width(ir_text: str, dtype: type) -> int:
    kind = "float" if dtype == np.float32 else "double"
    widths = [int(n) for n, k in VECTOR.findall(ir_text) if k == kind]
    return max(widths, default=1)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", [*UNARY, "pow"])
def test_loop_vectorizes_without_libm_calls(name, dtype):
    text = llvm_ir(loop(name), *([dtype] * (2 if name == "pow" else 1)))
    assert not ANY_MATH_CALL.search(text), ANY_MATH_CALL.search(text).group(0)
    # inlined: no compiled function is called but the loop itself (from its Python wrapper)
    called = set(re.findall(r"call [^@\n]*@(_ZN\w+|gpufuncs\w+)", text))
    assert all(re.search(r"make_loop\w+(unary|binary)", c) for c in called), called
    assert vector_width(text, dtype) >= 2
    # the arithmetic itself is vector arithmetic, not only the loads and stores
    kind = "float" if dtype == np.float32 else "double"
    assert re.search(rf"\b(fmul|fadd|fsub|fdiv|call)\b[^\n]*<\d+ x {kind}>", text)


@pytest.mark.parametrize("name", ["exp", "pow"])
def test_fastmath_callers_get_the_same_results(name):
    """The code lives outside the caller's module: fastmath=True cannot fold its rounding steps."""
    fn = getattr(vm, name)
    args = sample(name, np.float64, 4000, seed=2)
    if name == "pow":

        @njit(fastmath=True)
        def fast(x, y, out):
            for i in range(x.size):
                out[i] = fn(x[i], y[i])

    else:

        @njit(fastmath=True)
        def fast(x, out):
            for i in range(x.size):
                out[i] = fn(x[i])

    out = np.empty_like(args[0])
    fast(*args, out)
    assert np.array_equal(out, run(name, *args))
    assert vector_width(fast.inspect_llvm(fast.signatures[0]), np.float64) >= 2


def test_baseline_math_exp_is_a_libm_call_per_element():
    @njit
    def plain(x, out):
        for i in range(x.size):
            out[i] = math.exp(x[i])

    text = llvm_ir(plain, np.float64)
    # LLVM writes llvm.exp.vNf64 and the x86 backend turns it into one libm call per lane
    assert re.search(r"call [^\n]*@llvm\.exp\.(v\d+)?f64", text)
    fast = loop("exp")
    llvm_ir(fast, np.float64)
    asm = [d.inspect_asm(signature(d, np.float64)) for d in (plain, fast)]
    calls = [len(re.findall(r"\bcall", a)) for a in asm]
    assert calls[0] >= calls[1] + 2  # the vecmath loop has only the wrapper's calls


#: A Haswell: AVX2 and FMA, no AVX-512 (Numba's CPU name and features, for a child process).
AVX2_ONLY = {"NUMBA_CPU_NAME": "haswell",
             "NUMBA_CPU_FEATURES": "+avx,+avx2,+fma,+sse4.2,+bmi2,+f16c,+popcnt,+cx16,+sahf,+lzcnt,"
                                   "+movbe,+xsave"}

_SCALED = """
import sys, numpy as np
from numba import njit
sys.path.insert(0, "benchmarks")
from bench_vecmath import make_loop
from gpufuncs.targets.cpu import vecmath as vm
x = np.load(sys.argv[1])
out = np.empty_like(x)
loop = make_loop(vm.exp, 1)
loop(x, out)
np.save(sys.argv[2], out)
print(list(loop.inspect_asm().values())[0])
"""


def _exp_in_child(x: np.ndarray, tmp_path: Path, env: dict[str, str]) -> tuple[np.ndarray, str]:
    """``vm.exp`` over ``x`` in a fresh process with ``env`` (Numba's CPU is set per process),
    and the loop's machine code."""
    import subprocess

    src, dst = tmp_path / "x.npy", tmp_path / "out.npy"
    np.save(src, x)
    proc = subprocess.run([sys.executable, "-c", _SCALED, str(src), str(dst)], capture_output=True,
                          text=True, env={**os.environ, **env}, cwd=Path(__file__).resolve().parent.parent,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.load(dst), proc.stdout


LDEXP_CALL = re.compile(r"call[^\n]*ldexp")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.slow
def test_exp_scales_by_vscalef_with_avx512_and_by_two_products_without(dtype, tmp_path):
    """The result's 2**k: one vscalef per vector where the target has AVX-512 (a vector
    llvm.ldexp), two exact exponent-field products elsewhere (where LLVM would call libm's
    ldexp per element). Both round once: the results are the same bits, subnormals included."""
    x = np.concatenate([sample("exp", dtype, 4000, seed=3)[0], [-745.1, -740.0, -708.4, 709.78, 88.7, -103.5]]
                       ).astype(dtype)
    here = run("exp", x)
    asm = next(iter(loop("exp").inspect_asm().values()))
    assert not LDEXP_CALL.search(asm)
    if vm.has_avx512(njit(lambda: None).targetctx.codegen()):
        assert "vscalef" in asm
    avx2, avx2_asm = _exp_in_child(x, tmp_path, AVX2_ONLY)
    assert "vscalef" not in avx2_asm and not LDEXP_CALL.search(avx2_asm)
    np.testing.assert_array_equal(avx2.view(f"u{x.itemsize}"), here.view(f"u{x.itemsize}"))


def test_vscalef_only_for_x86_with_avx512f():
    class Codegen:
        def __init__(self, triple: str, features: str) -> None:
            self.key = (triple, "cpu", features)

        def magic_tuple(self) -> tuple[str, str, str]:
            return self.key

    assert vm.has_avx512(Codegen("x86_64-unknown-linux-gnu", "+avx2,+avx512f,+avx512vl"))
    assert not vm.has_avx512(Codegen("x86_64-unknown-linux-gnu", "+avx2,-avx512f,+fma"))
    assert not vm.has_avx512(Codegen("aarch64-unknown-linux-gnu", "+neon,+avx512f"))


# --- the namespace and the kernel copy ---------------------------------------------------------


def test_namespace_is_math_with_replacements():
    ns = vm.namespace()
    assert ns is vm.namespace()
    public = [a for a in dir(math) if not a.startswith("_")]
    for attr in public:
        expected = getattr(vm, attr) if attr in vm._SWAPPED else getattr(math, attr)
        assert getattr(ns, attr) is expected, attr
    assert ns.exp is vm.exp and ns.floor is math.floor and ns.pi == math.pi
    assert math.exp is not vm.exp and math.exp(1.0) == math.e  # the real module is untouched


from math import exp as imported_exp  # noqa: E402 - a kernel global bound to math.exp

OFFSET = 1.0


def kernel(x, shift=0.0, *, scale=1.0):
    """A scalar kernel written against ``math``."""
    return (math.exp(x) + imported_exp(-x) + math.floor(x) + OFFSET + shift) * scale


def make_closure():
    factor = 2.0

    def inner(x):
        return math.log1p(x) * factor

    return inner


def test_with_vector_math_copies_the_function():
    copy = vm.with_vector_math(kernel)
    assert copy is not kernel and copy.__code__ is kernel.__code__
    for attr in ("__name__", "__qualname__", "__module__", "__doc__", "__defaults__", "__kwdefaults__"):
        assert getattr(copy, attr) == getattr(kernel, attr), attr
    assert copy.__globals__["math"] is vm.namespace() and copy.__globals__["imported_exp"] is vm.exp
    assert kernel.__globals__["math"] is math and kernel.__globals__["imported_exp"] is math.exp
    assert copy.__globals__["OFFSET"] == OFFSET
    assert copy(0.5, 1.0, scale=2.0) == pytest.approx(kernel(0.5, 1.0, scale=2.0))
    inner = make_closure()
    inner_copy = vm.with_vector_math(inner)
    assert inner_copy.__closure__[0] is inner.__closure__[0] and inner_copy(0.5) == inner(0.5)
    with pytest.raises(TypeError):
        vm.with_vector_math(njit(kernel))


def make_local_math_loop():
    """A loop defined inside a function that imports ``math`` itself: ``math`` and ``exp`` are
    closure cells, not globals."""
    import math as local_math
    from math import exp as local_exp

    factor = 2.0

    def loop(x, out):
        for i in range(x.size):
            out[i] = local_math.exp(x[i]) * local_exp(-x[i] / 3) * factor + local_math.floor(x[i])

    return loop


def test_with_vector_math_swaps_math_held_in_a_closure():
    loop = make_local_math_loop()
    copy = vm.with_vector_math(loop)
    cells = dict(zip(loop.__code__.co_freevars, copy.__closure__))
    originals = dict(zip(loop.__code__.co_freevars, loop.__closure__))
    assert cells["local_math"].cell_contents is vm.namespace()
    assert cells["local_exp"].cell_contents is vm.exp
    assert cells["factor"] is originals["factor"]  # other cells are shared, not copied
    assert originals["local_math"].cell_contents is math  # the original is untouched
    assert originals["local_exp"].cell_contents is math.exp

    text = llvm_ir(njit(copy), np.float64)
    assert not ANY_MATH_CALL.search(text) and vector_width(text, np.float64) >= 2
    x = np.linspace(-3, 3, 64)
    fast, libm = np.empty_like(x), np.empty_like(x)
    njit(copy)(x, fast)
    njit(loop)(x, libm)
    np.testing.assert_allclose(fast, libm, rtol=4e-16)


def test_with_vector_math_keeps_an_empty_closure_cell():
    def outer():
        def inner(x):
            return later(x)  # bound after inner is made: an empty cell until then

        copy = vm.with_vector_math(inner)
        later = math.exp
        return inner, copy

    inner, copy = outer()
    assert copy.__closure__[0] is inner.__closure__[0] and copy(0.5) == math.exp(0.5)


@njit(error_model="numpy")
def helper_exp(x):
    return math.exp(x) + imported_exp(-x)


def kernel_with_helper(x):
    return helper_exp(x) * 2.0


@njit
def ping(x, n):
    return x if n <= 0 else pong(math.exp(x) * 0.0 + x, n - 1)


@njit
def pong(x, n):
    return ping(x, n)


def test_with_vector_math_copies_the_njit_helpers_a_kernel_calls():
    copy = vm.with_vector_math(kernel_with_helper)
    helper_copy = copy.__globals__["helper_exp"]
    assert helper_copy is not helper_exp and helper_copy.py_func.__code__ is helper_exp.py_func.__code__
    assert helper_copy.py_func.__globals__["math"] is vm.namespace()
    assert helper_copy.targetoptions["error_model"] == "numpy"  # the helper's options kept
    assert helper_copy.targetoptions["inline"] == "always"  # one body for the loop to vectorize
    assert vm.with_vector_math(kernel_with_helper).__globals__["helper_exp"] is helper_copy  # made once
    assert helper_exp.py_func.__globals__["math"] is math  # the helper itself is untouched
    # a global the kernel does not name is neither copied nor kept (it could hold the kernel)
    assert "ping" not in copy.__globals__ and copy.__globals__["__name__"] == __name__

    def loop(x, out):
        for i in range(x.size):
            out[i] = kernel_with_helper_jit(x[i])

    kernel_with_helper_jit = njit(copy)
    text = llvm_ir(njit(loop), np.float64)
    assert not ANY_MATH_CALL.search(text) and vector_width(text, np.float64) >= 2
    assert kernel_with_helper_jit(0.5) == pytest.approx(kernel_with_helper(0.5), rel=4e-16)
    # compiled afterwards, the helper itself still calls libm
    helper_exp(0.5)
    assert re.search(r"@llvm\.exp\.f64", helper_exp.inspect_llvm(helper_exp.signatures[0]))


def test_with_vector_math_ends_on_helpers_that_call_each_other():
    copy = vm.with_vector_math(ping.py_func)
    pong_copy = copy.__globals__["pong"]
    assert copy.__globals__["math"] is vm.namespace() and pong_copy is not pong
    # pong's copy names a copy of ping, made while pong's was: that one calls the original pong
    ping_copy = pong_copy.py_func.__globals__["ping"]
    assert ping_copy is not ping and ping_copy.py_func.__globals__["pong"] is pong
    assert ping_copy.py_func.__globals__["math"] is vm.namespace()


def scalar_kernel(x):
    return math.exp(x) * imported_exp(x / 3) + math.floor(x)


def exp_loop(x, out):
    for i in range(x.size):
        out[i] = math.exp(x[i]) + imported_exp(-x[i])


def test_compiling_the_copy_leaves_other_code_on_libm():
    fast = njit(vm.with_vector_math(exp_loop))
    text_fast = llvm_ir(fast, np.float64)
    assert not ANY_MATH_CALL.search(text_fast) and vector_width(text_fast, np.float64) >= 2
    assert njit(vm.with_vector_math(scalar_kernel))(0.5) == pytest.approx(scalar_kernel(0.5), rel=1e-15)

    # compiled afterwards in the same process: the original, and a user's own math.exp loop
    original = njit(exp_loop)
    assert re.search(r"@llvm\.exp\.(v\d+)?f64", llvm_ir(original, np.float64))
    assert njit(scalar_kernel)(0.5) == scalar_kernel(0.5)  # libm, bit for bit

    @njit
    def users_own(x, out):
        for i in range(x.size):
            out[i] = math.exp(x[i])

    assert re.search(r"@llvm\.exp\.(v\d+)?f64", llvm_ir(users_own, np.float64))
    x = np.linspace(-3, 3, 64)
    out = np.empty_like(x)
    users_own(x, out)
    assert np.array_equal(out, [math.exp(v) for v in x])
