"""The documentation: the site builds strictly, every example runs, every figure is generated.

**Examples.** Every fenced ```` ```python ```` block of ``README.md`` and ``docs/*.md`` runs, in
page order, one namespace per page, in a fresh interpreter whose working directory is a
temporary folder: no ``conftest.py`` of this repository and no Hypothesis profile of ours (the
variables that make Hypothesis load its own CI profile are removed too), so an example must set
whatever it needs, as it would in a user's project. Each block is one test item, so a failure
names its page and line. A block

- followed directly by a ```` ```text ```` block must print that text (compared as doctest
  does, with ``...`` matching anything and whitespace normalized);
- that defines ``test_*`` functions has them called afterwards, as pytest would;
- preceded by ``<!-- raises: AssertionError -->`` must raise that exception; a ```` ```text ````
  block after it shows the exception as ``Type: message`` followed by its notes (Hypothesis
  adds the failing call as a note);
- preceded by ``<!-- not run: REASON -->`` is not run, and says why on the page;
- preceded by ``<!-- cuda -->`` needs a GPU: it carries the ``cuda`` marker (skipped, saying why,
  without one: see ``tests/conftest.py``), and runs after the page's other blocks in a
  separate interpreter on a GPU machine;
- preceded by ``<!-- requires: cupy, torch -->`` (or ``<!-- cuda; requires: cupy -->``) is
  skipped, saying so, where one of those modules is not installed.

The ``>>>`` examples of the docstrings, which the API reference shows, run as doctests.

**Figures.** No time, rate or speed-up is typed into a page by hand: the performance page and
the landing page's figures are generated from ``benchmarks/results/``
(``tests/test_docs_figures.py``), the Hermite layout
figure from the library's layout code (``docs/hermite_layout.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from docsite import build_site

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Generated pages: their figures are checked against their sources elsewhere.
GENERATED = {ROOT / "docs" / "performance.md"}

#: Environment variables of this repository's test setup, or that make Hypothesis load its CI
#: profile (``hypothesis._settings._CI_VARS``); a user's project has none of them.
NOT_A_USERS = ("HYPOTHESIS_PROFILE", "NUMBA_ENABLE_CUDASIM", "CI", "__TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI",
               "TF_BUILD", "bamboo.buildKey", "BUILDKITE", "CIRCLECI", "CIRRUS_CI", "CODEBUILD_BUILD_ID",
               "GITHUB_ACTIONS", "GITLAB_CI", "HEROKU_TEST_RUN_ID", "TEAMCITY_VERSION")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[\w+-]*)[^\n]*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<body>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    code: str
    output: str | None  # the ```text block right after it: what it must print
    cuda: bool
    requires: tuple[str, ...]
    not_run: str | None  # the reason given
    raises: str | None = None  # the name of the exception it must raise

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _fences(text: str) -> list[tuple[int, int, str, str]]:
    """``(first line index, last line index, info, body)`` of every fenced block."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        end = next((j for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(fence) and not lines[j].strip().strip(fence[0])), None)
        if end is None:
            raise ValueError(f"unclosed code fence at line {i + 1}")
        body = "\n".join(line[indent:] for line in lines[i + 1:end])
        found.append((i, end, m["info"].lower(), body + "\n"))
        i = end + 1
    return found


def _marker(lines: list[str], fence_line: int) -> dict[str, str]:
    """The options of the ``<!-- ... -->`` line right before a fence (blank lines between
    are allowed): ``{"cuda": "", "requires": "cupy, torch", "not run": "reason"}``."""
    j = fence_line - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    m = _MARKER.match(lines[j]) if j >= 0 else None
    if not m:
        return {}
    options = {}
    for part in m["body"].split(";"):
        key, _, value = part.partition(":")
        options[key.strip().lower()] = value.strip()
    return options


def blocks(path: Path) -> list[Block]:
    """The Python examples of one page, in order."""
    text = path.read_text()
    lines = text.splitlines()
    fences = _fences(text)
    found = []
    for n, (start, end, info, body) in enumerate(fences):
        if info not in ("python", "py"):
            continue
        after = fences[n + 1] if n + 1 < len(fences) else None
        output = None
        if after and after[2] == "text" and not "".join(lines[end + 1:after[0]]).strip():
            output = after[3]
        options = _marker(lines, start)
        requires = tuple(m.strip() for m in options.get("requires", "").split(",") if m.strip())
        found.append(Block(str(path.relative_to(ROOT)), start + 1, body, output, "cuda" in options,
                           requires, options.get("not run"), options.get("raises")))
    return found


