"""``python -m gpufuncs warmup``: what it calls, its options, and that a new process loads what it
compiled from the disk cache (subprocesses sharing a temporary ``NUMBA_CACHE_DIR``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs import warmup
from gpufuncs.targets.cpu.loops import WIDE_MIN

#: Run in a child: calls of gaussian of the kinds warmup compiles (Python scalars and arrays,
#: below and above WIDE_MIN, on cpu and with the default target), recording every compilation
#: of a function that has a disk cache through Numba's event API; then a call of a kind it does
#: not compile (a 2-D array), which must show up (the probe sees compilations). Prints the
#: functions each part compiled and the sum of the first part's results.
PROBE = """
import json
import numpy as np
from numba.core import event

compiled = []

class Listener(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        cache = getattr(ev.data["dispatcher"], "_cache", None)
        if cache is not None and type(cache).__name__ != "NullCache":
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)

event.register("numba:compile", Listener())
import gpufuncs as gf

total = 0.0
for n in (10, 3000):
    x = np.linspace(-2.0, 2.0, n)
    total += float(gf.gaussian(x, 0.0, 1.0, target="cpu").sum())
    total += float(gf.gaussian(x, x, np.ones(n), target="cpu").sum())
    total += float(gf.gaussian(x, 0.5, 2.0).sum())
warmed = list(compiled)
compiled.clear()
gf.gaussian(np.ones((3, 3)), 0.0, 1.0, target="cpu")
print(json.dumps({"warmed": warmed, "other": compiled, "total": total}))
"""


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "NUMBA_CACHE_DIR": str(cache / "numba"),
            "GPUFUNCS_CACHE_DIR": str(cache / "gpufuncs")}


def _probe(cache: Path) -> dict:
    # In the warmup's working directory: run from a checkout's root, `python -c` would import
    # the checkout's gpufuncs (the current directory first on sys.path), `-m gpufuncs` in the
    # other directory the installed one, and Numba keys its cache by the source files' paths.
    done = subprocess.run([sys.executable, "-c", PROBE], env=_env(cache), capture_output=True, text=True,
                          timeout=300, cwd=cache)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _warmup(cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpufuncs", "warmup", *args], env=_env(cache),
                          capture_output=True, text=True, timeout=300, cwd=cache)


#: A user's module of kernels, for ``--import``.
USER_KERNELS = """
import gpufuncs as gf

@gf.ufunc(signatures=["float64(float64)"], reference=None)
def twice(x):
    return 2.0 * x
"""


def _gaussian_total() -> float:
    """The probe's sum, computed with NumPy."""
    total = 0.0
    for n in (10, 3000):
        x = np.linspace(-2.0, 2.0, n)
        for x0, sigma in ((0.0, 1.0), (x, np.ones(n)), (0.5, 2.0)):
            total += float(np.sum(np.exp(-0.5 * ((x - x0) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))))
    return total


@pytest.mark.slow
def test_after_warmup_a_new_process_loads_the_loops_from_the_disk_cache(tmp_path):
    (tmp_path / "user_kernels.py").write_text(USER_KERNELS)  # in the warmup's working directory
    options = ("--kernels", "gaussian", "--targets", "cpu", "--dtypes", "float64")
    warmed = _warmup(tmp_path, *options, "--json")
    assert warmed.returncode == 0, warmed.stderr
    report = json.loads(warmed.stdout)
    assert report["disk_cache"].startswith(str(tmp_path / "numba"))
    [row] = report["rows"]
    assert (row["kernel"], row["target"], row["loop"]) == ("gaussian", "cpu", "ddd->d")
    # Two sizes (narrow and wide loops), arrays or Python scalars: one loop each.
    assert row["compiled"] == report["compiled"] == 4 and row["seconds"] > 0, report

    # A fresh process compiles no function that has a disk cache for the calls warmed: every
    # loop is loaded. A call of another kind compiles (and is seen to).
    probe = _probe(tmp_path)
    assert probe["warmed"] == [], probe
    assert any("ufunc_loops" in name for name in probe["other"]), probe
    assert probe["total"] == pytest.approx(_gaussian_total(), rel=1e-12)

    # Warming again finds gaussian's loops there; a user's kernel, imported, is compiled.
    again = _warmup(tmp_path, "--import", "user_kernels", "--kernels", "gaussian,twice", *options[2:])
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0] == f"disk cache: {report['disk_cache']} (set by NUMBA_CACHE_DIR)"
    rows = {line.split()[0]: line.split()[1:3] + line.split()[4:] for line in lines[2:4]}
    assert rows == {"gaussian": ["cpu", "ddd->d", "0", "functions"],
                    "twice": ["cpu", "d->d", "2", "functions"]}, again.stdout  # (a loop a size)
    assert lines[-1].startswith("warmed 2 loops in ") and lines[-1].endswith(
        "2 functions compiled into the disk cache")


