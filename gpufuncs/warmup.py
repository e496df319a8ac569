"""Compiling kernels into Numba's disk cache ahead of time: ``python -m gpufuncs warmup``.

A process compiles a kernel for a target on its first call there, and Numba's disk cache keeps
the compiled loops for later processes (see :mod:`gpufuncs.targets.cpu.cache`). A container
image or a cluster's shared file system can hold that cache ready-made: :func:`warmup` calls
each kernel, per target and declared loop, with the arguments of the commonest calls, so that
what those calls compile is in the cache before any user's process needs it.

The calls made per loop: every input a 1-D contiguous array of the loop's dtype, and the first
input an array with the others Python scalars (``gaussian(x, 0.0, 1.0)``), each on arrays below
and above the size from which the CPU loops use their widest vectors. Other kinds of call
(``where=``, arrays of other dimensions or layouts, NumPy scalars, float16) compile on their
first use, as before, and so does a large call's refinement loop for data with NaN or
infinities (:func:`gpufuncs.targets.cpu.loops.refining_loops`). A process still compiles
each kernel's scalar function in memory on its first call (it is not cached on disk); the
loops, most of a first call's compile time, are loaded.

Where the cache is: :func:`cache_directory`; ``NUMBA_CACHE_DIR`` moves it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dispatch import Kernel
from .registry import names, registry
from .spec import IDENTITY, KernelSpec, Loop
from .targets import available_targets, get_target

#: The targets :func:`warmup` can compile for, and those it compiles for by default: the host
#: targets, which ``target="auto"`` runs host arrays on.
TARGETS, DEFAULT_TARGETS = ("cpu", "parallel", "cuda"), ("cpu", "parallel")
#: Elements of the warm-up calls' arrays: one call below and one above the size from which the
#: CPU loops use their widest vectors (``gpufuncs.targets.cpu.loops.WIDE_MIN``, 1024): those
#: are separate loops.
SIZES = (16, 2048)
#: Size given to every core dimension of a gufunc in the warm-up calls.
CORE_SIZE = 4


@dataclass(frozen=True)
class Warmed:
    """What warming one kernel on one target for one loop did.

    Attributes
    ----------
    kernel, target : str
        The kernel's registered name and the target.
    loop : str
        NumPy's loop string of the declared loop (``'ddd->d'``).
    seconds : float
        Wall time of the warm-up calls, compiling included.
    compiled : int
        Functions compiled and written to the disk cache by these calls (on ``cuda``, the
        kernels saved as cubins); 0 when everything they need was loaded from it (or compiled
        by an earlier row of the same run).
    """

    kernel: str
    target: str
    loop: str
    seconds: float
    compiled: int


def cache_directory() -> str | None:
    """The directory where Numba caches the CPU loops of every gpufuncs kernel, or ``None`` when
    no location is writable (kernels then compile in memory, with one ``DiskCacheWarning``).

    Numba's own rules, applied to the module the loops are compiled from: a folder under
    ``NUMBA_CACHE_DIR`` when that is set, else the ``__pycache__`` folder beside gpufuncs'
    ``targets/cpu/loops.py`` when it is writable, else a folder under Numba's per-user cache
    directory (``~/.cache/numba`` on Linux). The cuda target's cubins follow the same rules
    beside ``targets/cuda/cubins.py`` (see :mod:`gpufuncs.targets.cuda.cubins`).
    """
    from numba.core.caching import FunctionCache

    from .targets.cpu import loops

    try:
        return str(FunctionCache(loops.chunks.py_func).cache_path)
    except RuntimeError:  # Numba: "cannot cache function ...: no locator available"
        return None


def cache_setting() -> str:
    """One line saying where the disk cache is and what moves it."""
    where = cache_directory()
    if where is None:
        return "disk cache: no writable location (kernels compile in memory; set NUMBA_CACHE_DIR)"
    moved = "set by NUMBA_CACHE_DIR" if os.environ.get("NUMBA_CACHE_DIR") else "NUMBA_CACHE_DIR moves it"
    return f"disk cache: {where} ({moved})"


def check_target(target: str) -> None:
    """Raise ``ValueError`` unless ``target`` is one :func:`warmup` can compile for here."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; targets: {', '.join(TARGETS)}")
    if target not in available_targets():
        reason = get_target(target).unavailable_reason()
        raise ValueError(f"target {target!r} is not available here: {reason}")


def select_loops(spec: KernelSpec, dtypes: Sequence[np.dtype] | None) -> list[Loop]:
    """The declared loops of ``spec`` whose every argument has one of ``dtypes`` (every declared
    loop for ``None``)."""
    if dtypes is None:
        return list(spec.loops)
    return [loop for loop in spec.loops if set(loop.inputs + loop.outputs) <= set(dtypes)]


