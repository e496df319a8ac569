"""``boundscheck=True`` (and ``GPUFUNCS_BOUNDSCHECK=1``): an out-of-range index in a kernel's
body is an ``IndexError`` naming the kernel on ``cpu``, ``parallel`` and ``auto``, on the flat
loops and through Numba's gufunc objects (strided calls); ``cuda`` cannot check indices and
refuses such calls with a ``TypeError`` that says so (the simulator runs this file: see
test_cuda_sim.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.targets.base import bounds_checked

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
HOST = ["cpu", "parallel", "auto"]


@gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", boundscheck=True,
           replace=True)
def bounds_one_too_far(x, out):
    for i in range(x.shape[0] + 1):  # reads x[n] and writes out[n]
        out[i] = 2 * x[i]


@gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)", boundscheck=True,
           replace=True)
def bounds_within(x, out):
    for i in range(x.shape[0]):
        out[i] = 2 * x[i]


@pytest.mark.parametrize("target", HOST)
@pytest.mark.parametrize("strided", [False, True], ids=["flat", "strided"])
def test_an_index_out_of_range_is_an_index_error_naming_the_kernel(target, strided):
    x = np.arange(24.0).reshape(4, 6)
    x = x[:, ::2] if strided else x
    message = r"bounds_one_too_far: an index in the kernel's body is out of bounds"
    with pytest.raises(IndexError, match=message):
        bounds_one_too_far(x, target=target)


@pytest.mark.parametrize("target", HOST)
def test_a_kernel_within_bounds_computes_as_without_checks(target):
    x = np.arange(24.0).reshape(4, 6)
    assert np.array_equal(bounds_within(x, target=target), 2 * x)
    assert np.array_equal(bounds_within(x[:, ::2], target=target), 2 * x[:, ::2])


def test_checks_are_part_of_the_cache_key(monkeypatch):
    from gpufuncs.targets.cpu import kernel_key

    monkeypatch.delenv("GPUFUNCS_BOUNDSCHECK", raising=False)
    checked = bounds_within.spec
    plain = dataclasses.replace(checked, boundscheck=False)
    assert bounds_checked(checked) and not bounds_checked(plain)
    assert None not in (kernel_key(checked), kernel_key(plain))
    assert kernel_key(checked) != kernel_key(plain)


@pytest.mark.parametrize("target", [pytest.param("cuda", marks=pytest.mark.cuda)])
def test_cuda_refuses_a_checked_kernel_saying_why(target):
    with pytest.raises(TypeError, match="numba-cuda cannot check indices"):
        bounds_within(np.ones((2, 3)), target=target)


@pytest.mark.slow
@pytest.mark.skipif(SIMULATED, reason="host targets")
def test_the_environment_variable_turns_checks_on_for_every_kernel(tmp_path):
    script = tmp_path / "unchecked.py"
    script.write_text(textwrap.dedent('''
        import numpy as np, gpufuncs as gf

        @gf.gufunc(signatures=["void(float64[:], float64[:])"], layout="(n)->(n)")
        def unchecked_one_too_far(x, out):
            for i in range(x.shape[0] + 1):
                out[i] = 2 * x[i]

        try:
            unchecked_one_too_far(np.ones((2, 3)), target="cpu")
        except IndexError as exc:
            print("IndexError:", exc)
    '''))
    env = {**os.environ, "GPUFUNCS_BOUNDSCHECK": "1", "GPUFUNCS_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert "IndexError: unchecked_one_too_far: an index in the kernel's body is out of bounds" \
        in proc.stdout, proc.stdout + proc.stderr
