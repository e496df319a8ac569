"""The documentation pages as a reader sees them: code that fits its box, an API reference that
lists the public names, math that renders offline. Fast: they read the markdown, the docstrings,
``mkdocs.yml`` and ``gpufuncs.__all__``; nothing is built (``tests/test_docs.py`` builds the site
and runs the examples).
"""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from test_docs import _fences  # the same reading of fenced blocks as the example runner

import gpufuncs as gf

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

#: The characters a fenced code block of the site shows without scrolling sideways.
#:
#: Material for MkDocs sets everything in rem: the root font is 125% (20px; 137.5% and 150% on
#: very wide screens, which scale every length below alike, so the count does not change). With
#: both sidebars shown (the default layout, from 76.25em wide) the content column is the grid's
#: 61rem less two sidebars of 12.1rem and two margins of 1.2rem: 34.4rem. Code is set at 0.85 of
#: the 0.8rem body text, 0.68rem, in Roboto Mono (falling back to SFMono, Consolas, Menlo or
#: monospace), whose every glyph is 0.6em wide: 0.408rem a character; the block's padding is
#: 1.176em of that size on each side, 1.6rem in all. That leaves 32.8rem: 80.4 characters. (The
#: 88 that is often quoted holds only without the table-of-contents sidebar.) Between 60em and
#: 76.25em the left sidebar folds away and the column is wider; at 60em it is 80 again.
CODE_WIDTH = 80


def _code_lines(page: Path) -> list[tuple[int, int, str]]:
    """``(line number, width allowed, text)`` of every line inside a fenced block of ``page``.

    A fence indented by k columns sits in a list item or an admonition, whose own indentation
    on the site takes about the width of those k characters."""
    text = page.read_text()
    lines = text.splitlines()
    found = []
    for start, end, _, _ in _fences(text):
        indent = len(lines[start]) - len(lines[start].lstrip())
        found += [(n + 1, CODE_WIDTH - indent, lines[n][indent:]) for n in range(start + 1, end)]
    return found


def test_every_code_line_fits_the_code_box():
    wide = [f"{page.relative_to(ROOT)}:{n}: {len(line)} > {width}: {line}"
            for page in PAGES for n, width, line in _code_lines(page) if len(line) > width]
    assert not wide, f"code lines wider than the site's code box ({CODE_WIDTH}):\n" + "\n".join(wide)


def _docstrings(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    nodes = [tree, *(n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [(getattr(n, "name", "<module>"), doc) for n in nodes
            if (doc := ast.get_docstring(n)) is not None]


def test_docstring_examples_fit_the_code_box():
    """The ``>>>`` examples of the docstrings, which the API reference shows in the same box."""
    wide = []
    for path in sorted((ROOT / "gpufuncs").rglob("*.py")):
        for name, doc in _docstrings(path):
            examples = [line for line in doc.splitlines() if line.lstrip()[:4] in (">>> ", "... ")]
            block = textwrap.dedent("\n".join(examples))
            wide += [f"{path.relative_to(ROOT)} ({name}): {line}"
                     for line in block.splitlines() if len(line) > CODE_WIDTH]
    assert not wide, "docstring examples wider than the code box:\n" + "\n".join(wide)


def test_the_width_check_reads_indented_fences(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\n" + "x" * 80 + "\n```\n- item\n\n"
                    "    ```text\n    " + "y" * 77 + "\n    ```\n")
    assert [(n, w, len(line)) for n, w, line in _code_lines(page)] == [(2, 80, 80), (7, 76, 77)]


# -- the API reference -------------------------------------------------------------------------------
API = DOCS / "api.md"
_ENTRY = re.compile(r"^:::\s+([\w.]+)\s*$", re.MULTILINE)


def _resolve(identifier: str) -> Any:
    """The object an mkdocstrings identifier names: the longest importable module, then
    attributes."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(identifier)


def api_entries(text: str) -> dict[str, Any]:
    """``{identifier: object}`` of every ``::: identifier`` entry of the API page."""
    return {identifier: _resolve(identifier) for identifier in _ENTRY.findall(text)}


def documented_names(text: str) -> set[str]:
    """The names of ``gpufuncs`` that the API page documents: an entry whose object is
    ``gpufuncs.<name>`` itself, and the built-in kernels where the page has the marker that
    ``docs/hooks.py`` fills with their entries when the site is built."""
    import hooks  # docs/hooks.py, on the path below

    exported = {name: getattr(gf, name) for name in gf.__all__}
    names = {identifier.rsplit(".", 1)[-1] for identifier, obj in api_entries(text).items()
             if identifier.rsplit(".", 1)[-1] in exported
             and obj is exported[identifier.rsplit(".", 1)[-1]]}
    if hooks.MARKER in text:
        names |= set(re.findall(r"^### `(\w+)`$", hooks.builtin_kernels(), re.MULTILINE))
    return names


@pytest.fixture(autouse=True)
def _docs_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))


def test_the_api_page_documents_every_public_name():
    missing = set(gf.__all__) - documented_names(API.read_text())
    assert not missing, f"in gpufuncs.__all__ but not on docs/api.md: {sorted(missing)}"


def test_the_api_page_documents_nothing_outside_the_public_names():
    """Every entry is a name of ``gpufuncs.__all__``, of ``gpufuncs.testing.__all__`` (the
    module, and its helpers), or the class of a public object (``Registry``, of ``gf.registry``)."""
    import gpufuncs.testing as testing

    public_types = {type(getattr(gf, name)) for name in gf.__all__}
    stray = []
    for identifier, obj in api_entries(API.read_text()).items():
        module, _, name = identifier.rpartition(".")
        if identifier == "gpufuncs.testing" or (module == "gpufuncs.testing" and name in testing.__all__):
            continue
        if (name in gf.__all__ and obj is getattr(gf, name)) or obj in public_types:
            continue
        stray.append(identifier)
    assert not stray, f"on docs/api.md but not public (gpufuncs.__all__): {stray}"


def test_the_api_checks_see_a_missing_and_a_stray_name():
    text = API.read_text()
    without = text.replace("::: gpufuncs.muladd\n", "")
    assert "muladd" in documented_names(text) and "muladd" not in documented_names(without)
    assert {"gaussian", "hermite_norm"} <= documented_names(text)
    assert "gaussian" not in documented_names(text.replace("<!-- gpufuncs:builtin-kernels -->", ""))
    assert "get_kernel" not in documented_names(text + "\n::: gpufuncs.registry.get_kernel\n")


# -- math ----------------------------------------------------------------------------------------------
def test_math_renders_without_a_network():
    """The site's scripts are its own files (MathJax and its fonts ship in docs/javascripts/), so
    the math renders offline; no script comes from another host."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    scripts = config.get("extra_javascript", [])
    remote = [s for s in scripts if "://" in str(s) or str(s).startswith("//")]
    assert not remote, f"scripts loaded from the network: {remote}"
    assert "javascripts/mathjax/tex-chtml.js" in scripts
    for script in scripts:
        assert (DOCS / script).is_file(), script
    fonts = DOCS / "javascripts" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert (fonts / "MathJax_Main-Regular.woff").is_file() and (fonts / "MathJax_Math-Italic.woff").is_file()
    assert "output/chtml/fonts/woff-v2" in (DOCS / "javascripts" / "mathjax" / "tex-chtml.js").read_text()
