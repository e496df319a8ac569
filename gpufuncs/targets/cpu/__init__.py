"""The ``cpu`` and ``parallel`` targets: Numba ``@vectorize`` / ``@guvectorize`` ufuncs.

Numba builds real :class:`numpy.ufunc` objects for these targets, so once the dispatcher has
validated a call, NumPy's own machinery does the broadcasting, strides, input casting and
``where=`` in C. Everything is compiled with the same options, in one place (:func:`_options`).
"""

from __future__ import annotations

import threading
from typing import Any

import numba
import numpy as np

from ...spec import KernelSpec
from ..base import Plan, Target


class KernelCompileError(RuntimeError):
    """Numba could not compile a kernel for a target; the message keeps Numba's."""


def _options(target: str, cache: bool) -> dict[str, Any]:
    # Explicit, identical options for every kernel (numba-stats' habit): no fastmath, so NaN and
    # inf follow IEEE rules, and NumPy's error model, so 1/0 gives inf instead of raising.
    return {"target": target, "cache": cache, "nopython": True}


def _build(spec: KernelSpec, target: str, cache: bool) -> Any:
    sigs = [loop.signature for loop in spec.loops]
    opts = _options(target, cache)
    if spec.layout is None:
        return numba.vectorize(sigs, identity=_numba_identity(spec.identity), **opts)(spec.pyfunc)
    writable = tuple(range(spec.nin, spec.nin + spec.nout))
    return numba.guvectorize(sigs, spec.layout.numba_layout, writable_args=writable, **opts)(
        spec.pyfunc
    )


def _numba_identity(identity: float | None) -> int | str | None:
    # Numba stores only 0 or 1 as a ufunc identity; any other identity still makes the
    # reduction reorderable, and gpufuncs' reduce supplies the value for empty reductions.
    if identity is None:
        return None
    return int(identity) if identity in (0, 1) else "reorderable"


def compile_numba(spec: KernelSpec, target: str) -> Any:
    """Compile ``spec`` with Numba for ``target`` (``cpu`` or ``parallel``), cached on disk.

    Functions that Numba cannot cache (defined in a REPL or notebook cell, with no file to key
    the cache on) are compiled without the disk cache rather than refused.
    """
    try:
        try:
            return _build(spec, target, cache=True)
        except RuntimeError as exc:
            if "cannot cache" not in str(exc):
                raise
            return _build(spec, target, cache=False)
    except Exception as exc:
        raise KernelCompileError(
            f"kernel {spec.name!r} failed to compile for target {target!r}: {exc}"
        ) from exc


class CpuTarget(Target):
    """Numba's ``cpu`` (one core) or ``parallel`` (all cores) ufunc target."""

    def __init__(self, name: str) -> None:
        self.name = name
        # Numba's ``workqueue`` threading layer aborts the process when two Python threads run
        # a parallel ufunc at once; serialize those calls when (and only when) it is in use.
        self._serialize: threading.Lock | None = threading.Lock() if name == "parallel" else None

    def compile(self, spec: KernelSpec) -> Any:
        return compile_numba(spec, self.name)

    def execute(
        self,
        spec: KernelSpec,
        compiled: Any,
        plan: Plan,
        inputs: list[Any],
        outs: tuple[Any, ...] | None,
        where: Any,
        **options: Any,
    ) -> tuple[Any, ...]:
        ufunc = getattr(compiled, "ufunc", compiled)  # the DUFunc's real np.ufunc
        run = self._run_ufunc if spec.layout is None else self._run_gufunc
        if where is not True:
            # Numba's ufunc loops cannot take NumPy's write mask: compute everything, then copy
            # the selected positions into ``out`` (kernels are pure, so this only costs time).
            results = self.execute(spec, compiled, plan, inputs, None, True)
            if outs is None:  # NumPy leaves the masked-out positions undefined: any value will do
                return results
            for out, result in zip(outs, results):
                core = (np.newaxis,) * (result.ndim - len(plan.loop_shape))
                np.copyto(out, result, casting="unsafe", where=np.asarray(where)[(..., *core)])
            return outs
        if self._serialize is None:
            return run(ufunc, plan, inputs, outs)
        with self._serialize:
            result = run(ufunc, plan, inputs, outs)
            if numba.threading_layer() != "workqueue":
                self._serialize = None  # a thread-safe layer is running: no lock from now on
        return result

    @staticmethod
    def _run_ufunc(ufunc, plan: Plan, inputs, outs) -> tuple[Any, ...]:
        given = outs[0] if outs else None
        if given is None:
            out = np.empty(plan.out_shapes[0], plan.result_dtype, order=plan.order)
        elif _loop_writes_correctly(given, inputs, plan.loop.dtype):
            out = given
        else:
            out = np.empty_like(given, order="C")
        char = plan.loop.char
        # The casts were checked by the dispatcher against the caller's ``casting=``.
        ufunc(*inputs, out=out, casting="unsafe", signature=char * len(inputs) + "->" + char)
        if given is not None and out is not given:
            np.copyto(given, out)
        return (given if given is not None else out,)

    @staticmethod
    def _run_gufunc(ufunc, plan: Plan, inputs, outs) -> tuple[Any, ...]:
        dtype = plan.loop.dtype
        args = [np.asarray(a, dtype=dtype) for a in inputs]
        given = outs or (None,) * len(plan.out_shapes)
        # Outputs are writable *inputs* of the Numba gufunc, so NumPy would cast a mismatched
        # dtype into a temporary and the writes would be lost: such outputs go through a buffer.
        bufs = [o if o is not None and o.dtype == dtype else np.empty(shape, dtype, order=plan.order)
                for o, shape in zip(given, plan.out_shapes)]
        ufunc(*args, *bufs)
        results = []
        for o, buf in zip(given, bufs):
            if o is None:
                o = buf if buf.dtype == plan.result_dtype else buf.astype(plan.result_dtype)
            elif o is not buf:
                np.copyto(o, buf, casting="unsafe")
            results.append(o)
        return tuple(results)


def _loop_writes_correctly(out: np.ndarray, inputs: list[Any], loop: np.dtype) -> bool:
    """Whether Numba's ufunc loop can write straight into ``out``.

    Numba's ``@vectorize`` loop (0.68, ``build_ufunc_wrapper``) takes its contiguous fast path
    when every *input* has a unit inner step and then writes the output contiguously too,
    ignoring its step: a strided or reversed ``out`` (or an F-ordered one with C-ordered
    inputs) gets wrong values and writes past its end. A C-contiguous ``out`` is iterated
    with a unit inner step, and one strided exactly like every input (all of the loop's dtype,
    so NumPy does not buffer them into contiguous copies) gets the same steps as they do; any
    other ``out`` is computed into a fresh array and copied.
    """
    if out.flags.c_contiguous:
        return True
    steps = [s // out.itemsize for s in out.strides]
    return all(
        isinstance(a, np.ndarray) and a.dtype == loop
        and [s // a.itemsize for s in np.broadcast_to(a, out.shape).strides] == steps
        for a in inputs
    )
