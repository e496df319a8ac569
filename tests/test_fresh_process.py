"""A fresh process whose flat loops are all in the disk cache compiles nothing on its first call
(issue 32: the scalar function was compiled again in every process, 0.18 s of gaussian's first
call on 2 cores, and ``parallel`` compiled it once more to learn whether it can raise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_FIRST_CALLS = """
import json, sys
import numpy as np
from numba.core import event
import gpufuncs as gf

class Compiles(event.Listener):
    def __init__(self):
        self.names = []
    def on_start(self, e):
        self.names.append(str(e.data["dispatcher"]))
    def on_end(self, e):
        pass

x = np.linspace(-3, 3, 10**5)
found = {}
for target in ("cpu", "parallel"):
    listener = Compiles()
    with event.install_listener("numba:compile", listener):
        y = gf.gaussian(x, 0.5, 1.5, target=target)
    assert np.array_equal(y, gf.gaussian(x, 0.5, 1.5, target="cpu"))
    found[target] = listener.names
print(json.dumps(found))
"""


def _first_calls(cache: Path) -> dict[str, list[str]]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", _FIRST_CALLS], env=env, capture_output=True, text=True,
                          check=True, timeout=600)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_process_whose_loops_are_cached_compiles_nothing_on_its_first_calls(tmp_path):
    cold = _first_calls(tmp_path)
    assert any("gaussian" in name for name in cold["cpu"]), cold  # the first process compiles
    assert _first_calls(tmp_path) == {"cpu": [], "parallel": []}
