"""``python -m benchmarks``: what it prints (the table, the targets), ``--compare``, where it
writes (nothing unless ``--save``), missing optional packages, its quick run, the kernels'
benchmark declarations, the GPU suite's code path without CuPy, and the plots from the committed
result files.

The tests that run benchmarks, start processes or draw the committed plots are marked ``slow``
(``.ci/run`` runs them after the quick suite); the others feed the command made-up results.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.kernels import builtin_names

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))  # the benchmarks package lives beside gpufuncs, not in it

import benchmarks.__main__ as command  # noqa: E402
from benchmarks import bench_compose, bench_cpu, bench_gpu, cases, compare, figures, harness, report, rows  # noqa: E402
from benchmarks.__main__ import parse  # noqa: E402

slow = pytest.mark.slow  # subprocesses, threads and real timings: run by .ci/run after the quick suite

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


@slow
def test_quick_run_prints_the_table_and_the_targets(quick_run):
    out = quick_run[2].stdout
    assert "cpu: median time per call (data host, call new); /anchor: gpufuncs' time over the anchor's" in out
    header = next(line for line in out.splitlines() if line.startswith("kernel "))
    assert header.split() == ["kernel", "dtype", "n", "target", "gpufuncs", "numpy", "/numpy", "scipy",
                              "/scipy", "numba", "/numba", "copy", "/copy"]
    assert "Targets: a target is the goal one figure of this run is held to" in out
    verdicts = [line.split() for line in out.splitlines() if line.startswith(("  MET ", "  NOT MET "))]
    assert ["exp", "float64", "n=1e6", "auto/numpy"] in [v[-8:-4] for v in verdicts], verdicts
    assert all(v[-3:-1] == ["target", "<="] for v in verdicts if "auto/numpy" in v), verdicts
    assert out.rstrip().splitlines()[-4].startswith("not saved (--save writes")


@slow
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


@slow
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


@slow
def test_quick_run_tables_keep_the_results_files_columns(quick_run):
    tables = quick_run[0]["tables"]
    committed = json.loads((RESULTS / "cpu.json").read_text())["rows"][0]
    assert set(committed) <= set(tables["cpu"][0])
    committed = json.loads((RESULTS / "cpu_overhead.json").read_text())["rows"][0]
    assert set(committed) <= set(tables["cpu_overhead"][0])


@slow
def test_quick_run_plots(quick_run):
    plots = quick_run[1]
    assert sorted(p.name for p in plots.iterdir()) == ["cpu-overhead.png", "cpu-time.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots.iterdir())


@slow
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


@slow
def test_a_kernel_without_a_declaration_stops_the_benchmarks(restore_registry, monkeypatch):
    monkeypatch.setattr(gf, "names", ALL_NAMES)
    gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative, name="bench_undeclared")(lambda x: -x)
    assert float(gf.registry["bench_undeclared"](2.0)) == -2.0  # the library does not need one
    with pytest.raises(cases.MissingBenchmarkError, match="bench_undeclared"):
        cases.cases()
    assert [c.name for c in cases.cases(builtin_names())] == builtin_names()


@slow
def test_the_command_names_an_undeclared_kernel():
    code = ("import sys, numpy as np, gpufuncs as gf\n"
            "gf.ufunc(signatures=gf.float_signatures(1), reference=np.negative,\n"
            "         name='nobench')(lambda x: -x)\n"
            "from benchmarks.__main__ import main\n"
            "sys.exit(main(['--quick', '--suite', 'overhead']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "nobench" in proc.stderr, proc.stderr[-2000:]


@slow
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"expressions": {}}, "at least one"),
    ({"expressions": {"numpy": np.exp}, "scalars": (1.0,)}, "1 sample arrays and 1 scalars for 1 inputs"),
    ({"expressions": {"numpy": np.exp}, "sizes": (4,)}, "1 output-only sizes, the layout has 0"),
])
def test_declarations_that_do_not_fit_the_kernel_raise(kwargs, message, restore_registry):
    with pytest.raises(gf.KernelDefinitionError, match=message):
        gf.ufunc(signatures=gf.float_signatures(1), reference=np.exp, name="bench_bad",
                 benchmark=gf.Benchmark(**kwargs))(lambda x: x)


@slow
def test_builtin_declarations_give_the_bytes_and_the_cupy_formulas():
    selected = {c.name: c for c in cases.cases(builtin_names())}
    assert selected["gaussian"].nbytes(10, np.float32) == 10 * 4 * 2
    assert selected["hermite_norm"].nbytes(10, np.float64) == 10 * 8 * (1 + 32)
    assert selected["hermite_norm"].args(np.ones(3))[1:] == (32,)
    assert cases.cupy_missing(selected.values()) == []


@slow
def test_gpu_suite_plans_from_the_registry_without_cupy():
    plan = bench_gpu.plan(cases.cases(builtin_names()), quick=True)
    assert {case.name for case, *_ in plan} == set(builtin_names())
    assert all(n <= 10**6 for _, _, n, _ in plan)
    full = bench_gpu.plan(cases.cases(["hermite_norm"]))
    assert max(n for _, _, n, _ in full) == 10**7  # 32 orders: the output limit
    if bench_gpu.cp is None:
        assert "CuPy is not installed" in bench_gpu.unavailable()


@slow
def test_the_compose_suites_run_when_named_and_give_one_row_per_kernel_and_target(tmp_path):
    assert "compose" not in parse([]).suites and "compose" not in parse(["--suite", "all"]).suites
    before = {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}
    command = [sys.executable, "-m", "benchmarks", "--suite", "compose", "--suite", "compose_gpu", "--quick",
               "--sizes", "1e4", "--dtypes", "float64", "--json", str(tmp_path / "run.json")]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} == before  # no --save: nothing written
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


@slow
def test_plots_come_from_the_committed_results_alone(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    written = [p.name for name, title in (*figures.CPU_MACHINES, *figures.GPU_MACHINES)
               for p in figures.draw(name, title, tmp_path)]
    assert written == [p.name for p in figures.shown_images(figures.render())]
    assert "gpu-h100-time.png" in written and "cpu-16core-overhead.png" in written


# -- what the command prints, compares and writes, fed made-up results (quick) ------------------------

def overhead_table(public: float) -> list[dict]:
    """A made-up overhead table: exp float64, every public call ``public`` µs, the bare call and
    NumPy 1 µs (so every ratio of its rows is ``public``)."""
    return [{"kernel": "exp", "dtype": "float64", "public": public, "public cpu": public,
             "public out=": public, "public where=": public, "bare": 1.0, "bare out=": 1.0, "numpy": 1.0}]


MACHINE = {"processor": "Test CPU", "cores": 2, "date": "2026-01-02T00:00:00+00:00", "git commit": "a" * 40}


def made_up_run(public: float) -> dict:
    """What :func:`benchmarks.__main__.run` returns, for the overhead suite alone."""
    tables = {"cpu_overhead": overhead_table(public)}
    meta = {**MACHINE, "overhead n=10 float64 public/bare (worst)": f"{public:.2f} (<= 1.5) "
            f"{'met' if public <= 1.5 else 'NOT MET'} [exp]", "suites": ["overhead"], "quick": True}
    return {"meta": meta, "skipped": {}, "tables": tables, "rows": rows.long_rows(tables)}


def baseline(directory: Path, public: float) -> Path:
    """A folder of result files as ``--save DIR`` writes them, its overhead ratios ``public``."""
    table = overhead_table(public)
    harness.save_results("cpu_overhead", table, list(table[0]), MACHINE, directory)
    return directory


#: The registry's names, every kernel's (the tests below see the built-in ones only).
ALL_NAMES = gf.names


@pytest.fixture(autouse=True)
def only_the_built_in_kernels(monkeypatch):
    """Test modules run in the same process (pytest-xdist) register kernels of their own, which
    the command refuses by default (they declare no benchmark): these tests see the built-in
    kernels only, whatever ran before them."""
    built_in = [name for name in gf.names() if _module_of(name).startswith("gpufuncs.kernels.")]
    monkeypatch.setattr(gf, "names", lambda: list(built_in))


def _module_of(name: str) -> str:
    try:
        return gf.registry[name].spec.pyfunc.__module__
    except KeyError:  # a short name that two kernels share: none of the built-in ones
        return ""


@pytest.fixture
def fake_run(monkeypatch):
    """``python -m benchmarks`` whose run returns the made-up results of ``public`` µs (set
    ``fake_run.public``), so that nothing is timed."""
    class Fake:
        public = 2.0

    monkeypatch.setattr(command, "run", lambda opts, selected=None: made_up_run(Fake.public))
    return Fake


def results_files() -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}


def test_times_and_sizes_are_written_as_people_read_them():
    micro = "µs" if report._can_write("µ") else "us"
    assert [report.seconds(t) for t in (812e-9, 1.2149e-6, 999.96e-9, 15.34e-3, 2.049, None)] == [
        "812 ns", f"1.21 {micro}", f"1.00 {micro}", "15.3 ms", "2.05 s", "-"]
    assert [report.size(n) for n in (10, 999, 10**4, 3 * 10**5, 10**8)] == ["10", "999", "1e4", "3e5", "1e8"]
    assert [report.ratio(r) for r in (0.8734, 26.05, 724.01, None)] == ["0.87x", "26.1x", "724x", "-"]
    numbers = [report.number(v) for v in (0.04081, 0.9996, 5.561, 55580.4)]
    assert numbers == ["0.0408", "1.00", "5.56", "55580"]


def test_the_table_has_a_line_per_measurement_with_each_anchors_time_and_ratio():
    table = [{"kernel": "exp", "dtype": "float64", "n": 10**6, "cpu": 900.0, "parallel": 500.0, "auto": 450.0,
              "numpy": 1000.0, "numba": 1800.0, "copy": 300.0}]
    lines = report.table("cpu", rows.cpu_rows(table), "median_s")
    micro = "µs" if report._can_write("µ") else "us"
    assert lines[0].startswith("cpu: median time per call (data host, call new); /anchor: gpufuncs' time")
    assert lines[1].split() == ["kernel", "dtype", "n", "target", "gpufuncs", "numpy", "/numpy", "numba",
                                "/numba", "copy", "/copy"]
    assert [line.split() for line in lines[2:]] == [
        ["exp", "float64", "1e6", target, *f"{ours} {micro}".split(), "1.00", "ms", ratio_numpy,
         "1.80", "ms", ratio_numba, "300", micro, ratio_copy]
        for target, ours, ratio_numpy, ratio_numba, ratio_copy in (
            ("cpu", "900", "0.90x", "0.50x", "3.00x"), ("parallel", "500", "0.50x", "0.28x", "1.67x"),
            ("auto", "450", "0.45x", "0.25x", "1.50x"))]
    assert len({len(line) for line in lines[1:]}) == 1  # aligned: the numbers flush right


def test_the_targets_are_explained_and_each_verdict_has_its_line():
    small = [{"array kind": "cupy", "output": "alloc", "sync_us": 15.47, "x_cupy_sync": 0.898,
              "pipe_us": 10.95, "x_cupy_pipe": 1.6}]
    meta = {"import gpufuncs beyond numba (s)": "0.28 (<= 0.5) met",
            "exp float64 n=1e6 auto/numpy": "12.38 (<= 1.25) NOT MET", "unit": "µs per call",
            "targets": bench_gpu.targets([], small) + bench_compose.gpu_verdicts(
                [{"dtype": "float32", "n": 10**4, "composed/hand sync": 0.998, "composed/hand pipe": 1.0}])}
    lines = report.verdict_lines(meta)
    text = " ".join(lines[1:lines.index(next(line for line in lines if line.startswith("  ")))])
    assert text.startswith("Targets: a target is the goal one figure of this run is held to")
    assert "MET: this run's figure is within the goal; NOT MET: it is not." in text
    assert [line.split() for line in lines if line.startswith("  ")] == [
        ["MET", "import", "gpufuncs", "beyond", "numba", "(s)", "0.28", "target", "<=", "0.5"],
        ["NOT", "MET", "exp", "float64", "n=1e6", "auto/numpy", "12.38", "target", "<=", "1.25"],
        ["MET", "gaussian", "f32", "n=1e3", "cupy", "alloc", "call+sync/CuPy", "0.898", "target", "<=", "1.0",
         "[15.47", "us]"],
        ["NOT", "MET", "gaussian", "f32", "n=1e3", "cupy", "alloc", "pipelined/CuPy", "1.600", "target", "<=",
         "1.5", "[10.95", "us]"],
        ["MET", "compose", "cuda", "float32", "n=1e+04", "composed/hand", "call+sync", "0.998", "target",
         "<=", "1.05"],
        ["MET", "compose", "cuda", "float32", "n=1e+04", "composed/hand", "pipelined", "1.000", "target",
         "<=", "1.05"]]
    assert "--quick run" in " ".join(report.verdict_lines(meta, quick=True))


def test_compare_flags_a_made_up_regression_and_improvement(tmp_path):
    run = made_up_run(2.0)  # every ratio 2.0
    (worse,), _ = compare.load(baseline(tmp_path / "worse", 1.0), ["cpu"])  # they were 1.0
    changes, unmatched = compare.compare(run["rows"], worse)
    assert unmatched == 0 and len(changes) == 6  # 4 calls against numba, the 2 new ones against numpy
    assert {c.flag(0.25) for c in changes} == {"worse"} and {c.factor for c in changes} == {2.0}
    lines = compare.lines(worse, changes, 0, 0.25, run["meta"])
    assert "6 ratios in both: 6 regressions" in " ".join(lines)
    flagged = [line.split() for line in lines if "REGRESSION" in line]
    assert ["REGRESSION", "overhead", "exp", "float64", "10", "auto", "out=", "/numba", "1.00", "2.00",
            "2.00x"] in flagged
    assert len(flagged) == 6
    (better,), _ = compare.load(baseline(tmp_path / "better", 4.0), ["cpu"])
    changes, _ = compare.compare(run["rows"], better)
    assert {c.flag(0.25) for c in changes} == {"better"}
    (close,), _ = compare.load(baseline(tmp_path / "close", 1.8), ["cpu"])  # 2.0 / 1.8: 11%, within 25%
    assert {c.flag(0.25) for c in compare.compare(run["rows"], close)[0]} == {"same"}


def test_compare_exits_1_on_a_regression_only_when_asked(tmp_path, fake_run, capsys):
    worse = str(baseline(tmp_path / "worse", 1.0))
    assert command.main(["--suite", "overhead", "--compare", worse]) == 0
    out = capsys.readouterr().out
    assert "Compared with" in out and "6 regressions" in out and "Threshold 25%" in out
    assert command.main(["--suite", "overhead", "--compare", worse, "--fail-on-regression"]) == 1
    assert "6 regression(s) beyond 25%: exit status 1" in capsys.readouterr().out
    better = str(baseline(tmp_path / "better", 4.0))
    assert command.main(["--suite", "overhead", "--compare", better, "--fail-on-regression"]) == 0
    assert "6 improvements" in capsys.readouterr().out
    # A larger threshold lets the same doubling through.
    assert command.main(["--suite", "overhead", "--compare", worse, "--fail-on-regression",
                         "--threshold", "150"]) == 0
    # Nothing to compare with: said, and exit 2.
    assert command.main(["--suite", "overhead", "--compare", str(tmp_path / "empty")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert command.main(["--suite", "overhead", "--compare", str(tmp_path / "empty")]) == 2
    assert "has no results named cpu" in capsys.readouterr().err


def test_compare_reads_a_json_of_an_earlier_run(tmp_path, fake_run, capsys):
    fake_run.public = 1.0
    assert command.main(["--suite", "overhead", "--json", str(tmp_path / "before.json")]) == 0
    fake_run.public = 2.0
    assert command.main(["--suite", "overhead", "--compare", str(tmp_path / "before.json"),
                         "--fail-on-regression"]) == 1
    assert "6 regressions" in capsys.readouterr().out


def test_a_plain_run_writes_nothing_and_save_writes_where_asked(tmp_path, fake_run, capsys):
    before = results_files()
    assert command.main(["--suite", "overhead"]) == 0
    assert results_files() == before
    out = capsys.readouterr().out
    assert "overhead: median time per call (data host)" in out and out.rstrip().endswith(
        "not saved (--save writes the result files into benchmarks/results/, the committed results; "
        "--save DIR elsewhere)")
    assert command.main(["--suite", "overhead", "--save", str(tmp_path / "kept"), "--name", "mine"]) == 0
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    assert kept == ["mine_overhead.json", "mine_overhead.txt"]
    assert json.loads((tmp_path / "kept" / "mine_overhead.json").read_text())["rows"] == overhead_table(2.0)
    assert results_files() == before


def test_quick_runs_are_not_saved_into_the_committed_results(capsys):
    for flag in ("--quick", "--targets-only"):
        with pytest.raises(SystemExit) as exc:
            parse([flag, "--save"])
        assert exc.value.code == 2
        assert "give --quick and --targets-only runs a folder of their own" in capsys.readouterr().err
    assert parse(["--quick", "--save", "elsewhere"]).save == Path("elsewhere")
    assert parse(["--save"]).save == RESULTS and parse([]).save is None


def test_plot_without_matplotlib_fails_at_once_saying_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: import raises

    def no_run(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(command, "run", no_run)
    start = time.perf_counter()
    assert command.main(["--quick", "--plot", str(tmp_path / "plots")]) == 2
    assert time.perf_counter() - start < 10
    err = capsys.readouterr().err
    assert ('python -m benchmarks: --plot needs matplotlib, which is not installed: '
            'python -m pip install ".[plot]" (the plot extra)') in err
    assert "Traceback" not in err and not (tmp_path / "plots").exists()


def test_missing_packages_are_named_with_how_to_install_them(monkeypatch):
    assert harness.missing_module("json", "-", "-") is None
    assert harness.missing_module("no_such_module_here", "python -m pip install it", "the thing") == (
        "the thing needs no_such_module_here, which is not installed: python -m pip install it")
    monkeypatch.setitem(sys.modules, "scipy", None)
    errors, _ = command.preflight(parse(["--suite", "cpu"]), cases.cases(["gaussian", "exp"]))
    assert errors == ['the cpu suite (the SciPy anchor of gaussian) needs scipy, which is not installed: '
                      'python -m pip install ".[bench]" (the bench extra), or leave them out with --kernels']
    assert command.preflight(parse(["--suite", "cpu"]), cases.cases(["exp"])) == ([], [])
    if bench_gpu.unavailable():
        _, notes = command.preflight(parse(["--suite", "gpu"]), cases.cases(["exp"]))
        assert notes == [f"gpu suite skipped: {bench_gpu.unavailable()}"]


def test_the_bench_scripts_save_only_with_save(tmp_path, capsys):
    before = results_files()
    made = [{"kernel": "exp", "n": 10, "ratio": 1.5}]
    assert harness.host_or_gpu_main("bench_test", "a test", "made_up", lambda: made, lambda: made, []) == 0
    assert results_files() == before and "not saved (--save" in capsys.readouterr().out
    assert harness.host_or_gpu_main("bench_test", "a test", "made_up", lambda: made, lambda: made,
                                    ["--save", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "made_up.json").read_text())["rows"] == made
    assert "saved" in capsys.readouterr().out and results_files() == before


def test_the_cpu_overhead_chart_keeps_its_bars_apart_on_its_log_axis(tmp_path):
    """Limits taken on a linear axis (bottom 0) and then put on a log one gave every bar the
    full height of the plot."""
    plt = pytest.importorskip("matplotlib.pyplot")
    _, tables = rows.load_tables("cpu", RESULTS)
    fig, ax = plt.subplots()
    from benchmarks import plots

    assert plots._cpu_overhead(ax, rows.long_rows(tables))
    heights = [bar.get_height() for bar in ax.patches if math.isfinite(bar.get_height())]
    low, high = ax.get_ylim()
    assert ax.get_yscale() == "log" and 0 < low < min(heights) and max(heights) < high
    assert max(heights) / min(heights) > 100  # NumPy's hermevander against an exp call
    plt.close(fig)



@slow
def test_a_tiny_real_run_flags_a_made_up_regression_and_writes_nothing(tmp_path):
    committed = baseline(tmp_path / "results", 0.01)  # ratios a hundred times better than a real call's
    before = results_files()
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--suite", "overhead", "--kernels",
                           "exp", "--dtypes", "float64", "--compare", str(committed), "--fail-on-regression"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert results_files() == before
    assert "overhead: median time per call (data host)" in proc.stdout
    assert sum(line.startswith("  REGRESSION  overhead  exp") for line in proc.stdout.splitlines()) == 6
    assert "6 regression(s) beyond 25%: exit status 1 (--fail-on-regression)" in proc.stdout


def test_the_fresh_rows_numba_anchor_is_the_kernels_own_body():
    """The fresh-process rows' anchor (``--suite fresh``) is gaussian's body under Numba's
    ``@vectorize``, its ``as_type`` constants as floats: it computes what the kernel does."""
    source = bench_cpu.numba_source("gaussian", "kernel", "@numba.vectorize(SIGNATURES)")
    assert "as_type" not in source and "gpufuncs" not in source
    namespace: dict = {}
    exec(compile(source, "<fresh anchor>", "exec"), namespace)
    x = np.concatenate([np.linspace(-40, 40, 1001), [np.inf, -np.inf, np.nan, 1e308, -1e308]])
    for x0, sigma in ((0.0, 1.0), (0.5, 1.5), (1.0, 1e-300), (0.0, -1.0), (0.0, np.nan)):
        with np.errstate(all="ignore"):
            got, want = namespace["kernel"](x, x0, sigma), gf.gaussian(x, x0, sigma)
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(np.float64).eps, atol=0)
