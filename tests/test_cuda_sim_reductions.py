"""The fused reductions' tests (``test_fuse_reduce.py``) on the CUDA simulator, in a child process.

The longest of the simulator's runs, in a file of its own: CI's slow tests run on two workers a
file at a time, and the other simulator runs are in ``test_cuda_sim.py``.
"""

from __future__ import annotations

import os

import pytest
from simulator import run_on_simulator


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="already on the simulator")
def test_fused_reductions_on_the_simulator():
    run_on_simulator("test_fuse_reduce.py")