def _value(dtype: np.dtype, domain: tuple[float, float]) -> Any:
    """A value of ``dtype`` inside ``domain``: 1 where the domain holds it (the values only
    decide which loops compile, never what they compile to)."""
    lo, hi = domain
    if lo <= 1 <= hi:
        value = 1.0
    elif np.isfinite(lo) and np.isfinite(hi):
        value = (lo + hi) / 2
    else:
        value = lo + 1 if np.isfinite(lo) else hi - 1
    return np.asarray(value).astype(dtype)[()]


def calls(spec: KernelSpec, loop: Loop) -> Iterator[tuple[Any, ...]]:
    """The argument tuples :func:`warmup` calls a kernel with for ``loop`` (see the module
    docstring): the inputs, then the sizes of output-only core dimensions."""
    layout = spec.layout
    cores = layout.inputs if layout else ((),) * spec.nin
    sizes = (CORE_SIZE,) * len(layout.output_only_dims if layout else ())
    values = [_value(dtype, spec.domains.get(name, (-np.inf, np.inf)))
              for name, dtype in zip(spec.input_names, loop.inputs)]
    for n in SIZES:
        arrays = [np.full((n, *(CORE_SIZE,) * len(dims)), v) for v, dims in zip(values, cores)]
        yield (*arrays, *sizes)
        if spec.nin > 1 and not any(cores[1:]):  # the others as Python scalars, as most calls pass them
            yield (arrays[0], *(v.item() for v in values[1:]), *sizes)


def _jobs(kernels: Sequence[str] | None, targets: tuple[str, ...],
          dtypes: Sequence[np.dtype] | None) -> list[tuple[Kernel, Loop, str, list[tuple[Any, ...]]]]:
    """``(kernel, loop, target, argument tuples)`` for each row :func:`warmup` yields."""
    chosen = [registry[name] for name in (kernels or names())]
    jobs = [(kernel, loop, target, list(calls(kernel.spec, loop)))
            for kernel in chosen for loop in select_loops(kernel.spec, dtypes) for target in targets]
    if {"cpu", "parallel"} <= set(targets):
        # target="auto" times the library's copy kernel on 16 float64 elements on both targets,
        # once per machine (see gpufuncs.targets.cpu.auto): its loops are cached like any other.
        copy = Kernel(IDENTITY)
        loop = next(loop for loop in IDENTITY.loops if loop.dtype == np.float64)
        jobs += [(copy, loop, target, [(np.ones(16),)]) for target in ("cpu", "parallel")]
    return jobs


class _CompileCounter:
    """Counts Numba's compilations of functions that have a disk cache (each is written there),
    through Numba's event API, and the cuda target's kernels saved to its cache (numba-cuda
    does not report its compilations through that API)."""

    def __init__(self) -> None:
        self.count = 0

    def on(self, target: str) -> int:
        """What has been compiled into the disk cache so far for ``target``."""
        if target == "cuda":
            from .targets.cuda import cubins

            return len(cubins.saved)
        return self.count

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        from numba.core import event

        counter = self

        class Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                pass

            def on_end(self, ev: Any) -> None:
                if _disk_cached(ev.data.get("dispatcher")):
                    counter.count += 1

        with event.install_listener("numba:compile", Listener()):
            yield


def _disk_cached(dispatcher: Any) -> bool:
    """Whether a Numba dispatcher saves what it compiles to the disk cache. Numba and
    numba-cuda each have their own ``NullCache`` class (no disk cache), hence the name."""
    cache = getattr(dispatcher, "_cache", None)
    return cache is not None and type(cache).__name__ != "NullCache"


def warmup(kernels: Sequence[str] | None = None, targets: Sequence[str] | None = None,
           dtypes: Sequence[Any] | None = None) -> Iterator[Warmed]:
    """Compile kernels into Numba's disk cache, one row per kernel, target and loop.

    With ``cpu`` and ``parallel`` both warmed, the last two rows warm the library's copy kernel
    (``identity``), which ``target="auto"`` times once per machine.

    Parameters
    ----------
    kernels : sequence of str, optional
        Registered kernel names; default: every registered kernel.
    targets : sequence of str, optional
        Among ``cpu``, ``parallel`` and ``cuda``; default: ``cpu`` and ``parallel``.
    dtypes : sequence of dtype-like, optional
        Warm only the declared loops whose every argument has one of these dtypes; default:
        every declared loop.

    Yields
    ------
    Warmed
        After each kernel, target and loop is warmed: how long it took and what it compiled.

    Raises
    ------
    KeyError
        For a name that is not a registered kernel.
    ValueError
        For an unknown target, or a target that cannot run here (with the reason).
    gpufuncs.KernelCompileError
        When a kernel fails to compile.
    """
    where = tuple(targets or DEFAULT_TARGETS)
    for target in where:
        check_target(target)
    jobs = _jobs(kernels, where, None if dtypes is None else [np.dtype(d) for d in dtypes])
    counter = _CompileCounter()
    with counter.listening():
        for kernel, loop, target, arguments in jobs:
            before, start = counter.on(target), time.perf_counter()
            with np.errstate(all="ignore"):
                for args in arguments:
                    kernel(*args, target=target)
            compiled = counter.on(target) - before
            yield Warmed(kernel.__name__, target, loop.types, time.perf_counter() - start, compiled)


