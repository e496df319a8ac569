"""``python -m benchmarks``: its quick run, the kernels' benchmark declarations, the GPU suite's
code path without CuPy, and the plots from the committed result files."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.kernels import builtin_names

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))  # the benchmarks package lives beside gpufuncs, not in it

from benchmarks import bench_cpu, bench_gpu, cases, figures, rows  # noqa: E402
from benchmarks.__main__ import parse  # noqa: E402

pytestmark = pytest.mark.slow  # subprocesses and threads: run by .ci/run after the quick suite

META = ("date", "machine", "processor", "cores", "python", "numpy", "numba", "gpufuncs", "git commit",
        "gpu", "gpu skipped", "suites", "quick")
ROW = ("suite", "kernel", "target", "dtype", "n", "outputs", "data", "call", "median_s", "pipelined_s",
       "elements_per_s", "GB_per_s", *rows.ANCHORS)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One ``python -m benchmarks --quick`` run into a temporary folder: its JSON, its plot folder,
    and its output; ``benchmarks/results/`` is left as it was."""
    out = tmp_path_factory.mktemp("bench")
    before = {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--json", str(out / "run.json"),
                           "--plot", str(out / "plots")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} == before
    return json.loads((out / "run.json").read_text()), out / "plots", proc


def test_quick_run_meta_says_what_ran_where(quick_run):
    result, _, proc = quick_run
    meta = result["meta"]
    assert set(META) <= set(meta), set(META) - set(meta)
    assert meta["quick"] is True and meta["cores"] >= 1
    assert meta["git commit"] is None or len(meta["git commit"].split("+")[0]) == 40
    if bench_gpu.unavailable():  # no CuPy or GPU here: said, with the reason
        assert result["skipped"]["gpu"] == bench_gpu.unavailable() == meta["gpu skipped"]
        assert "gpu suite skipped" in proc.stderr
        assert meta["suites"] == ["cpu", "overhead"]


def test_quick_run_rows_are_complete_and_sane(quick_run):
    found = quick_run[0]["rows"]
    assert {r["suite"] for r in found} >= {"cpu", "overhead"}
    assert {r["kernel"] for r in found} == set(builtin_names())
    assert {r["target"] for r in found if r["suite"] == "cpu"} == {"cpu", "parallel", "auto"}
    for r in found:
        assert set(ROW) <= set(r), set(ROW) - set(r)
        assert r["median_s"] > 0 and r["elements_per_s"] > 0 and r["GB_per_s"] > 0, r
        assert r["data"] == "host" and r["dtype"] in ("float32", "float64")
        ratios = [r[key] for key in rows.ANCHORS if r[key] is not None]
        assert all(math.isfinite(x) and x > 0 for x in ratios), r
    for r in (r for r in found if r["suite"] == "cpu"):
        assert r["x_numpy"] and r["x_numba"] and r["x_copy"], r  # measured in the same run


def test_quick_run_tables_keep_the_results_files_columns(quick_run):
    tables = quick_run[0]["tables"]
    committed = json.loads((RESULTS / "cpu.json").read_text())["rows"][0]
    assert set(committed) <= set(tables["cpu"][0])
    committed = json.loads((RESULTS / "cpu_overhead.json").read_text())["rows"][0]
    assert set(committed) <= set(tables["cpu_overhead"][0])


def test_quick_run_plots(quick_run):
    plots = quick_run[1]
    assert sorted(p.name for p in plots.iterdir()) == ["cpu-overhead.png", "cpu-time.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots.iterdir())


def test_the_large_rows_floor_is_a_copy_into_new_memory():
    """The ``--large`` row's ``parallel copy``: the argument's values in a new array, its ratios
    taken against the same rounds as the kernel's (here at a small n, 3 rounds), and the slow
    anchors left out of that row alone."""
    x = bench_cpu.samples(1000, np.float64)
    copy = bench_cpu.parallel_copy_of(x)
    first, second = copy(), copy()
    np.testing.assert_array_equal(first, x)
    assert not np.shares_memory(first, x) and not np.shares_memory(first, second)
    (case,) = cases.cases(["gaussian"])
    row = bench_cpu.main_row(case, np.float64, 1000, quick=True, large=True)
    assert row["parallel copy"] > 0
    assert row["cpu/parallel copy"] > 0 and row["parallel/parallel copy"] > 0
    assert "numba" not in row and "scipy" not in row and row["numpy"] > 0  # the slow anchors left out
    usual = bench_cpu.main_row(case, np.float64, 1000, quick=True)
    assert "parallel copy" not in usual and usual["numba"] > 0 and usual["scipy"] > 0


def test_a_kernel_without_a_declaration_stops_the_benchmarks(restore_registry):
    gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative, name="bench_undeclared")(lambda x: -x)
    assert float(gf.registry["bench_undeclared"](2.0)) == -2.0  # the library does not need one
    with pytest.raises(cases.MissingBenchmarkError, match="bench_undeclared"):
        cases.cases()
    assert [c.name for c in cases.cases(builtin_names())] == builtin_names()


