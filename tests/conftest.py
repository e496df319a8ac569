"""Shared test configuration: Hypothesis profiles, the ``cuda`` marker, registry hygiene.

Hypothesis profiles (``HYPOTHESIS_PROFILE`` overrides the choice):

- ``ci`` (chosen when ``CI`` is set): deterministic (``derandomize=True``, no example database),
  few examples, no deadline; keeps the whole suite well inside its budget on 2 cores.
- ``ci-simulator`` (``CI`` set, under ``NUMBA_ENABLE_CUDASIM=1``): ``ci`` with fewer examples.
- ``dev`` (default otherwise): random, a few more examples, failures saved to ``.hypothesis/``.
- ``thorough``: many examples, for a long local or nightly run.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import gpufuncs as gf

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("ci", max_examples=30, derandomize=True, database=None, deadline=None,
                          print_blob=True, suppress_health_check=_SLOW_OK)
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=_SLOW_OK)
#: The CUDA simulator runs a kernel as Python, thread by thread: its examples cost a hundred times
#: a compiled target's. CI exercises the cuda code path there with fewer; the GPU runs the rest.
settings.register_profile("ci-simulator", parent=settings.get_profile("ci"), max_examples=10)


def _profile() -> str:
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"]
    if not os.environ.get("CI"):
        return "dev"
    return "ci-simulator" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else "ci"


settings.load_profile(_profile())


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {settings.get_current_profile_name()}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``@pytest.mark.cuda`` tests, saying why, when this machine cannot run CUDA, and
    ``@pytest.mark.multigpu`` tests when it has fewer than two GPUs."""
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items:
        return
    if "cuda" not in gf.available_targets():
        from gpufuncs.targets import get_target

        skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {get_target('cuda').unavailable_reason()}")
        for item in cuda_items:
            item.add_marker(skip)
        return
    multi = [item for item in cuda_items if item.get_closest_marker("multigpu")]
    if multi:
        from gpufuncs.targets.cuda.runtime import device_count

        if device_count() < 2:
            skip = pytest.mark.skip(reason=f"needs two or more CUDA GPUs; {device_count()} visible")
            for item in multi:
                item.add_marker(skip)


@pytest.fixture
def restore_registry():
    """Undo any kernel registration a test makes (broken or reference-less test kernels).

    The registry has no public way to unregister, so this snapshots its private dict.
    """
    saved = dict(gf.registry._kernels)
    yield gf.registry
    gf.registry._kernels.clear()
    gf.registry._kernels.update(saved)


@pytest.fixture(scope="module")
def hypot_kernel():
    """A binary kernel with an identity, for the ufunc methods on device arrays."""
    @gf.ufunc(signatures=gf.float_signatures(2), reference=np.hypot, identity=0.0, name="test_hypot",
              replace=True)
    def hypot(a, b):
        return math.hypot(a, b)

    return hypot


@pytest.fixture(autouse=True, scope="module")
def _gpu_memory_given_back(request: pytest.FixtureRequest):
    """After a module of GPU tests, give back what the GPU libraries' caches keep reserved:
    later tests start other processes (docs examples, Dask workers) that need the memory."""
    yield
    if not any(item.get_closest_marker("cuda") for item in request.session.items
               if item.module is request.module):
        return
    import gc
    import sys

    gc.collect()
    if "cupy" in sys.modules:
        sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
        sys.modules["cupy"].get_default_pinned_memory_pool().free_all_blocks()
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        sys.modules["torch"].cuda.empty_cache()
    if "gpufuncs.targets.cuda.runtime" in sys.modules:  # (imported by the cuda target's making)
        from gpufuncs.targets import get_target

        for runtime in get_target("cuda").runtimes.existing():  # creates none
            if not runtime.simulated:
                runtime.trim()