ALL = [b for page in PAGES for b in blocks(page)]

# -- running a page -------------------------------------------------------------------------------
RUNNER = r'''
"""Run one page's examples in order in one namespace; write one result per block."""
import contextlib, doctest, importlib.util, io, json, sys, time, traceback

CHECKER, FLAGS = doctest.OutputChecker(), doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run(block, namespace, stdout):
    """Run one block, printing into ``stdout`` (with the exception it must raise, shown)."""
    before = set(namespace)
    with contextlib.redirect_stdout(stdout):
        try:
            exec(compile(block["code"], block["file"], "exec"), namespace)
            for name in [n for n in namespace if n not in before and n.startswith("test_")]:
                if callable(namespace[name]):
                    namespace[name]()  # as pytest would
        except Exception as exc:
            if type(exc).__name__ != block["raises"]:
                raise
            print(f"{type(exc).__name__}: {exc}", *getattr(exc, "__notes__", ()), sep="\n")
        else:
            if block["raises"]:
                raise AssertionError(f"the page says it raises {block['raises']}; it did not")
    got = stdout.getvalue()
    if block["output"] is not None and not CHECKER.check_output(block["output"], got, FLAGS):
        raise AssertionError(f"the block printed\n{got}\nbut the page shows\n{block['output']}")


def main(blocks, results_path):
    namespace, results, failed = {"__name__": "__main__"}, [], None
    for block in blocks:
        missing = [m for m in block["requires"] if importlib.util.find_spec(m) is None]
        if failed is not None:
            results.append({"status": "not reached", "detail": f"an earlier block failed: {failed}"})
        elif missing:
            results.append({"status": "skipped", "detail": f"needs {', '.join(missing)}, not installed"})
        else:
            stdout, start = io.StringIO(), time.perf_counter()
            try:
                run(block, namespace, stdout)
                results.append({"status": "ok", "detail": stdout.getvalue(),
                                "seconds": round(time.perf_counter() - start, 2)})
            except BaseException:
                failed = block["id"]
                results.append({"status": "failed", "detail": stdout.getvalue() + traceback.format_exc()})
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":  # not when a spawned process (a Dask worker) imports this file
    with open(sys.argv[1]) as f:
        main(json.load(f), sys.argv[2])
'''


