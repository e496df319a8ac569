"""Which GPU a call runs on, decided without a GPU: ``call_devices`` and the ``device=`` keyword.

The choice is made once per call signature from what dispatch learned about each argument
(:class:`~gpufuncs.targets.Arg`, whose ``device`` is the GPU a device array lives on). These tests
build those descriptions directly, so every rule and error runs in CI; the same rules on real
arrays, on one GPU and on two, are in ``test_multigpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpufuncs as gf
from gpufuncs.targets import DEVICE, HOST, SCALAR, Arg, Plan
from gpufuncs.targets.cuda import call_devices

F32 = np.dtype(np.float32)


class FakeDeviceArray:
    """Stands for a device array class in an :class:`Arg` (nothing reads it)."""


def on(device, shape=(4,)):
    return Arg(DEVICE, FakeDeviceArray, F32, shape, (4,), device)


def host(shape=(4,)):
    return Arg(HOST, np.ndarray, F32, shape, (4,))


def plan(*inputs, outs=None, where=None, device=None, kernel=gf.clamp):
    spec = kernel.spec
    return Plan(loop=spec.loops[0], loop_shape=(4,), out_shapes=((4,),),
                inputs=tuple(inputs), outs=outs, where=where, device=device,
                cores=(0,) * (spec.nin + spec.nout))


def devices(p, count=2, kernel=gf.clamp):
    return call_devices(kernel.spec, p, count)


def test_device_arrays_run_where_they_live():
    assert devices(plan(on(1), host(), Arg(SCALAR, float, float))) == (1,)
    assert devices(plan(host(), on(1), on(1), outs=(on(1),), where=on(1))) == (1,)
    assert devices(plan(on(0), on(None), on(0))) == (0,)  # an empty array has no device


def test_host_arrays_run_on_device_or_the_current_gpu():
    assert devices(plan(host(), host(), host())) is None  # each call's current GPU
    assert devices(plan(host(), host(), host()), count=1) is None
    assert devices(plan(host(), host(), host(), device=1)) == (1,)
    assert devices(plan(host(), host(), host(), device=np.int64(1))) == (1,)
    assert devices(plan(host(), host(), host(), device="all"), count=3) == (0, 1, 2)
    assert devices(plan(host(), host(), host(), device="all"), count=1) == (0,)


def test_arrays_on_different_gpus_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"clamp: 'xmax' is on cuda:1 but 'x' is on cuda:0"):
        devices(plan(on(0), host(), on(1)))
    with pytest.raises(ValueError, match=r"clamp: out= is on cuda:1 but 'x' is on cuda:0"):
        devices(plan(on(0), host(), host(), outs=(on(1),)))
    with pytest.raises(ValueError, match=r"clamp: 'where' is on cuda:0 but 'xmin' is on cuda:1"):
        devices(plan(host(), on(1), host(), outs=(on(1),), where=on(0)))
    with pytest.raises(ValueError, match=r"gaussian: 'sigma' is on cuda:1 but 'x' is on cuda:0"):
        devices(plan(on(0), host(), on(1), kernel=gf.gaussian), kernel=gf.gaussian)


def test_device_keyword_must_name_a_visible_gpu_or_agree_with_the_arrays():
    with pytest.raises(ValueError, match=r"clamp: device=2 is not a visible GPU \(2 visible: 0 to 1\)"):
        devices(plan(host(), host(), host(), device=2))
    with pytest.raises(ValueError, match=r"device=-1 is not a visible GPU"):
        devices(plan(host(), host(), host(), device=-1))
    for bad in ("cuda:1", 1.0, True, None.__class__):
        with pytest.raises(ValueError, match=r"clamp: device must be a GPU ordinal or 'all'"):
            devices(plan(host(), host(), host(), device=bad))
    with pytest.raises(ValueError, match=r"clamp: device=0 but the device arrays are on cuda:1"):
        devices(plan(on(1), host(), host(), device=0))
    with pytest.raises(ValueError, match=r"clamp: device='all' splits host arrays .* \(cuda:1\)"):
        devices(plan(on(1), host(), host(), device="all"))
    assert devices(plan(on(1), host(), host(), device=1)) == (1,)


def test_device_keyword_belongs_to_the_cuda_target():
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    for target in ("cpu", "parallel", "auto"):
        with pytest.raises(ValueError, match=r"exp: device= applies to target 'cuda' only"):
            gf.exp(x, device=0, target=target)
    assert "device" in str(gf.exp.__signature__)
