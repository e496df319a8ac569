"""Differential fuzzing of every call path with operands that are views of shared buffers.

Hypothesis builds each operand as a view of a few shared byte buffers (``tests/views.py``):
positive, negative and zero strides, strides that are no multiple of the itemsize (record
fields, ``z.real``), unaligned offsets, byte-swapped and cast dtypes, inputs that overlap,
interleave or are the very memory of ``out=``, ``where=`` masks that are views too. The oracle
is NumPy's semantics on fresh contiguous copies of the inputs, computed by the kernel's Numba
``cpu`` object; the property is that the call's result equals the oracle's bit for bit and that
every byte of every buffer outside the elements ``out=`` names is unchanged. A kernel that
raises must raise its own exception (type and message) and change nothing outside ``out=``.

Kernels of several outputs take ``out=`` a tuple of such views, which never share a byte with each
other (NumPy leaves the order of their writes undefined).

Targets: ``cpu``, ``parallel`` and ``auto`` here; ``cuda`` on a GPU (``pytest -m cuda``), and on
Numba's CUDA simulator in a subprocess (``test_cuda_views_on_the_simulator``). On ``cuda`` the
values come from the same target called on contiguous copies (its math is not the host's,
bit for bit); whether the kernel raises still comes from the ``cpu`` object.

A fast path that writes far outside every buffer crashes the process instead (a segfault, or
glibc's "corrupted size"); ``GPUFUNCS_FUZZ_TRACE=1`` prints each case before its call, so the
last one printed is the culprit.

Examples: ``GPUFUNCS_FUZZ_EXAMPLES=N`` runs N examples per target, spread evenly over the
kernels (default: half the Hypothesis profile's ``max_examples`` per kernel and target).
Before resolving, 100,000 per target, with random draws (the ``dev`` profile)::

    GPUFUNCS_FUZZ_EXAMPLES=100000 HYPOTHESIS_PROFILE=dev python -m pytest tests/test_views_fuzz.py \\
        -q -p no:cacheprovider -k "views_match_numpy"              # cpu, parallel, auto
    GPUFUNCS_FUZZ_EXAMPLES=100000 HYPOTHESIS_PROFILE=dev python -m pytest tests/test_views_fuzz.py \\
        -q -p no:cacheprovider -m cuda                             # on the GPU machine
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from views import Case, View, cases, check, cpu_values, inner, oracle

import gpufuncs as gf

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
HOST = ("cpu", "parallel", "auto")
SIGS2 = ["void(float32[:], float32[:], float32[:])", "void(float64[:], float64[:], float64[:])"]


# -- user kernels, next to the built-ins -------------------------------------------------------

@gf.ufunc(signatures=gf.float_signatures(2), reference=lambda a, b: a - 2 * b, name="fuzz_sub",
          replace=True)
def fuzz_sub(a, b):
    """Not symmetric: swapped operands show."""
    return a - 2 * b


@gf.gufunc(signatures=["void(float32[:], float32[:])", "void(float64[:], float64[:])"],
           layout="(n)->(n)", reference=lambda x: x[..., ::-1], name="fuzz_reverse", replace=True)
def fuzz_reverse(x, out):
    n = x.shape[0]
    for i in range(n):
        out[i] = x[n - 1 - i]


@gf.gufunc(signatures=["void(float32[:], float32[:], float32[:])",
                       "void(float64[:], float64[:], float64[:])"],
           layout="(n),(n)->()", reference=lambda a, b: (a * np.arange(1, a.shape[-1] + 1) - b).sum(-1),
           name="fuzz_weighted", replace=True)
def fuzz_weighted(a, b, out):
    """Order matters: a reversed or shifted row shows."""
    total = 0.0  # (a[0] * 0 would read past an empty row)
    for i in range(a.shape[0]):
        total += a[i] * (i + 1) - b[i]
    out[0] = total


def _raises_below(x):
    if np.any(x < -50):
        raise ValueError("negative")
    return x * 0.5 + 1


@gf.ufunc(signatures=gf.float_signatures(1), reference=_raises_below, name="fuzz_raise", replace=True)
def fuzz_raise(x):
    if x < -50:
        raise ValueError("negative")
    return x * 0.5 + 1


@gf.ufunc(signatures=["UniTuple(float32, 2)(float32, float32)", "UniTuple(float64, 2)(float64, float64)"],
          reference=lambda a, b: (a - 2 * b, a * b), name="fuzz_two", replace=True)
def fuzz_two(a, b):
    """Two outputs, ``out=`` a tuple of views: the gufunc form on the host, the elementwise
    template on cuda, each result written through its own view."""
    return a - 2 * b, a * b


KERNELS = {k.__name__: k for k in (gf.exp, gf.gaussian, gf.clamp, gf.hermite_norm, fuzz_sub,
                                    fuzz_reverse, fuzz_weighted, fuzz_raise, fuzz_two)}


#: The kernels of the cuda property: a kernel that can raise is refused there (see refuse_raising).
CUDA_KERNELS = [name for name in KERNELS if name != "fuzz_raise"]


def _examples(kernels: int = len(KERNELS)) -> int:
    """Examples per kernel and target, for a target tested on ``kernels`` kernels (see the
    module docstring)."""
    per_target = os.environ.get("GPUFUNCS_FUZZ_EXAMPLES")
    if per_target:
        return max(1, math.ceil(int(per_target) / kernels))
    return max(4, settings.default.max_examples // 2)


def cuda_values(kernel: gf.Kernel, inputs: list[np.ndarray], core_shape: tuple[int, ...],
                dtype: np.dtype, sizes: tuple[int, ...]) -> np.ndarray | tuple[np.ndarray, ...]:
    """The cuda target on contiguous copies (after the cpu object, which says whether it raises)."""
    cpu_values(kernel, inputs, core_shape, dtype, sizes)
    result = kernel(*inputs, *sizes, target="cuda")
    return tuple(map(np.asarray, result)) if isinstance(result, tuple) else np.asarray(result)


# -- the property --------------------------------------------------------------------------------

@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("name", list(KERNELS))
@settings(max_examples=_examples())
@given(data=st.data())
def test_views_match_numpy(name, target, data):
    kernel = KERNELS[name]
    check(kernel, data.draw(cases(kernel), label="case"), target)


@pytest.mark.cuda
@pytest.mark.parametrize("name", CUDA_KERNELS)
@settings(max_examples=_examples(len(CUDA_KERNELS)))
@given(data=st.data())
def test_cuda_views_match_numpy(name, data):
    kernel = KERNELS[name]
    check(kernel, data.draw(cases(kernel), label="case"), "cuda", cuda_values)


# -- the examples of issue 29, each written as its NumPy expression ------------------------------

def _arange_buffers():
    a = np.arange(20.0)
    return [a.view(np.uint8)], a


def _strided_into_its_interleaved_half():
    bases, a = _arange_buffers()
    return "exp", [a[1::2]], a[::2], bases


def _into_a_record_field():
    rec = np.zeros(5, [("a", "f8"), ("i", "i4")])
    rec["i"] = np.arange(5) + 100
    x = np.arange(5.0)
    return "exp", [x], rec["a"], [rec.view(np.uint8), x.view(np.uint8)]


def _imag_into_real():
    z = (np.arange(6.0) + 1j * np.arange(10.0, 16.0)).reshape(2, 3)
    return "exp", [z.imag], z.real, [z.reshape(-1).view(np.uint8)]


def _negative_strides_from_the_end():
    bases, a = _arange_buffers()
    return "exp", [a[-2::-2]], a[::-2], bases


def _unaligned_strided_input_into_every_other():
    raw = np.zeros(8 * 14 + 1, np.uint8)
    raw[1:] = np.linspace(-1.0, 1.0, 14).view(np.uint8)
    base = np.full(14, -5.0)
    return "exp", [np.frombuffer(raw, offset=1)[::2]], base[::2], [raw, base.view(np.uint8)]


def _reversed_in_place():
    a = np.arange(8.0)
    return "exp", [a[3::-1]], a[3::-1], [a.view(np.uint8)]


def _reverse_rows_in_place():
    x = np.arange(6.0).reshape(2, 3)
    return "fuzz_reverse", [x], x, [x.view(np.uint8)]


def _weighted_rows_of_its_own_out():
    x = np.arange(8.0).reshape(4, 2)
    return "fuzz_weighted", [x, x[::-1]], x[:, 0], [x.view(np.uint8)]


def _raise_in_place():
    x = np.array([1.0, -60.0, 2.0, 3.0])
    return "fuzz_raise", [x], x, [x.view(np.uint8)]


def _hermite_into_transposed_rows():
    x = np.linspace(-1.0, 1.0, 8)
    return "hermite_norm", [x[::2]], x.reshape(2, 4).T[:, ::-1], [x.view(np.uint8)]


ISSUE_EXAMPLES = [_strided_into_its_interleaved_half, _into_a_record_field, _imag_into_real,
                  _negative_strides_from_the_end, _reversed_in_place,
                  _unaligned_strided_input_into_every_other, _reverse_rows_in_place,
                  _weighted_rows_of_its_own_out, _raise_in_place, _hermite_into_transposed_rows]
TARGETS = [*HOST, pytest.param("cuda", marks=pytest.mark.cuda)]


def _issue_case(make) -> Case:
    name, inputs, out, bases = make()
    sizes = (out.shape[-1],) if name == "hermite_norm" else ()
    views = tuple(View.of(a, bases) for a in inputs)
    return Case(name, views, View.of(out, bases), None, sizes,
                explicit=tuple(b.tobytes() for b in bases))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("make", ISSUE_EXAMPLES, ids=lambda f: f.__name__.strip("_"))
def test_issue_examples(make, target):
    case = _issue_case(make)
    if target == "cuda" and case.kernel == "fuzz_raise":
        refuse_raising(case)
        return
    check(KERNELS[case.kernel], case, target, cuda_values if target == "cuda" else cpu_values)


def refuse_raising(case: Case) -> None:
    """A CUDA kernel cannot report an exception (the thread would leave its element unwritten):
    a kernel that can raise is refused on cuda with an error naming it, before anything is
    written, whatever the values."""
    original = case.bases()
    actual = [b.copy() for b in original]
    args = [v.on(actual) for v in case.inputs]
    for values in (args, [np.abs(a) for a in args]):  # raising values, and values that do not
        with pytest.raises(TypeError, match="fuzz_raise: this kernel can raise an exception"):
            KERNELS["fuzz_raise"](*values, out=case.out.on(actual), target="cuda")
    assert all(np.array_equal(a, o) for a, o in zip(actual, original))


def test_the_oracle_is_numpy_on_the_issue_examples():
    """The oracle's own answers, against NumPy's ufuncs and a real ``numba.guvectorize``."""
    from numba import guvectorize

    @guvectorize(["void(float64[:], float64[:])"], "(n)->(n)")
    def reverse(x, out):
        n = x.shape[0]
        for i in range(n):
            out[i] = x[n - 1 - i]

    for make in ISSUE_EXAMPLES[:6]:
        case = _issue_case(make)
        _, inputs, out, bases = make()
        written = case.bases()
        oracle(gf.exp, case, case.bases(), written)
        np.exp(*inputs, out=out)  # NumPy, in place in the real buffers
        assert all(np.array_equal(inner(w), b) for w, b in zip(written, bases)), make.__name__
    x = np.arange(6.0).reshape(2, 3)
    reverse(x, out=x)
    np.testing.assert_array_equal(x, [[2, 1, 0], [5, 4, 3]])
    case = _issue_case(_reverse_rows_in_place)
    written = case.bases()
    oracle(fuzz_reverse, case, case.bases(), written)
    np.testing.assert_array_equal(inner(written[0]).view(np.float64).reshape(2, 3), x)


# -- empty copies read nothing ----------------------------------------------------------------------

_EMPTY_COPY_AT_A_PAGE = """
import ctypes, mmap, numpy as np
from gpufuncs.targets.base import copy_cast
page = mmap.PAGESIZE
memory = np.frombuffer(mmap.mmap(-1, 2 * page), np.uint8)
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(memory.ctypes.data, page, 0) == 0  # the page before src: no access
src = memory[page:page].view(np.float64).reshape(1, 0)  # empty, where a mapping begins
for where in (True, np.ones((1, 1), bool), np.broadcast_to(True, (1, 1))):
    copy_cast(np.zeros((1, 0), np.float32), src, where)
    copy_cast(np.zeros((1, 4), np.float32)[:, ::-1][:, :0], src.T.T, where)
