"""Small calls on torch tensors: ``gf.exp`` against ``torch.exp`` (issue 32's row), and where
such a call spends its CPU time.

Float32 CUDA tensors at each size (default 10^3 and 10^4), a new output and ``out=``: call +
synchronize and pipelined (:data:`bench_gpu.PIPELINE` calls, one synchronize), each interleaved
with ``torch.exp`` of the same tensor (:meth:`bench_gpu.Timer.against`). Then the pieces of the
call, pipelined as in :mod:`dispatch_floor_gpu` (200 calls then one synchronize, median of 31):
the resolved call, the executor, keying the tensor, reading its stream, a new tensor from
torch's allocator (``torch.empty_like``, as calls allocate, and ``torch.empty`` for scale) and
the launch alone; and a straight call, the floor of any dispatch from Python.

Run on a GPU machine with torch and CuPy: ``python -m benchmarks.torch_calls_gpu [n ...]``;
``--save`` writes ``results/torch-calls-<gpu>.*`` and the pieces' ``torch-calls-pieces-<gpu>.*``
(``--save DIR``: into ``DIR``).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

import gpufuncs as gf
from gpufuncs.dispatch.args import ABSENT, keyer_of

from .bench_fuse import report_gpu_table
from .dispatch_floor_gpu import closure_with, pipelined_times
from .harness import add_save_argument

COLUMNS = ("n", "call", "sync_us", "pipe_us", "torch_sync_us", "torch_pipe_us", "x_torch_sync",
           "x_torch_pipe")


def _against_torch(n: int, timer: Any) -> list[dict[str, Any]]:
    """``gf.exp`` and ``torch.exp``, a new output and ``out=``, interleaved."""
    import torch

    x = torch.linspace(-3, 3, n, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    calls = {"exp(x)": (lambda: gf.exp(x), lambda: torch.exp(x)),
             "exp(x, out=o)": (lambda: gf.exp(x, out=out), lambda: torch.exp(x, out=out))}
    rows = []
    for label, (ours, theirs) in calls.items():
        sync, t_sync, pipe, t_pipe = timer.against(ours, theirs)
        rows.append({"n": n, "call": label, "sync_us": round(sync * 1e6, 2), "pipe_us": round(pipe * 1e6, 2),
                     "torch_sync_us": round(t_sync * 1e6, 2), "torch_pipe_us": round(t_pipe * 1e6, 2),
                     "x_torch_sync": round(sync / t_sync, 3), "x_torch_pipe": round(pipe / t_pipe, 3)})
    return rows


def _pieces(n: int) -> dict[str, Callable[[], Any]]:
    """The call on a tensor and its parts (see the module's docstring)."""
    import torch

    x = torch.linspace(-3, 3, n, dtype=torch.float32, device="cuda")
    gf.exp(x)
    resolved = gf.exp.resolve(x)
    execute = resolved._executor
    found = closure_with(execute, "launch")
    launch, stream_of = found["launch"], found["stream_of"]
    out = torch.empty_like(x)
    values = [x.data_ptr(), out.data_ptr()]
    keyer = keyer_of(type(x))
    return {"straight call (the floor)": _straight(x, launch, stream_of, keyer), **{
        "torch.exp": lambda: torch.exp(x),
        "gf.exp": lambda: gf.exp(x),
        "resolved call": lambda: resolved._run((x,), ABSENT, ABSENT, {}),
        "executor": lambda: execute((x,), None, True, None),
        "key of the tensor": lambda: keyer(x),
        "stream read": lambda: stream_of(x),
        "torch.empty_like (the allocation)": lambda: torch.empty_like(x),
        "torch.empty(n, dtype=, device=)": lambda: torch.empty(n, dtype=torch.float32, device="cuda"),
        "data_ptr": lambda: x.data_ptr(),
        "launch alone": lambda: launch(values, 0),
    }}


def _straight(x: Any, launch: Callable[..., None], stream_of: Callable[[Any], int],
              keyer: Callable[[Any], Any]) -> Callable[[], Any]:
    """A Python function doing only what any dispatch of ``gf.exp(x)`` must (key the tensor,
    find the call, read its stream, allocate, read the pointers, pack, launch), every step
    inline: the floor of a dispatch from Python, as in :mod:`dispatch_floor_gpu`."""
    import torch

    launching = inspect.getclosurevars(launch).nonlocals
    function, launch_kernel, blocks = launching["address"], launching["launch_kernel"], launching["blocks"]
    packing = inspect.getclosurevars(launching["pack"]).nonlocals  # the Packer's own struct
    store, pack_into, empty_like = packing["local"], packing["pack_into"], torch.empty_like
    current = stream_of
    launch([x.data_ptr(), empty_like(x).data_ptr()], 0)  # this thread's parameter buffer, made

    def straight(inputs: tuple[Any, ...]) -> Any:
        a = inputs[0]
        handle = current(a)
        made = empty_like(a)
        pack_into(store.store, 0, a.data_ptr(), made.data_ptr())
        launch_kernel(function, blocks, 1, 1, 256, 1, 1, 0, handle, store.address, 0)
        return made

    table = {(keyer(x),): straight}

    def straight_call(*args: Any) -> Any:
        return table[(keyer(args[0]),)](args)

    return lambda: straight_call(x)


def main(argv: list[str] | None = None) -> None:
    from .bench_gpu import Timer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=float, default=[1e3, 1e4], help="elements (default 1e3 1e4)")
    add_save_argument(parser)
    opts = parser.parse_args(argv)
    timer, rows, pieces = Timer(quick=False), [], []
    for n in map(int, opts.sizes):
        rows += _against_torch(n, timer)
        pieces += [{"n": n, "call": label, "pipe_us": round(us, 2)}
                   for label, us in pipelined_times(_pieces(n)).items()]
    about = {"suite": "small calls on torch tensors", "kernel": "gf.exp on float32 CUDA tensors"}
    report_gpu_table("torch-calls", rows, COLUMNS,
                     {**about, "method": "interleaved with torch.exp (call + synchronize: 300 pairs; "
                                         "pipelined: 25 pairs of batches), medians"}, opts.save)
    report_gpu_table("torch-calls-pieces", pieces, ("n", "call", "pipe_us"),
                     {**about, "unit": "us per call, pipelined (200 calls then one synchronize, median "
                                       "of 31)"}, opts.save)


if __name__ == "__main__":
    main()
