"""Every figure on docs/performance.md is generated from benchmarks/results/ (none typed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_performance_page_is_what_the_results_give():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "figures.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + "\n(run: python benchmarks/figures.py)"


def test_the_check_notices_a_stale_page(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import figures
    finally:
        sys.path.pop(0)
    stale = tmp_path / "performance.md"
    stale.write_text(figures.render().replace("| exp |", "| exp (typed by hand) |", 1))
    monkeypatch.setattr(figures, "PAGE", stale)
    assert figures.main(["--check"]) == 1
    stale.write_text(figures.render())
    assert figures.main(["--check"]) == 0


def test_the_page_says_where_torch_launches_faster():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import figures
    finally:
        sys.path.pop(0)
    row = {"array kind": "torch", "output": "out=", "pipe_us": 6.86, "torch_exp_pipe_us": 6.14}
    (sentence, blank) = figures._torch_faster([row, {**row, "array kind": "cupy", "pipe_us": 9.0}])
    assert sentence.startswith("torch's own `torch.exp` is still faster per launch: 6.14 us")
    assert "out= 6.86 us" in sentence and "9" not in sentence and blank == ""
    assert figures._torch_faster([{**row, "pipe_us": 6.0}]) == []