print("read nothing")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through libc: Linux")
def test_empty_copies_read_nothing_before_their_source():
    """The cuda fuzzer's segfault (fuzz_reverse, seed 2, the 845th call): NumPy's masked casting
    copy of an empty 2-d array reads before its source, which was a pinned staging buffer that
    starts a page. Run in a process of its own: a regression would kill it, not the suite."""
    proc = subprocess.run([sys.executable, "-c", _EMPTY_COPY_AT_A_PAGE], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "read nothing" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def test_every_copy_into_results_goes_through_copy_cast():
    """``copy_cast`` is the one place that copies into results (see its docstring)."""
    import inspect

    from gpufuncs.targets import base

    package = os.path.dirname(gf.__file__)
    source, first = inspect.getsourcelines(base.copy_cast)
    own = {f"targets/base.py:{first + i}" for i in range(len(source))}
    calls = [f"{os.path.relpath(path, package)}:{n}"
             for root, _, names in os.walk(package) for name in names if name.endswith(".py")
             for path in [os.path.join(root, name)]
             for n, line in enumerate(open(path, encoding="utf-8"), 1) if "np.copyto(" in line]
    assert calls and set(calls) <= own, calls


# -- cuda in CI: Numba's simulator, in a process of its own ----------------------------------------

if not SIMULATED:

    @pytest.mark.slow
    def test_cuda_views_on_the_simulator():
        """The cuda property and the issue's examples on the simulator (tiny: each launch there
        runs its threads in Python)."""
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "GPUFUNCS_FUZZ_EXAMPLES": "16"}
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
             "-k", "cuda_views_match_numpy or (issue_examples and cuda)"],
            env=env, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-3000:]