@pytest.mark.slow
def test_warmup_help_and_bad_options():
    done = subprocess.run([sys.executable, "-m", "gpufuncs", "warmup", "--help"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m gpufuncs warmup")
    for option in ("--kernels", "--targets", "--dtypes", "--json", "NUMBA_CACHE_DIR"):
        assert option in done.stdout
    done = subprocess.run([sys.executable, "-m", "gpufuncs", "warmup", "--kernels", "no_such_kernel"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--kernels: unknown kernel 'no_such_kernel'" in done.stderr


# -- in this process: nothing is compiled ----------------------------------------------------------
def test_the_calls_cover_arrays_and_python_scalars_below_and_above_the_wide_loops():
    spec = gf.gaussian.spec
    loop = spec.loop_for(np.dtype(np.float32))
    found = list(warmup.calls(spec, loop))
    assert warmup.SIZES[0] < WIDE_MIN <= warmup.SIZES[1]
    assert len(found) == 4
    for args, n in zip(found[::2], warmup.SIZES):  # every input an array of the loop's dtype
        assert [(a.dtype, a.shape) for a in args] == [(np.dtype(np.float32), (n,))] * 3
    for args, n in zip(found[1::2], warmup.SIZES):  # an array, then Python floats
        assert args[0].dtype == np.float32 and args[0].shape == (n,)
        assert [type(a) for a in args[1:]] == [float, float]
        assert args[2] > 0  # sigma's declared domain is (0, inf)


def test_a_gufunc_is_called_with_its_output_only_core_size():
    spec = gf.hermite_norm.spec
    found = list(warmup.calls(spec, spec.loop_for(np.dtype(np.float64))))
    assert [(args[0].shape, args[1:]) for args in found] == [((n,), (warmup.CORE_SIZE,))
                                                           for n in warmup.SIZES]


@pytest.mark.parametrize(("domain", "value"), [((-np.inf, np.inf), 1.0), ((2.0, 3.0), 2.5),
                                               ((-np.inf, -5.0), -6.0), ((7.0, np.inf), 8.0)])
def test_warm_values_lie_in_the_declared_domain(domain, value):
    assert warmup._value(np.dtype(np.float64), domain) == value


def test_with_both_host_targets_auto_s_copy_kernel_is_warmed_too():
    def rows(targets):
        return [(k.__name__, loop.types, t) for k, loop, t, _ in warmup._jobs(["exp"], targets, None)]

    assert rows(("cpu",)) == [("exp", "f->f", "cpu"), ("exp", "d->d", "cpu")]
    assert rows(("cpu", "parallel"))[-2:] == [("identity", "d->d", "cpu"), ("identity", "d->d", "parallel")]


def test_dtypes_select_the_loops_made_of_them_only():
    spec = gf.gaussian.spec
    assert [loop.types for loop in warmup.select_loops(spec, None)] == ["fff->f", "ddd->d"]
    assert [loop.types for loop in warmup.select_loops(spec, [np.dtype(np.float64)])] == ["ddd->d"]
    assert warmup.select_loops(spec, [np.dtype(np.int8)]) == []


@pytest.mark.parametrize(("argv", "message"), [
    (["--import", "no_such_module_here"],
     "--import: importing 'no_such_module_here' failed: ModuleNotFoundError"),
    (["--targets", "gpu"], "--targets: unknown target 'gpu'; targets: cpu, parallel, cuda"),
    (["--dtypes", "float64,nonsense"], "--dtypes: data type 'nonsense' not understood"),
    (["--kernels", "exp", "--dtypes", "int8"],
     "--dtypes: no declared loop of the kernels chosen has only the dtypes int8"),
])
def test_bad_options_exit_2_saying_why(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        warmup.parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_cache_directory_follows_numba_cache_dir(monkeypatch, tmp_path):
    # Numba reads NUMBA_CACHE_DIR into numba.config.CACHE_DIR when it is imported.
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    where = warmup.cache_directory()
    assert where is not None and Path(where).parent == tmp_path and Path(where).is_dir()