# -- the command line: python -m gpufuncs warmup ---------------------------------------------------
def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpufuncs warmup",
        description="Compile kernels into Numba's disk cache ahead of time (a container image's build "
                    "step, or once for a cluster's shared file system), so that later processes load "
                    "them instead of compiling them on their first calls. Each declared loop is "
                    "compiled for the commonest calls: 1-D arrays, and a first array with Python "
                    "scalars. NUMBA_CACHE_DIR sets where the cache is. Exit status: 0 when everything "
                    "compiled, 1 when a kernel failed to compile or no cache location is writable, "
                    "2 for a bad option.")
    parser.add_argument("--import", metavar="MODULES", type=_names, dest="modules",
                        help="comma-separated modules to import first: those that define your own "
                             "kernels, which then are registered kernels too")
    parser.add_argument("--kernels", metavar="NAMES", type=_names,
                        help="comma-separated kernel names (default: every registered kernel: "
                             f"{', '.join(names())}, and those of --import)")
    parser.add_argument("--targets", metavar="NAMES", type=_names,
                        help="comma-separated targets among cpu, parallel, cuda (default: cpu,parallel, "
                             "the host targets target='auto' runs on)")
    parser.add_argument("--dtypes", metavar="NAMES", type=_names,
                        help="comma-separated dtypes: only the declared loops whose every argument has one "
                             "of them (default: every declared loop)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The options of ``python -m gpufuncs warmup``, checked (exit status 2 for a bad one)."""
    parser = _parser()
    opts = parser.parse_args(argv)
    for module in opts.modules or ():
        try:
            importlib.import_module(module)
        except Exception as exc:  # not found, or failing at import: the user's to fix
            parser.error(f"--import: importing {module!r} failed: {type(exc).__name__}: {exc}")
    for name in opts.kernels or ():
        try:
            registry[name]
        except KeyError as exc:  # unknown, or a short name that several kernels share
            parser.error(f"--kernels: {exc.args[0]}")
    for target in opts.targets or ():
        try:
            check_target(target)
        except ValueError as exc:
            parser.error(f"--targets: {exc}")
    try:
        dtypes = None if opts.dtypes is None else [np.dtype(d) for d in opts.dtypes]
    except TypeError as exc:
        parser.error(f"--dtypes: {exc}")
    if dtypes is not None and not any(select_loops(registry[name].spec, dtypes)
                                      for name in opts.kernels or names()):
        parser.error(f"--dtypes: no declared loop of the kernels chosen has only the dtypes "
                     f"{', '.join(map(str, dtypes))}")
    return opts


def main(argv: Sequence[str]) -> int:
    """``python -m gpufuncs warmup``: compile, print a row per kernel, target and loop and the
    total; return the exit status."""
    opts = parse_args(argv)
    where = cache_directory()
    if where is None:
        print("warmup: no writable disk cache location, so nothing compiled would be kept: "
              "set NUMBA_CACHE_DIR to a writable directory", file=sys.stderr)
        return 1
    if not opts.json:
        print(cache_setting())
        print(f"  {'kernel':<14}{'target':<10}{'loop':<12}{'seconds':>8}  compiled", flush=True)
    rows, start = [], time.perf_counter()
    try:
        for row in warmup(opts.kernels, opts.targets, opts.dtypes):
            rows.append(row)
            if not opts.json:
                print(f"  {row.kernel:<14}{row.target:<10}{row.loop:<12}{row.seconds:>8.2f}  "
                      f"{_functions(row.compiled)}", flush=True)
    except Exception as exc:  # a kernel that fails to compile: say which, and stop
        print(f"warmup failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    seconds, compiled = time.perf_counter() - start, sum(r.compiled for r in rows)
    if opts.json:
        print(json.dumps({"disk_cache": where, "seconds": seconds, "compiled": compiled,
                          "rows": [dataclasses.asdict(r) for r in rows]}, indent=2))
        return 0
    if any(r.kernel == IDENTITY.name for r in rows):
        print(f"  ({IDENTITY.name}: the library's copy kernel, which target='auto' times once per "
              "machine)")
    loops = f"{len(rows)} loop{'s' * (len(rows) != 1)}"
    print(f"warmed {loops} in {seconds:.1f} s: {_functions(compiled)} compiled into the disk cache"
          + ("" if compiled else " (everything was there already)"))
    return 0


def _functions(count: int) -> str:
    return f"{count} function{'s' * (count != 1)}"
