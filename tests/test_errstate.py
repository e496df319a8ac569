"""Floating-point errors inside kernels follow ``np.errstate`` as NumPy's own ufuncs do.

Each case is checked against NumPy's equivalent ufunc on the same values: the same kinds are
reported, in the same words, and inputs that raise nothing in NumPy raise nothing here.
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest

import gpufuncs as gf

HOST_TARGETS = ["cpu", "parallel", "auto"]
N = 37  # vectorized body and scalar remainder both


def numpy_kinds(f, *args) -> list[str]:
    """The kinds NumPy's ``f(*args)`` reports, in order, through ``errstate(all='call')``."""
    seen: list[str] = []
    with np.errstate(all="call", call=lambda kind, status: seen.append(kind)):
        f(*args)
    return seen


def gf_kinds(f, *args, **kwargs) -> list[str]:
    seen: list[str] = []
    with np.errstate(all="call", call=lambda kind, status: seen.append(kind)):
        f(*args, **kwargs)
    return seen


def full(value, dtype=np.float64, n=N):
    return np.full(n, value, dtype)


@gf.ufunc(signatures=gf.float_signatures(2))
def divide(x, y):
    return x / y


@gf.ufunc(signatures=gf.float_signatures(2))
def subtract(x, y):
    return x - y


@gf.ufunc(signatures=gf.float_signatures(2))
def multiply(x, y):
    return x * y


@gf.ufunc(signatures=gf.float_signatures(1))
def vsqrt(x):
    return math.sqrt(x)


@gf.ufunc(signatures=gf.float_signatures(1))
def vlog1p(x):
    return math.log1p(x)


@gf.ufunc(signatures=gf.float_signatures(1))
def vexp2(x):
    return math.exp2(x)


CASES = [  # (gpufuncs kernel, NumPy's equivalent, arguments)
    (gf.exp, np.exp, (full(1000.0),)),
    (gf.exp, np.exp, (full(-1000.0),)),
    (gf.exp, np.exp, (full(np.nan),)),
    (gf.exp, np.exp, (full(np.inf),)),
    (gf.exp, np.exp, (full(-np.inf),)),
    (gf.exp, np.exp, (np.linspace(-5, 5, N),)),
    (gf.exp, np.exp, (full(100.0, np.float32),)),
    (gf.exp, np.exp, (full(np.inf, np.float32),)),
    (gf.clamp, np.clip, (full(np.nan), 0.0, 1.0)),
    (gf.clamp, np.clip, (full(0.5), np.nan, 1.0)),
    (gf.clamp, np.clip, (np.array([np.nan, 2.0, -1.0, 0.5] * 10), 0.0, 1.0)),
    (divide, np.divide, (full(1.0), full(0.0))),
    (divide, np.divide, (full(0.0), full(0.0))),
    (divide, np.divide, (full(np.nan), full(0.0))),
    (divide, np.divide, (full(1e300), full(1e-300))),
    (divide, np.divide, (full(1e-300), full(1e300))),
    (subtract, np.subtract, (full(np.inf), full(np.inf))),
    (multiply, np.multiply, (full(np.inf), full(2.0))),
    (multiply, np.multiply, (full(0.0), full(np.inf))),
    (vsqrt, np.sqrt, (full(-1.0),)),
    (vsqrt, np.sqrt, (full(np.nan),)),
    (vlog1p, np.log1p, (full(-1.0),)),
    (vlog1p, np.log1p, (full(-2.0),)),
    (vlog1p, np.log1p, (full(np.inf),)),
    (vexp2, np.exp2, (full(2000.0),)),
    (vexp2, np.exp2, (full(-np.inf),)),
]


def case_id(case) -> str:
    kernel, _, args = case
    shown = ",".join(str(a[0]) if isinstance(a, np.ndarray) else str(a) for a in args)
    return f"{kernel.__name__}({shown})"


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_kinds_reported_match_numpy(case, target):
    kernel, reference, args = case
    assert gf_kinds(kernel, *args, target=target) == numpy_kinds(reference, *args)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_warn_gives_numpy_message_at_the_callers_line(target):
    x = full(1000.0)
    with pytest.warns(RuntimeWarning) as record, np.errstate(over="warn"):
        gf.exp(x, target=target)
    assert [str(w.message) for w in record] == ["overflow encountered in exp"]
    assert record[0].filename == __file__


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_raise_raises_floating_point_error(target):
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match=r"^overflow encountered in exp$"):
        gf.exp(full(1000.0), target=target)
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError,
                                                    match=r"^divide by zero encountered in divide$"):
        divide(full(1.0), full(0.0), target=target)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_ignore_and_clean_inputs_give_no_warning(target):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            gf.exp(full(1000.0), target=target)
        with np.errstate(all="raise"):
            gf.exp(np.linspace(-700, 700, 10_001), target=target)
            gf.gaussian(np.linspace(-30, 30, 1001), 0.5, 1.5, target=target)
            gf.clamp(np.linspace(-2, 2, 1001), -1.0, 1.0, target=target)
        gf.clamp(np.array([np.nan, 0.5, np.inf] * 100), 0.0, 1.0, target=target)
        gf.exp(np.array([np.nan, np.inf, -np.inf] * 100), target=target)
    assert record == []


def test_defaults_warn_overflow_and_ignore_underflow():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with np.errstate(divide="warn", over="warn", under="ignore", invalid="warn"):  # NumPy's defaults
            gf.exp(np.array([1000.0, -1000.0]), target="cpu")
    assert [str(w.message) for w in record] == ["overflow encountered in exp"]


def test_call_print_and_log_modes():
    calls = []
    with np.errstate(divide="call", invalid="call", call=lambda kind, flag: calls.append((kind, flag))):
        divide(np.array([1.0, 0.0]), np.array([0.0, 0.0]), target="cpu")
    expected = []
    with np.errstate(divide="call", invalid="call", call=lambda kind, flag: expected.append((kind, flag))):
        np.divide(np.array([1.0, 0.0]), np.array([0.0, 0.0]))
    assert calls == expected == [("divide by zero", 9), ("invalid value", 9)]

    class Log(io.StringIO):
        pass

    log = Log()
    with np.errstate(over="log", call=log):
        gf.exp(full(1000.0), target="cpu")
    assert log.getvalue() == "Warning: overflow encountered in exp\n"


def test_print_mode(capsys):
    with np.errstate(over="print"):
        gf.exp(full(1000.0), target="cpu")
    assert capsys.readouterr().err == "Warning: overflow encountered in exp\n"


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_parallel_chunks_report_from_their_threads(target):
    x = np.zeros(1 << 20)
    x[-3] = 1000.0  # in the last chunk only
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        gf.exp(x, target=target)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_general_path_strided_and_masked(target):
    x = full(1000.0, n=2 * N)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow encountered in exp"):
        gf.exp(x[::2], target="cpu")
    out = np.zeros(N)
    where = np.arange(N) % 2 == 0
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        gf.exp(full(1000.0), out=out, where=where, target=target)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gf.exp(np.where(where, 1.0, 1000.0), out=out, where=where, target=target)  # masked out
    assert record == []


def test_gufunc_body_flags():
    @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->()")
    def inverse_sum(x, out):
        s = 0.0
        for v in x:
            s += 1.0 / v
        out[0] = s

    with np.errstate(divide="raise"), pytest.raises(FloatingPointError,
                                                    match="divide by zero encountered in inverse_sum"):
        inverse_sum(np.zeros((4, 3)), target="cpu")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        inverse_sum(np.ones((4, 3)), target="cpu")
    assert record == []
