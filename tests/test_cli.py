"""``python -m gpufuncs`` (options, exit status, error units) and the lazy ``gf.testing``.

Each test runs a fresh interpreter: what a user's ``import gpufuncs`` or ``python -m gpufuncs``
imports, and what it does without the ``check`` extra, only shows there. "Without the extra" is
a meta-path hook that makes ``import hypothesis`` and ``import scipy`` fail as they do on a plain
``pip install .``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # subprocesses: run by .ci/run after the quick suite

#: Run first in a child to make Hypothesis and SciPy unimportable, as on a plain ``pip install .``.
WITHOUT_CHECK_EXTRA = """
import sys
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("hypothesis", "scipy"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NotInstalled())
"""


def run(*args: str, code: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m gpufuncs ARGS``, or ``python -c CODE ARGS`` (``sys.argv[1:]`` = ARGS)."""
    command = [sys.executable, *(["-c", code] if code else ["-m", "gpufuncs"]), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def without_cuda() -> dict[str, str]:
    """An environment in which the cuda target is unavailable, GPU or not (Numba's own switch)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return {**env, "NUMBA_DISABLE_CUDA": "1"}


#: What the cuda target says under :func:`without_cuda`.
NO_CUDA = "CUDA is disabled (NUMBA_DISABLE_CUDA is set)"


def test_help_prints_usage_and_every_option():
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m gpufuncs")
    for option in ("--kernels", "--targets", "--quick", "--json"):
        assert option in proc.stdout
    assert "self-check" in proc.stdout and "hermite_norm" in proc.stdout  # what it does, the kernels
    assert "python -m gpufuncs warmup" in proc.stdout  # the other command


def test_quick_json_check_gives_ulps_for_ufuncs_and_normwise_eps_for_gufuncs():
    proc = run("--quick", "--json", "--kernels", "exp,hermite_norm,gaussian", "--targets", "cpu",
               env=without_cuda())
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    check = report["check"]
    assert check["status"] == "passed" and report["verdict"] == "all checks passed"
    rows = {(r["kernel"], r["dtype"]): r for r in check["rows"]}
    kernels = ("exp", "hermite_norm", "gaussian")
    assert set(rows) == {(k, d) for k in kernels for d in ("float32", "float64")}
    assert {r["target"] for r in check["rows"]} == {"cpu"}
    assert all(r["status"] == "ok" and r["passed"] is True for r in rows.values())
    for dtype in ("float32", "float64"):
        exp, hermite = rows["exp", dtype], rows["hermite_norm", dtype]
        # Numbers, next to the allowance in the same unit: exp declares 1 ULP.
        assert exp["unit"] == "ulp" and exp["allowance"] == 1.0 and 0 < exp["error"] <= 1.0
        assert exp["tolerance"] == {"rtol": 0.0, "atol": 0.0, "ulps": 1}
        # Norm-wise in eps, within hermite_norm's declared rtol of 64 eps: a number a reader can
        # compare with the tolerance (per element the same row showed up to 5e5 ULP).
        assert hermite["unit"] == "eps" and hermite["allowance"] == 64.0 and 0 < hermite["error"] <= 64
        assert hermite["error"] == hermite["rel"] / np.finfo(dtype).eps
    # gaussian's allowances: its rtol in ULPs (200 eps in float32), or its ulps where larger
    # (float64: rtol 4 eps and 4 ULPs).
    assert rows["gaussian", "float32"]["allowance"] == 200.0
    assert rows["gaussian", "float64"]["allowance"] == 4.0
    assert report["timings"]["rows"] == []  # --quick: no timing table
    # The environment as fields: why cuda is not here, the versions, the disk cache.
    assert report["targets_unavailable"] == {"cuda": NO_CUDA}
    assert report["targets_available"] == ["cpu", "parallel"]
    assert report["versions"]["numpy"] == np.__version__
    assert isinstance(report["disk_cache"], str) and report["disk_cache"]


def test_table_shows_the_units_and_timings_compare_with_the_reference():
    proc = run("--kernels", "hermite_norm", "--targets", "cpu", env=without_cuda())
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"cuda not available: {NO_CUDA}" in lines  # why, not just its absence
    rows = [line.split() for line in lines if line.startswith("  hermite_norm  cpu")]
    # Each error next to its allowance: "4.9 eps of 64".
    assert [r[-4:] for r in rows] == [["eps", "of", "64", "ok"]] * 2, proc.stdout
    assert all(0 < float(r[-5]) <= 64 for r in rows)
    timing = next(line for line in lines if line.startswith("timings, ms per call"))
    row = lines[lines.index(timing) + 2].split()
    assert row[0] == "hermite_norm" and len(row) == 3 and all(float(v) > 0 for v in row[1:])
    assert lines[-1] == "all checks passed"


def test_without_the_check_extra_the_check_is_skipped_saying_why_and_exit_0():
    code = WITHOUT_CHECK_EXTRA + "import runpy; runpy.run_module('gpufuncs', run_name='__main__')"
    proc = run("--kernels", "gaussian", "--targets", "cpu", code=code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    why = ("gpufuncs.testing needs hypothesis, which is not installed "
           '(pip install "gpufuncs[check]")')
    assert f"self-check skipped: {why}" in proc.stdout
    assert "FAIL" not in proc.stdout
    # The timing table still runs; gaussian's SciPy reference is marked as skipped.
    gaussian = [line.split() for line in proc.stdout.splitlines() if line.startswith("  gaussian ")]
    assert gaussian[-1][-1] == "skipped" and float(gaussian[-1][1]) > 0
    assert proc.stdout.rstrip().endswith(f"self-check skipped ({why}); nothing failed")


def test_a_failing_check_exits_1_naming_the_kernel():
    code = """
import math, sys, numpy as np, gpufuncs as gf
from gpufuncs.__main__ import main

@gf.ufunc(signatures=gf.float_signatures(1), reference=np.exp)
def not_exp(x):
    return x + gf.as_type(1, x)  # exp's first two Taylor terms: wrong almost everywhere

@gf.ufunc(signatures=["int64(int64)"], reference=lambda x: 2 * x)
def int_twice(x):
    return 2 * x

sys.exit(main(sys.argv[1:]))
"""
    proc = run("--quick", "--kernels", "not_exp,int_twice", "--targets", "cpu", code=code)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fails = [line for line in proc.stdout.splitlines() if line.startswith("  not_exp       cpu ")]
    assert len(fails) == 2 and all("FAIL  (AssertionError: not_exp (dtype" in f for f in fails), fails
    # No error measured (the check raised), and the allowance: the default 5 eps, relative.
    assert all(f.split()[3:8] == ["-", "-", "ulp", "of", "5"] for f in fails), fails
    # A loop that is not floating is listed as not checked here, saying what checks it.
    [skipped] = [line for line in proc.stdout.splitlines() if line.startswith("  int_twice     cpu ")]
    loop = f"{np.dtype(np.int64).char}->{np.dtype(np.int64).char}"
    assert skipped.split()[2:5] == [loop, "-", "-"], skipped
    assert skipped.endswith("skipped  (not a floating loop of one dtype: gpufuncs.testing.check_kernel "
                            "checks it)"), skipped
    assert proc.stdout.rstrip().endswith("SOME CHECKS FAILED (1 skipped: see their notes)")


def test_output_cut_short_by_its_reader_ends_quietly():
    # -u: every line is written at once, so the pipe is closed while there is more to write
    # (block-buffered, the whole report could fit the pipe's buffer before the reader closed it).
    command = [sys.executable, "-u", "-m", "gpufuncs", "--quick", "--kernels", "exp", "--targets", "cpu"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()  # as `| head -1` does
        stderr = proc.stderr.read()
        status = proc.wait(timeout=300)
    assert first.startswith("gpufuncs "), first
    assert stderr == "", stderr  # no BrokenPipeError traceback, no "Exception ignored" either
    assert status == 141  # as a Unix tool stopped by SIGPIPE


def test_bad_options_exit_2_saying_what_is_valid():
    proc = run("--kernels", "exp,no_such_kernel")
    assert proc.returncode == 2
    assert "--kernels: unknown kernel 'no_such_kernel'; registered kernels: clamp, exp" in proc.stderr
    proc = run("--targets", "gpu")
    assert proc.returncode == 2 and "unknown target 'gpu'; targets: cpu, parallel, cuda" in proc.stderr


def test_gf_testing_is_a_lazy_attribute_that_import_gpufuncs_does_not_load():
    code = """
import sys
import numba
before = set(sys.modules)  # numba itself imports SciPy when it is installed
import gpufuncs as gf
new = {m.partition(".")[0] for m in set(sys.modules) - before}
assert not new & {"hypothesis", "scipy"}, new
assert "gpufuncs.testing" not in sys.modules and "testing" in dir(gf)
check_kernel = gf.testing.check_kernel  # no import of gpufuncs.testing written
import gpufuncs.testing
assert check_kernel is gpufuncs.testing.check_kernel and gf.testing is sys.modules["gpufuncs.testing"]
try:
    gf.no_such_attribute
except AttributeError as exc:
    assert "no attribute 'no_such_attribute'" in str(exc)
else:
    raise AssertionError("gf.no_such_attribute did not raise")
print("ok")
"""
    proc = run(code=code)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


def test_gf_testing_without_hypothesis_says_what_to_install():
    code = WITHOUT_CHECK_EXTRA + """
import gpufuncs as gf
try:
    gf.testing
except ImportError as exc:
    print(exc)
"""
    proc = run(code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("gpufuncs.testing needs hypothesis, which is not installed: "
                           'pip install "gpufuncs[check]"\n')
