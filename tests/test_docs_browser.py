"""The built site in a real browser: headless Chromium, driven by Playwright.

Every page loads with no console error, no failed request and no request outside the site
(the site works offline: MathJax ships with it), every image loads, every formula is rendered
by MathJax, and no code block is wider than its box (a desktop window, 1280 pixels wide).

CI installs Debian's ``chromium-headless-shell`` and requires the check
(``GPUFUNCS_BROWSER_REQUIRED=1``, see ``.ci/run``); elsewhere it runs where a Chromium is found
(``GPUFUNCS_CHROMIUM`` names one) and is skipped, saying so, where none is.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from docsite import build_site

#: Executables tried in this order (Debian's headless shell first: the smallest).
CHROMIUMS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome-stable",
             "google-chrome")

#: What a page shows wrong, from inside it, once loaded and typeset.
PAGE_PROBLEMS = """() => {
  const found = [];
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) found.push("image not loaded: " + img.getAttribute("src"));
  }
  for (const code of document.querySelectorAll("pre > code")) {
    const over = code.scrollWidth - code.clientWidth;
    if (over > 1) {
      const line = code.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "");
      found.push(`code block ${over}px wider than its box: ${line.trim().slice(0, 70)}`);
    }
  }
  for (const math of document.querySelectorAll(".arithmatex")) {
    const tex = math.textContent.slice(0, 50);
    if (!math.querySelector("mjx-container")) found.push("formula not rendered: " + tex);
    else if (math.querySelector("mjx-merror")) found.push("formula with a TeX error: " + tex);
  }
  return found;
}"""


def _chromium() -> str | None:
    named = os.environ.get("GPUFUNCS_CHROMIUM")
    if named:
        return named
    return next((path for path in map(shutil.which, CHROMIUMS) if path), None)


def _browser_or_skip() -> tuple[object, str]:
    """Playwright's sync API and a Chromium executable; a skip (or, where CI requires the
    check, a failure) naming what is missing."""
    required = os.environ.get("GPUFUNCS_BROWSER_REQUIRED") == "1"
    try:
        from playwright import sync_api
    except ImportError:
        why = "playwright is not installed (python -m pip install playwright)"
        pytest.fail(why) if required else pytest.skip(why)
    chromium = _chromium()
    if chromium is None:
        why = ("no Chromium executable found (Debian: apt-get install chromium-headless-shell; or set "
               "GPUFUNCS_CHROMIUM to one)")
        pytest.fail(why) if required else pytest.skip(why)
    return sync_api, chromium


@pytest.fixture(scope="module")
def browser() -> tuple[object, str]:
    """Playwright's sync API and the Chromium it drives (checked before the site is built)."""
    return _browser_or_skip()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A web root with the site built at the path of its ``site_url`` (``/gpufuncs/``), as it
    is deployed: the 404 page links its assets from there."""
    return tmp_path_factory.mktemp("browser")


@pytest.fixture(scope="module")
def site(root: Path) -> Path:
    built = root / "gpufuncs"
    build_site(built)
    return built


@pytest.fixture(scope="module")
def served(root: Path, site: Path) -> Iterator[str]:
    """The site over HTTP on the loopback interface (as a reader's browser gets it: the
    search index and MathJax's fonts are fetched, which ``file://`` forbids)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{site.name}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_every_page_renders_in_a_browser_offline(browser: tuple[object, str], site: Path,
                                                 served: str) -> None:
    sync_api, chromium = browser
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    assert "index.html" in pages and "performance/index.html" in pages and len(pages) >= 12, pages
    problems: list[str] = []
    with sync_api.sync_playwright() as playwright:  # type: ignore[attr-defined]
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        current = [""]

        def note(what: str) -> None:
            problems.append(f"{current[0]}: {what}")

        def route(handle: object) -> None:  # anything from outside the site is a problem
            url = handle.request.url  # type: ignore[attr-defined]
            if url.startswith(served):
                handle.continue_()  # type: ignore[attr-defined]
            else:
                note(f"request outside the site: {url}")
                handle.abort()  # type: ignore[attr-defined]

        page.route("**/*", route)
        page.on("console", lambda message: message.type == "error" and note(f"console error: {message.text}"))
        page.on("pageerror", lambda error: note(f"page error: {error}"))
        page.on("requestfailed", lambda request: request.url.startswith(served)
                and note(f"request failed: {request.url} ({request.failure})"))
        page.on("response", lambda response: response.status >= 400
                and note(f"HTTP {response.status}: {response.url}"))
        for path in pages:
            current[0] = path
            # Until the network is idle: the search's worker script, still loading at "load",
            # was aborted by the next page's navigation and reported as a failed request.
            response = page.goto(served + path, wait_until="networkidle")
            assert response is not None and response.ok, (path, response and response.status)
            page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
            for found in page.evaluate(PAGE_PROBLEMS):
                note(found)
        browser.close()
    assert not problems, "\n".join(problems)
