"""Running test modules on the CUDA simulator, in a child process.

``NUMBA_ENABLE_CUDASIM=1`` must be set before ``numba.cuda`` is first imported, so a normal run
runs the simulator's tests in a child process with the variable set (see ``test_cuda_sim.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys


def run_on_simulator(*modules: str, timeout: float = 300) -> None:
    """Run the cuda tests of ``modules`` (paths, or names in this folder) on the simulator; fail
    with the child's output unless every test there passed or was skipped.

    Only tests marked ``cuda`` (and not ``slow``) run there: the modules' host tests run in the
    quick suite already, and ran twice before (110 of the fused reductions' 121 s on a 2-core machine).
    """
    here = os.path.dirname(__file__)
    paths = [m if os.path.isabs(m) else os.path.join(here, m) for m in modules]
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-m", "cuda and not slow", *paths],
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout[-3000:]