def user_environment() -> dict[str, str]:
    """This process's environment as a user's project would have it (see ``NOT_A_USERS``); this
    checkout's gpufuncs comes first on the path, as in the test suite."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_A_USERS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_page(page: str, cuda: bool, workdir: Path) -> dict[str, dict[str, str]]:
    """Run the blocks of ``page`` (without or with its cuda blocks) in a fresh interpreter in
    ``workdir``; ``{block id: {"status", "detail"}}``."""
    chosen = [b for b in ALL if b.page == page and b.not_run is None and (cuda or not b.cuda)]
    workdir.mkdir(parents=True, exist_ok=True)
    payload = []
    for b in chosen:
        # Each block is a file, so tracebacks show its lines and inspect/Numba find its source.
        file = workdir / f"{Path(b.page).stem}_{b.line}.py"
        file.write_text(b.code)
        payload.append({**asdict(b), "id": b.id, "file": str(file)})
    (workdir / "blocks.json").write_text(json.dumps(payload))
    (workdir / "runner.py").write_text(RUNNER)
    proc = subprocess.run([sys.executable, "runner.py", "blocks.json", "results.json"], cwd=workdir,
                          env=user_environment(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not (workdir / "results.json").exists():
        raise AssertionError(f"the example runner for {page} crashed:\n{proc.stdout}\n{proc.stderr}")
    results = json.loads((workdir / "results.json").read_text())
    return {b.id: r for b, r in zip(chosen, results)}


@pytest.fixture(scope="session")
def page_runs(request, tmp_path_factory) -> Iterator[dict[tuple[str, bool], Future]]:
    """The page runs this session's example items need, started together on a few processes
    (compiling kernels is single-threaded; a page's blocks stay in order in one process).
    Items skipped already (cuda ones without a GPU) start nothing."""
    workdir = tmp_path_factory.mktemp("docs-examples")
    needed = {}
    for item in request.session.items:
        block = getattr(getattr(item, "callspec", None), "params", {}).get("block")
        if isinstance(block, Block) and not any(m.name == "skip" for m in item.iter_markers()):
            needed.setdefault((block.page, block.cuda), None)
    cost = {key: sum(len(b.code) for b in ALL if b.page == key[0]) for key in needed}  # a proxy
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        runs = {key: pool.submit(run_page, key[0], key[1], workdir / f"{Path(key[0]).stem}-{key[1]}")
                for key in sorted(needed, key=cost.get, reverse=True)}
        yield runs
        for future in runs.values():
            future.cancel()


def _params(cuda: bool) -> list:
    return [pytest.param(b, id=b.id, marks=[pytest.mark.cuda] if cuda else [])
            for b in ALL if b.cuda == cuda and b.not_run is None]


def _check(block: Block, runs: dict[tuple[str, bool], Future]) -> None:
    result = runs[block.page, block.cuda].result()[block.id]
    if result["status"] == "skipped":
        pytest.skip(f"{block.id}: {result['detail']}")
    assert result["status"] == "ok", f"{block.id} {result['status']}:\n{result['detail']}"


@pytest.mark.parametrize("block", _params(cuda=False))
@pytest.mark.slow
def test_example_runs(block: Block, page_runs) -> None:
    _check(block, page_runs)


@pytest.mark.parametrize("block", _params(cuda=True))
def test_cuda_example_runs(block: Block, page_runs) -> None:
    _check(block, page_runs)


def test_every_example_that_is_not_run_says_why():
    for block in ALL:
        assert block.not_run != "", f"{block.id}: <!-- not run: REASON --> needs its reason"
    assert len(ALL) >= 20 and {b.page for b in ALL} >= {"README.md", "docs/getting-started.md"}


def test_every_shown_output_is_checked():
    """A ```text block is the output of the Python block right above it; anywhere else it would
    be output that no test compares."""
    for page in PAGES:
        text = page.read_text()
        shown = [start + 1 for start, _, info, _ in _fences(text) if info == "text"]
        checked = sum(b.output is not None for b in blocks(page))
        assert len(shown) == checked, (
            f"{page.relative_to(ROOT)}: ```text blocks at lines {shown} must follow a ```python block "
            "directly (only blank lines between), whose output they show")


def test_the_collector_reads_markers_outputs_and_indented_fences(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent("""\
        ```python
        print("one")
        ```
        ```text
        one
        ```
        <!-- cuda; requires: cupy, torch -->

        ```python
        x = 1
        ```

        <!-- not run: needs a cluster -->
        ```py
        connect()
        ```
        - a list item:

          ```python
          y = 2
          ```
        ```bash
        ls
        ```
        """))
    found = blocks(page)
    assert [(b.line, b.code, b.output, b.cuda, b.requires, b.not_run) for b in found] == [
        (1, 'print("one")\n', "one\n", False, (), None),
        (9, "x = 1\n", None, True, ("cupy", "torch"), None),
        (14, "connect()\n", None, False, (), "needs a cluster"),
        (19, "y = 2\n", None, False, (), None),
    ]


def test_a_failing_block_fails_its_item_and_stops_the_page(tmp_path, monkeypatch):
    """The runner itself: output compared, test_ functions called, later blocks not reached,
    missing modules skipped, and no Hypothesis profile of this repository in effect."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent("""\
        ```python
        from hypothesis import settings
        print(settings.default.deadline.total_seconds(), settings.get_current_profile_name())
        ```
        ```text
        0.2 default
        ```
        <!-- requires: no_such_module_here -->
        ```python
        import no_such_module_here
        ```
        <!-- raises: KeyError -->
        ```python
        print("before"); {}["key"]
        ```
        ```text
        before
        KeyError: 'key'
        ```
        ```python
        def test_something():
            raise ValueError("called like pytest would")
        ```
        ```python
        print("never")
        ```
        """))
    monkeypatch.setattr(sys.modules[__name__], "ALL", blocks(page))
    results = run_page("page.md", False, tmp_path / "run")
    assert [r["status"] for r in results.values()] == ["ok", "skipped", "ok", "failed", "not reached"]
    assert "ValueError: called like pytest would" in results["page.md:20"]["detail"]
    page.write_text(page.read_text().replace("0.2 default", "1.0 default"))
    monkeypatch.setattr(sys.modules[__name__], "ALL", blocks(page))
    results = run_page("page.md", False, tmp_path / "run2")
    assert results["page.md:1"]["status"] == "failed"
    assert "but the page shows\n1.0 default" in results["page.md:1"]["detail"]


@pytest.mark.slow
def test_docstring_examples_of_the_api_reference_run(tmp_path):
    """The ``>>>`` examples that the API reference shows from the docstrings, as doctests, in a
    fresh interpreter outside the repository."""
    package = ROOT / "gpufuncs"
    modules = sorted(".".join(("gpufuncs", *path.relative_to(package).with_suffix("").parts))
                     for path in package.rglob("*.py") if ">>>" in path.read_text())
    assert "gpufuncs.registry" in modules, modules
    code = ("import doctest, importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    result = doctest.testmod(importlib.import_module(name))\n"
            "    print(name, result.attempted, result.failed)\n")
    proc = subprocess.run([sys.executable, "-c", code, *modules], cwd=tmp_path, env=user_environment(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    counts = {name: (int(tried), int(failed)) for name, tried, failed in lines}
    assert set(counts) == set(modules) and counts["gpufuncs.registry"][0] > 0, proc.stdout
    assert all(failed == 0 for _, failed in counts.values()), proc.stdout


# -- the site ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: every page in the nav, every link and anchor resolves, every
    docstring of the API reference parses; the generated parts are there."""
    site = tmp_path / "site"
    build_site(site)
    api = (site / "api" / "index.html").read_text()
    import gpufuncs as gf

    builtin = [n for n in gf.names() if gf.registry[n].spec.pyfunc.__module__.startswith("gpufuncs.kernels.")]
    assert {"gaussian", "hermite_norm"} <= set(builtin)
    for name in builtin:  # every built-in kernel has its generated entry (other tests register more)
        assert f'id="{name}"' in api, name
    for documented in ("gpufuncs.testing.check_kernel", "gpufuncs.set_auto_parallel_min_size",
                       "gpufuncs.CudaUnavailableError", "gpufuncs.Kernel"):
        assert f'id="{documented}"' in api, documented
    assert ":func:`" not in api and ":class:`" not in api  # Sphinx roles were rewritten
    assert (site / "images" / "hermite-layout.svg").exists()
    assert "hermite-layout.svg" in (site / "hermite" / "index.html").read_text()


@pytest.mark.slow
def test_hermite_layout_figure_is_what_the_layout_code_gives():
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "hermite_layout.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + "\n(run: python docs/hermite_layout.py)"


#: A measured quantity typed into prose: a time, a rate or a speed-up.
TYPED_FIGURE = re.compile(r"\d(?:[\d,.]*\d)?\s*(?:µs|us|ns|ms|[KMGT]B/s|[KMGT]iB/s|x faster|x slower"
                          r"|times (?:faster|slower)|x (?:NumPy|CuPy|numpy|cupy|a copy))\b|\d\.\d+x\b")


def _generated_parts(text: str) -> list[tuple[int, int]]:
    """``(first, last)`` line indices of the parts of a page that ``benchmarks/figures.py``
    writes between its ``HEADLINE`` markers (the landing page's figures)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from figures import HEADLINE
    finally:
        sys.path.pop(0)
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == HEADLINE[0]]
    return [(i, next(j for j in range(i, len(lines)) if lines[j].strip() == HEADLINE[1]))
            for i in starts]


def test_no_figure_is_typed_by_hand():
    """Times, rates and speed-ups appear only in generated pages and generated parts of pages
    (code blocks may compute them)."""
    typed = []
    for page in PAGES:
        if page in GENERATED:
            continue
        text = page.read_text()
        for start, end in [(s, e) for s, e, _, _ in _fences(text)] + _generated_parts(text):
            lines = text.splitlines()  # blank out code blocks and generated parts, keep line numbers
            text = "\n".join(lines[:start] + [""] * (end - start + 1) + lines[end + 1:])
        typed += [f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
                  for n, line in enumerate(text.splitlines(), 1) if TYPED_FIGURE.search(line)]
    assert not typed, "figures typed by hand (generate them from benchmarks/results/):\n" + "\n".join(typed)


def test_the_typed_figure_pattern_catches_what_it_should():
    for typed in ("takes 23.3 us per call", "1.63x a copy", "runs at 2.8 TB/s", "3 x faster",
                  "about 10 ms", "1.8-1.95x on 2 cores"):
        assert TYPED_FIGURE.search(typed), typed
    for fine in ("4,096 points", "float32", "32 MiB chunks", "2**64", "`x` and `x0`", "3 ms_per"):
        assert not TYPED_FIGURE.search(fine), fine
