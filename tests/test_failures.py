"""Failures do not poison state: a kernel that fails to compile fails the same way every time and
on its targets only; Ctrl-C during a call (or a first call's compilation) leaves the library
usable; a damaged or unwritable disk cache costs one warning and an in-memory compilation.

The tests that need a process of their own (a fresh Numba, the CUDA simulator, another cache
directory) run this module as a script: ``python tests/test_failures.py <scenario> ...``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.testing import compare

HERE = Path(__file__).resolve()
TIMEOUT = 240
X = np.random.default_rng(6).normal(scale=2.0, size=5000)


def run_scenario(*argv: str, env: dict[str, str] | None = None) -> dict:
    """Run this module as a script in a child process (bounded in time); its JSON summary."""
    done = subprocess.run([sys.executable, str(HERE), *argv], capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"child failed (rc {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def ulp(x):
    return math.ulp(x)


def ulp_kernel(name: str = "failing_ulp") -> gf.Kernel:
    """``math.ulp``: plain Python (the CUDA simulator runs it) that Numba cannot compile. Lazy:
    declared with signatures, it is refused at definition (see the definition tests below)."""
    return gf.ufunc(reference=lambda x: np.spacing(np.abs(x)), name=name, replace=True)(ulp)


def works_everywhere() -> list[str]:
    """Call the built-ins and a fresh user kernel on cpu and parallel, against their references;
    what failed (an empty list when everything is right)."""
    def scaled(x):
        return x * 2.5 + 1.0

    user = gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: x * 2.5 + 1.0,
                    name="failures_scaled", replace=True)(scaled)
    calls = {"exp": (gf.exp, (X,)), "gaussian": (gf.gaussian, (X, 0.5, 2.0)),
             "clamp": (gf.clamp, (X, -1.0, X[::-1])), "hermite_norm": (gf.hermite_norm, (X, 8)),
             "user": (user, (X,))}
    failures = []
    for name, (kernel, args) in calls.items():
        for target in ("cpu", "parallel"):
            try:
                compare(kernel, args, kernel(*args, target=target), target=target)
            except Exception as exc:
                failures.append(f"{name} on {target}: {type(exc).__name__}: {exc}")
    return failures


# -- compile failures ---------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_a_failing_kernel_raises_the_same_error_on_every_retry(target, restore_registry):
    kernel = ulp_kernel()
    errors = []
    for _ in range(3):
        expected = "'failing_ulp' failed to compile for inputs float64: Unknown attribute 'ulp'"
        with pytest.raises(gf.KernelCompileError, match=expected) as info:
            kernel(X, target=target)
        errors.append(str(info.value))
    assert errors == [errors[0]] * 3
    assert "ulp" in errors[0]  # Numba's reason is kept
    assert works_everywhere() == []


@pytest.mark.slow
def test_a_kernel_failing_on_the_host_works_on_the_cuda_simulator():
    summary = run_scenario("simulator", env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert summary == {"host": ["KernelCompileError"] * 4, "cuda": [True, True], "others": []}


def simulator() -> dict:
    """A kernel Numba cannot compile for the host: fails on cpu and parallel (twice each, in
    turns with the CUDA simulator, where it runs), and leaves every other kernel working.

    Declared with signatures past the definition check (switched off here: it refuses this
    body, see the definition tests; what it stands for is a body whose typing passes and whose
    code generation fails), since a lazy kernel types its body on the host for every target."""
    from gpufuncs.targets.cpu import typecheck

    typecheck.check_signatures = lambda spec: None
    kernel = gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: np.spacing(np.abs(x)),
                      name="failing_ulp", replace=True)(ulp)
    host, cuda = [], []
    for _ in range(2):
        for target in ("cpu", "parallel"):
            try:
                kernel(X, target=target)
                host.append("no error")
            except gf.KernelCompileError as exc:
                host.append(type(exc).__name__)
        result = kernel(X[:64], target="cuda")  # the simulator runs one Python thread per element
        cuda.append(bool(np.array_equal(result, np.spacing(np.abs(X[:64])))))
    return {"host": host, "cuda": cuda, "others": works_everywhere()}


# -- definition errors ------------------------------------------------------------------------------
def _attribute(x):
    return x.no_such_attribute


def _string(x):
    return "a"


def _undefined(x):
    return no_such_function(x)  # noqa: F821  (the point of the test)


def _complex(x):
    return x * 1j


@pytest.mark.parametrize(("body", "numba_says"), [
    (_attribute, "Unknown attribute 'no_such_attribute' of type float64"),
    (_string, "No conversion from Literal[str](a) to float64"),
    (_undefined, "NameError: name 'no_such_function' is not defined"),
    (_complex, "No conversion from complex128 to float64"),
    (ulp, "Unknown attribute 'ulp'"),
], ids=["attribute", "string", "undefined", "complex", "ulp"])
def test_a_body_that_cannot_be_typed_is_refused_at_definition(body, numba_says, restore_registry,
                                                               tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFUNCS_CACHE_DIR", str(tmp_path))  # no marker from an earlier run
    with pytest.raises(gf.KernelDefinitionError) as info:
        gf.ufunc(signatures=["float64(float64)"], name="failures_untyped", replace=True)(body)
    message = str(info.value)
    assert message.startswith("kernel 'failures_untyped': its body cannot be compiled for "
                              "signature 'float64(float64)': ")
    assert numba_says in message
    assert "\x1b[" not in message and "Failed in" not in message and "Traceback" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no Numba traceback
    assert "failures_untyped" not in gf.names()


def test_the_check_covers_every_signature_and_gufuncs(restore_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFUNCS_CACHE_DIR", str(tmp_path))

    def real_only(x):
        return math.sqrt(x)

    with pytest.raises(gf.KernelDefinitionError, match=r"signature 'complex128\(complex128\)'"):
        gf.ufunc(signatures=["float64(float64)", "complex128(complex128)"],
                 name="failures_real_only", replace=True)(real_only)

    def fills(x, out):
        out[0] = x.imag_part

    with pytest.raises(gf.KernelDefinitionError, match=r"kernel 'failures_fills'.*imag_part"):
        gf.gufunc(signatures=["void(float64, float64[:])"], layout="()->()",
                  name="failures_fills", replace=True)(fills)


def test_a_checked_kernel_is_not_checked_again(restore_registry, tmp_path, monkeypatch):
    """A marker per kernel key and loop: defining the same code again types nothing."""
    from gpufuncs.targets.cpu import typecheck

    monkeypatch.setenv("GPUFUNCS_CACHE_DIR", str(tmp_path))
    gf.ufunc(signatures=gf.float_signatures(1), name="failures_twice", replace=True)(_doubled)
    assert len(list((tmp_path / "typed").iterdir())) == 2
    typed = []
    monkeypatch.setattr(typecheck, "type_signature", lambda *args: typed.append(args))
    kernel = gf.ufunc(signatures=gf.float_signatures(1), name="failures_twice", replace=True)(_doubled)
    assert typed == [] and kernel(np.float64(1.5)) == 3.0


def _doubled(x):
    return x * 2.0


# -- Ctrl-C ---------------------------------------------------------------------------------------
def interrupt_in(seconds: float) -> threading.Timer:
    """Send this process SIGINT (a real Ctrl-C: it also wakes a sleeping main thread) soon."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def interrupted(call, seconds: float, limit: float = 30.0) -> bool:
    """Call ``call()`` over and over until a SIGINT sent after ``seconds`` stops it with
    ``KeyboardInterrupt``; whether it did (within ``limit`` seconds)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = interrupt_in(seconds)
    try:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            call()
    except KeyboardInterrupt:
        return True
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    return False


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_ctrl_c_during_long_calls_leaves_the_library_usable(target, restore_registry):
    big = np.linspace(-5, 5, 10**7)
    out = np.empty_like(big)
    for seconds, call in [(0.05, lambda: gf.gaussian(big, 0.5, 2.0, target=target)),
                          (0.12, lambda: gf.hermite_norm(big[::10], 12, target=target)),
                          (0.2, lambda: gf.clamp(big, -1.0, big[::-1], out=out, target=target))]:
        assert interrupted(call, seconds)
    assert works_everywhere() == []


def test_ctrl_c_during_a_compilation_arrives_when_it_is_done():
    from gpufuncs.targets.base import interrupts_deferred

    steps = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                signal.raise_signal(signal.SIGINT)
                steps.append("after the signal")  # the block runs on
                time.sleep(0.01)
                steps.append("end of the block")
            steps.append("after the block")  # never: the interrupt comes as the block ends
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == ["after the signal", "end of the block"]


@pytest.mark.slow
def test_ctrl_c_during_the_first_compilations_of_a_process_leaves_it_usable():
    """A fresh process: the first typing there (a kernel's definition) installs Numba's pending
    registrations (gpufuncs' vector math among them), and Ctrl-C in the middle of that used to
    make every later compilation of the process fail ("Unknown attribute 'sqrt'")."""
    summary = run_scenario("interrupts")
    assert summary["failures"] == []
    assert summary["during registration"] is True and summary["interrupted"] >= 1, summary


def _sigint_while_installing_vector_math() -> None:
    """Send SIGINT (to this process, for real) as Numba's typing context installs the first of
    gpufuncs' vector-math registrations: where an interrupt does the most harm."""
    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "insert_global" and \
                getattr(frame.f_locals.get("gv"), "__module__", "") == "gpufuncs.targets.cpu.vecmath":
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    sys.setprofile(hook)


def _root_kernel(name: str) -> gf.Kernel:
    def root(x):
        return math.sqrt(x * x + 1.0) * x

    return gf.ufunc(signatures=gf.float_signatures(1), name=name, replace=True,
                    reference=lambda x: np.sqrt(x * x + 1.0) * x)(root)


def _check(kernel: gf.Kernel, target: str) -> list[str]:
    try:
        compare(kernel, (X,), kernel(X, target=target), target=target)
    except Exception as exc:
        return [f"{kernel.__name__} on {target}: {type(exc).__name__}: {exc}"]
    return []


def interrupts() -> dict:
    """Interrupt the first typing of the process as it installs the vector math (a kernel's
    definition, whose type check is the first to type its body), then first calls of fresh
    kernels after various delays; check that they and every other kernel compute the
    references."""
    _sigint_while_installing_vector_math()
    try:
        during = interrupted(lambda: _root_kernel("interrupted_first")(X, target="cpu"), seconds=60.0)
    finally:
        sys.setprofile(None)
    kernel = _root_kernel("interrupted_first")
    failures = _check(kernel, "cpu")
    count = 0
    for i, seconds in enumerate((0.01, 0.1, 0.4)):
        for target in ("cpu", "parallel"):
            kernel = _root_kernel(f"interrupted_{i}_{target}")
            count += interrupted(lambda kernel=kernel, target=target: kernel(X, target=target), seconds)
            failures += _check(kernel, target)
    return {"during registration": during, "interrupted": count, "failures": failures + works_everywhere()}


# -- the disk cache --------------------------------------------------------------------------------
KERNEL_MODULE = '''
import math

import numpy as np

import gpufuncs as gf


@gf.ufunc(signatures=gf.float_signatures(2), reference=lambda a, b: a * b - 0.5)
def cached_fma(a, b):
    return a * b - 0.5


# Two kernels whose loops are too big for LLVM to inline into their entry points (the
# vector-math exp): those call them by name.
@gf.ufunc(signatures=gf.float_signatures(2), reference=lambda a, b: np.exp(a) * b)
def cached_exp_product(a, b):
    return math.exp(a) * b


@gf.ufunc(signatures=gf.float_signatures(2), reference=lambda a, b: np.exp(a) / b)
def cached_exp_quotient(a, b):
    return math.exp(a) / b
'''


def cache_use() -> dict:
    """Call a user kernel (from a module on the child's path) on cpu, recording every
    DiskCacheWarning; whether the results are right, and the loops' disk-cache hits (the
    parallel loops use the same cache, and take longer to compile)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import cached_kernel

        kernel = cached_kernel.cached_fma
        failures = []
        for args in [(X, X * 0.5), (X, 0.5)]:  # contiguous: the flat loops, which are cached
            try:
                compare(kernel, args, kernel(*args, target="cpu"), target="cpu")
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
    f64 = kernel.spec.loop_for(np.dtype(np.float64))
    hits = sum(sum(d.stats.cache_hits.values()) for d in kernel.compiled("cpu").loops(f64))
    return {"warnings": [str(w.message) for w in caught if w.category.__name__ == "DiskCacheWarning"],
            "failures": failures, "hits": hits, "package": str(Path(gf.__file__).parent)}


def calls_in_order(*names: str) -> dict:
    """Call the named kernels of the module on the child's path in turn, on cpu and parallel;
    what computed something other than its reference, and each kernel's disk-cache hits."""
    import cached_kernel

    failures, hits = [], {}
    for name in names:
        kernel = getattr(cached_kernel, name)
        for target in ("cpu", "parallel"):
            try:
                compare(kernel, (X, X * 0.5), kernel(X, X * 0.5, target=target), target=target)
            except Exception as exc:
                failures.append(f"{name} on {target}: {type(exc).__name__}: {exc}")
        hits[name] = sum(sum(d.stats.cache_hits.values()) for target in ("cpu", "parallel")
                         for d in kernel.compiled(target).loops(kernel.spec.loop_for(np.dtype(np.float64))))
    return {"failures": failures, "hits": hits}


@pytest.mark.slow
def test_a_kernel_loaded_from_the_disk_cache_runs_its_own_code(tmp_path):
    """Numba names compiled functions after their qualified name and a per-process counter, and
    links a library loaded from the cache to the process's functions by name. The second child
    compiles ``cached_exp_quotient`` first, so its loops get the names that
    ``cached_exp_product``'s had in the first child; ``cached_exp_product``, then loaded from
    the cache, called the quotient's loop and computed ``exp(a) / b``."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"), "PYTHONPATH": str(_kernel_dir(tmp_path))}
    first = run_scenario("order", "cached_exp_product", env=env)
    assert first == {"failures": [], "hits": {"cached_exp_product": 0}}
    second = run_scenario("order", "cached_exp_quotient", "cached_exp_product", env=env)
    assert second["failures"] == []
    assert second["hits"]["cached_exp_quotient"] == 0 and second["hits"]["cached_exp_product"] >= 2, second


def scaled_by(scale: float, name: str) -> gf.Kernel:
    """A factory's kernel: every one has the same source, only its closure's ``scale`` differs."""
    def scaled(x):
        return x * scale

    return gf.ufunc(signatures=gf.float_signatures(1), reference=lambda x: x * scale, name=name,
                    replace=True)(scaled)


@pytest.mark.parametrize("target", ["cpu", "parallel"])
def test_kernels_of_one_factory_never_share_cached_code(target, restore_registry):
    """The second kernel used to load the first one's loops from the disk cache (keyed on the
    source only) and return ``x * 2`` for ``x * 3``."""
    for scale in (2.0, 3.0, 2.0, 5.0):
        kernel = scaled_by(scale, f"factory_{target}_{scale:g}")
        np.testing.assert_array_equal(kernel(X, target=target), X * scale)


def _kernel_dir(tmp_path: Path) -> Path:
    path = tmp_path / "kernels"
    path.mkdir()
    (path / "cached_kernel.py").write_text(KERNEL_MODULE)
    return path


def _damage(cache: Path) -> tuple[int, int]:
    """Overwrite every index with garbage and truncate every data file; how many of each were."""
    index, data = list(cache.rglob("*.nbi")), list(cache.rglob("*.nbc"))
    for f in index:
        f.write_bytes(b"not a pickle")
    for f in data:
        f.write_bytes(f.read_bytes()[:40])
    return len(index), len(data)


@pytest.mark.slow
def test_a_damaged_disk_cache_costs_one_warning_and_is_written_again(tmp_path):
    cache = tmp_path / "numba-cache"
    env = {"NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(_kernel_dir(tmp_path))}
    first = run_scenario("cache", env=env)
    assert (first["warnings"], first["failures"], first["hits"]) == ([], [], 0)
    index, data = _damage(cache)
    assert index >= 1 and data >= 2  # both calls' loops (one function's two signatures: one index)
    damaged = run_scenario("cache", env=env)
    assert damaged["failures"] == [] and damaged["hits"] == 0
    assert len(damaged["warnings"]) == 1 and "compiling in memory" in damaged["warnings"][0]
    healed = run_scenario("cache", env=env)
    assert healed["warnings"] == [] and healed["failures"] == []
    assert healed["hits"] >= 2  # both calls' loops, loaded from the rewritten entries


@pytest.mark.slow
def test_no_writable_cache_location_costs_one_warning(tmp_path):
    """Numba tries NUMBA_CACHE_DIR, then ``__pycache__`` beside the source, then the user's cache
    directory; here each is a path below a regular file (as root can write anywhere, modes
    would not do). The package is a copy, so that its ``__pycache__`` can be made unusable."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    package = tmp_path / "site"
    shutil.copytree(Path(gf.__file__).parent, package / "gpufuncs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [package / "gpufuncs", *(package / "gpufuncs").rglob("*")]:
        if folder.is_dir():
            (folder / "__pycache__").write_text("")
    kernels = _kernel_dir(tmp_path)
    (kernels / "__pycache__").write_text("")
    env = {"NUMBA_CACHE_DIR": str(blocker / "numba"), "XDG_CACHE_HOME": str(blocker / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(package), str(kernels)]), "PYTHONDONTWRITEBYTECODE": "1"}
    summary = run_scenario("cache", env=env)
    assert summary["package"] == str(package / "gpufuncs")
    assert summary["failures"] == [] and summary["hits"] == 0
    assert len(summary["warnings"]) == 1 and "finding a cache directory" in summary["warnings"][0]


if __name__ == "__main__":
    scenarios = {"simulator": simulator, "interrupts": interrupts, "cache": cache_use,
                 "order": calls_in_order}
    print(json.dumps(scenarios[sys.argv[1]](*sys.argv[2:])))