def test_the_command_names_an_undeclared_kernel():
    code = ("import sys, numpy as np, gpufuncs as gf\n"
            "gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative,\n"
            "         name='nobench')(lambda x: -x)\n"
            "from benchmarks.__main__ import main\n"
            "sys.exit(main(['--quick', '--suite', 'overhead']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "nobench" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"expressions": {}}, "at least one"),
    ({"expressions": {"numpy": np.exp}, "scalars": (1.0,)}, "1 sample arrays and 1 scalars for 1 inputs"),
    ({"expressions": {"numpy": np.exp}, "sizes": (4,)}, "1 output-only sizes, the layout has 0"),
])
def test_declarations_that_do_not_fit_the_kernel_raise(kwargs, message, restore_registry):
    with pytest.raises(gf.KernelDefinitionError, match=message):
        gf.ufunc(signatures=gf.float_signatures(1), reference=np.exp, name="bench_bad",
                 benchmark=gf.Benchmark(**kwargs))(lambda x: x)


def test_builtin_declarations_give_the_bytes_and_the_cupy_formulas():
    selected = {c.name: c for c in cases.cases(builtin_names())}
    assert selected["gaussian"].nbytes(10, np.float32) == 10 * 4 * 2
    assert selected["hermite_norm"].nbytes(10, np.float64) == 10 * 8 * (1 + 32)
    assert selected["hermite_norm"].args(np.ones(3))[1:] == (32,)
    assert cases.cupy_missing(selected.values()) == []


def test_gpu_suite_plans_from_the_registry_without_cupy():
    plan = bench_gpu.plan(cases.cases(builtin_names()), quick=True)
    assert {case.name for case, *_ in plan} == set(builtin_names())
    assert all(n <= 10**6 for _, _, n, _ in plan)
    full = bench_gpu.plan(cases.cases(["hermite_norm"]))
    assert max(n for _, _, n, _ in full) == 10**7  # 32 orders: the output limit
    if bench_gpu.cp is None:
        assert "CuPy is not installed" in bench_gpu.unavailable()


def test_the_compose_suites_run_when_named_and_give_one_row_per_kernel_and_target(tmp_path):
    assert "compose" not in parse([]).suites and "compose" not in parse(["--suite", "all"]).suites
    before = {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}
    command = [sys.executable, "-m", "benchmarks", "--suite", "compose", "--suite", "compose_gpu", "--quick",
               "--sizes", "1e4", "--dtypes", "float64", "--json", str(tmp_path / "run.json")]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} == before  # --quick saves nothing
    result = json.loads((tmp_path / "run.json").read_text())
    found = {(r["suite"], r["kernel"], r["target"]) for r in result["rows"]}
    kernels = ("bench_composed", "bench_by_hand")
    expected = {("compose", k, t) for k in kernels for t in ("cpu", "parallel")}
    if bench_gpu.unavailable() is None:
        expected |= {("compose gpu", k, "cuda") for k in kernels}
    else:
        assert result["skipped"]["compose_gpu"] == bench_gpu.unavailable()
    assert found == expected
    assert all(r["median_s"] > 0 and set(ROW) <= set(r) for r in result["rows"])
    assert "compose cpu float64 n=1e+04 composed/hand" in result["meta"]


def test_plots_come_from_the_committed_results_alone(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    written = [p.name for name, title in (*figures.CPU_MACHINES, *figures.GPU_MACHINES)
               for p in figures.draw(name, title, tmp_path)]
    assert written == [p.name for p in figures.shown_images(figures.render())]
    assert "gpu-h100-time.png" in written and "cpu-16core-overhead.png" in written
