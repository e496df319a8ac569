"""``python -m gpufuncs``: environment, registered kernels, a self-check and quick timings.

Every registered kernel is run on every available target, for each of its dtypes, on a few
thousand points chosen to reach every order of magnitude, the edges of the kernel's declared
domains, zeros, subnormals, infinities and NaN, and compared with its reference under its
declared tolerance. The exit status is 1 if any check fails, 2 for a bad option. Without the
``check`` extra (a plain ``pip install .``: no Hypothesis, no SciPy) the self-check is skipped,
saying why, and the exit status is 0; references that need SciPy alone are skipped the same way.

Errors are shown as ULPs of the dtype for elementwise kernels and, for gufuncs, norm-wise in
units of the dtype's epsilon: the largest ``|result - reference|`` divided by the largest
``|reference|`` along the core dimension, which is how their tolerances are declared (per
element, the small entries of a ``hermite_norm`` row would show errors of 10^5 ULP that are
rounding noise next to the row's large entries). Each error is shown next to its allowance,
the declared tolerance in the same unit (:func:`allowance`).

``python -m gpufuncs warmup`` compiles kernels into Numba's disk cache instead (see
:mod:`gpufuncs.warmup`). Output cut short by its reader (``| head``) ends the command quietly,
with exit status 141, as a Unix tool stopped by ``SIGPIPE``.

    python -m gpufuncs [--kernels NAMES] [--targets NAMES] [--quick] [--json]
    python -m gpufuncs warmup [--kernels NAMES] [--targets NAMES] [--dtypes NAMES] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import timeit
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np

import gpufuncs as gf
from gpufuncs.dispatch import Kernel
from gpufuncs.spec import KernelSpec, Tolerance
from gpufuncs.targets import get_target

#: Points per kernel and dtype in the self-check.
POINTS = 4096
#: Size given to output-only core dimensions (hermite_norm's ``n``) in the check and in timings.
CHECK_CORE_SIZE, TIMING_CORE_SIZE = 32, 8
#: Elements per input in the timing table.
TIMING_SIZE = 10**6
#: The exit status when the reader of the output went away (``| head``): a shell's for a
#: command stopped by ``SIGPIPE``.
EXIT_BROKEN_PIPE = 128 + 13


def unavailable_targets() -> dict[str, str]:
    """The targets that cannot run here, each with the reason its target gives."""
    return {name: get_target(name).unavailable_reason() or "unavailable"
            for name in ("cpu", "parallel", "cuda") if name not in gf.available_targets()}


def environment() -> list[str]:
    """Lines describing the versions, the targets available here (and why the others are not),
    and where the disk cache is."""
    from gpufuncs.warmup import cache_setting

    targets = gf.available_targets()
    lines = [f"gpufuncs {gf.__version__}  (numpy {np.__version__}, numba {numba.__version__}, "
             f"Python {sys.version.split()[0]})",
             f"targets available: {', '.join(targets)}"]
    lines += [f"{name} not available: {reason}" for name, reason in unavailable_targets().items()]
    if "cuda" in targets:
        from numba import cuda

        name = cuda.get_current_device().name
        lines.append(f"GPU: {name.decode() if isinstance(name, bytes) else name}")
    lines.append(cache_setting())
    return lines


def environment_fields() -> dict[str, Any]:
    """What :func:`environment` says, as fields for ``--json``."""
    from gpufuncs.warmup import cache_directory

    return {"versions": {"gpufuncs": gf.__version__, "numpy": np.__version__, "numba": numba.__version__,
                         "python": sys.version.split()[0]},
            "targets_available": list(gf.available_targets()),
            "targets_unavailable": unavailable_targets(),
            "disk_cache": cache_directory()}


def kernel_lines() -> list[str]:
    """One line per registered kernel: name, loops and gufunc layout."""
    return [f"  {k.__name__:<14} {', '.join(k.types):<22} {k.signature or 'elementwise'}"
            for k in gf.registry.values()]


def probe_values(dtype: np.dtype, domain: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """``POINTS`` values of ``dtype`` in ``domain``, shuffled: edges, every binade, then bulk.

    Zeros, the smallest subnormal, ``tiny``, ``max``, values spread over every binade from
    the subnormals to ``max`` (both signs, at most 640 of each), the domain's edges and the
    values just inside them, and NaN where no domain was declared; the rest is uniform over
    ``[-8, 8]`` within the domain.
    """
    info = np.finfo(dtype)
    lo, hi = domain
    binades = np.unique(np.linspace(info.minexp - info.nmant, info.maxexp - 1, 640).astype(int))
    magnitudes = np.ldexp(rng.uniform(1.0, 2.0, binades.size), binades).astype(dtype)
    positive = np.concatenate([[0.0, info.smallest_subnormal, info.tiny, 0.5, 1.0, 2.0, info.max, np.inf],
                               magnitudes])
    edges = [e for e in (lo, hi, np.nextafter(dtype.type(lo), dtype.type(hi)),
                         np.nextafter(dtype.type(hi), dtype.type(lo))) if np.isfinite(e)]
    nan = [np.nan] if domain == (-np.inf, np.inf) else []
    special = np.concatenate([positive, -positive, edges, nan]).astype(dtype)
    special = special[np.isnan(special) | ((special >= lo) & (special <= hi))]
    bulk = rng.uniform(max(lo, -8.0), min(hi, 8.0), POINTS - special.size).astype(dtype)
    return rng.permutation(np.concatenate([special, bulk]))


def check_inputs(spec: KernelSpec, dtype: np.dtype) -> list[np.ndarray]:
    """One column of probe values per input; independent shuffles give mixed combinations."""
    rng = np.random.default_rng(sum(map(ord, spec.name)))
    return [probe_values(dtype, spec.domains.get(name, (-np.inf, np.inf)), rng)
            for name in spec.input_names]


def allowance(tol: Tolerance, dtype: np.dtype, unit: str) -> float | None:
    """The declared tolerance ``tol`` in the unit of a row's error (``ulp`` or ``eps``).

    In ``eps`` (gufuncs, norm-wise) it is ``rtol / eps``. In ``ulp`` it is ``rtol / eps`` or the
    declared ``ulps``, whichever is larger: a relative tolerance of ``rtol`` admits at least
    ``rtol / eps`` ULPs anywhere (up to twice that at the top of a binade), and the check passes
    a point within either. ``None`` for a tolerance that is absolute only (``atol``), which has
    no size in ULPs.
    """
    eps = float(np.finfo(dtype).eps)
    if unit == "eps":
        return tol.rtol / eps
    if tol.rtol == 0 and tol.ulps is None and tol.atol > 0:
        return None
    return max(tol.rtol / eps, float(tol.ulps or 0))


def comparison() -> tuple[Callable[..., dict[str, Any]] | None, str | None]:
    """:func:`gpufuncs.testing.compare` as a function giving a row's error fields, or ``None``
    and the reason when it cannot be imported (it needs Hypothesis: the ``check`` extra)."""
    try:
        from gpufuncs.testing import compare
    except ImportError as exc:
        return None, (f"gpufuncs.testing needs {exc.name or exc}, which is not installed "
                      '(pip install "gpufuncs[check]")')

    def errors(kernel: Kernel, args: tuple, result: np.ndarray, dtype: np.dtype, target: str) -> dict:
        found = compare(kernel, args, result, dtype=dtype, target=target)
        if kernel.spec.layout is not None:  # norm-wise, as gufunc tolerances are declared
            return {"rel": found.max_rel, "error": found.max_rel / float(np.finfo(dtype).eps)}
        return {"rel": found.max_rel, "error": found.max_ulp}

    return errors, None


def core_sizes(kernel: Kernel, size: int) -> list[int]:
    """Values for the output-only core dimensions of ``kernel`` (none for elementwise kernels)."""
    return [size] * len(kernel.spec.layout.output_only_dims if kernel.spec.layout else ())


def reference_runs(reference: Callable[..., Any], *args: Any) -> bool:
    """Whether ``reference`` can run here (it may need SciPy, which a plain install lacks)."""
    try:
        with np.errstate(all="ignore"):
            reference(*args)
    except ImportError:
        return False
    return True


def to_host(result: Any) -> np.ndarray:
    """A NumPy copy of a kernel result that may live on the GPU."""
    if hasattr(result, "copy_to_host"):
        return result.copy_to_host()
    return np.asarray(result.get() if hasattr(result, "get") else result)


def check_rows(kernel: Kernel, targets: tuple[str, ...], errors: Callable[..., dict]) -> Iterator[dict]:
    """Check ``kernel`` for each of its floating loops on each target; one row per (target,
    dtype), and a skipped row for each other loop (the probe values and units are floating)."""
    unit = "ulp" if kernel.spec.layout is None else "eps"
    for loop in kernel.spec.loops:
        dtype = loop.dtype
        if dtype is None or dtype.kind != "f":
            yield {"kernel": kernel.__name__, "target": ",".join(targets), "dtype": loop.types,
                   "status": "skipped", "passed": None, "error": None, "rel": None, "unit": None,
                   "allowance": None, "tolerance": None,
                   "note": "not a floating loop of one dtype: gpufuncs.testing.check_kernel checks it"}
            continue
        args = (*check_inputs(kernel.spec, dtype), *core_sizes(kernel, CHECK_CORE_SIZE))
        for target in targets:
            tol = kernel.spec.tolerance(dtype, target)
            row: dict[str, Any] = {
                "kernel": kernel.__name__, "target": target, "dtype": str(dtype), "status": "FAIL",
                "passed": False, "error": None, "rel": None, "unit": unit,
                "allowance": allowance(tol, dtype, unit),
                "tolerance": {"rtol": tol.rtol, "atol": tol.atol, "ulps": tol.ulps}}
            try:
                with np.errstate(all="ignore"):
                    result = to_host(kernel(*args, target=target))
                row.update(errors(kernel, args, result, dtype, target), status="ok", passed=True)
            except ImportError as exc:  # the reference needs SciPy, say
                row.update(status="skipped", passed=None,
                           note=f"the reference needs {exc.name or exc}, which is not installed")
            except Exception as exc:  # a mismatch, or a kernel that fails to compile or run
                row["note"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            yield row


def best_time(fn: Callable[[], Any]) -> float:
    """Best of three timed calls after one warm-up call, in seconds."""
    fn()
    return min(timeit.repeat(fn, number=1, repeat=3))


def timing_row(kernel: Kernel, targets: tuple[str, ...]) -> dict[str, Any]:
    """Milliseconds per call at ``TIMING_SIZE`` float64 elements on each target and for the
    reference (``None`` where the reference cannot run here)."""
    spec, rng = kernel.spec, np.random.default_rng(0)
    inputs = [rng.uniform(max(lo, -4.0), min(hi, 4.0), TIMING_SIZE)
              for lo, hi in (spec.domains.get(n, (-np.inf, np.inf)) for n in spec.input_names)]
    args = (*inputs, *core_sizes(kernel, TIMING_CORE_SIZE))
    row: dict[str, Any] = {"kernel": kernel.__name__}
    row.update({t: 1e3 * best_time(functools.partial(kernel, *args, target=t)) for t in targets})
    row["reference"], reference = None, spec.reference
    if reference is not None and reference_runs(reference, *(a[:8] for a in inputs), *args[len(inputs):]):
        row["reference"] = 1e3 * best_time(functools.partial(reference, *args))
    return row


def run_checks(kernels: list[Kernel], targets: tuple[str, ...]) -> dict[str, Any]:
    """The self-check: ``status`` (passed, failed or skipped), its ``rows``, and a ``reason``
    when it was skipped."""
    errors, reason = comparison()
    if errors is None:
        return {"status": "skipped", "reason": reason, "rows": []}
    rows = [row for kernel in kernels for row in check_rows(kernel, targets, errors)]
    failed = any(row["status"] == "FAIL" for row in rows)
    return {"status": "failed" if failed else "passed", "points": POINTS, "core_size": CHECK_CORE_SIZE,
            "rows": rows}


def print_checks(check: dict[str, Any]) -> None:
    """Print the self-check table (or why it was skipped)."""
    if check["status"] == "skipped":
        print(f"\nself-check skipped: {check['reason']}")
        return
    print(f"\nself-check, {POINTS} points per kernel and dtype (gufunc core size {CHECK_CORE_SIZE}), "
          "with gpufuncs.testing.compare:")
    print(f"  {'kernel':<14}{'target':<10}{'dtype':<9}{'max rel err':>12}  {'max error of allowance':<24}OK")
    for r in check["rows"]:
        print(f"  {r['kernel']:<14}{r['target']:<10}{r['dtype']:<9}{error_cells(r)}{r['status']}"
              + (f"  ({r['note']})" if "note" in r else ""))
    print("  max rel err: to |reference|, or to its largest value along the core dimension for gufuncs;\n"
          "  near 1 only where results underflow (atol or ULPs apply there).\n"
          "  max error: ulp = units in the last place of the dtype, per element (elementwise kernels);\n"
          "  eps = norm-wise, max |result - reference| / max |reference| along the core dimension,\n"
          "  in units of the dtype's epsilon (gufuncs, as their tolerances are declared).\n"
          "  allowance: the declared tolerance in the same unit (rtol/eps, or the declared ulps if more);\n"
          "  rtol admits up to twice as many ULPs at the top of a binade, atol more where results\n"
          "  underflow: each point is checked against the exact rule.")


def error_cells(row: dict[str, Any]) -> str:
    """The max rel err and ``max error of allowance`` cells of a check row (``-`` where no
    error was measured: a failed or skipped check)."""
    rel = f"{row['rel']:>12.2e}" if row["rel"] is not None else f"{'-':>12}"
    if row["unit"] is None:  # a loop the self-check does not cover
        return f"{rel}  {'-':<24}"
    error = f"{row['error']:.1f} {row['unit']}" if row["error"] is not None else f"- {row['unit']}"
    if row["allowance"] is not None:
        allowed = f"of {row['allowance']:g}"
    else:  # an absolute tolerance only
        allowed = f"(atol {row['tolerance']['atol']:g})"
    return f"{rel}  {error + ' ' + allowed:<24}"


def print_timings(rows: list[dict[str, Any]], targets: tuple[str, ...]) -> None:
    """Print milliseconds per call at ``TIMING_SIZE`` float64 elements, kernels vs references."""
    print(f"\ntimings, ms per call, {TIMING_SIZE:.0e} float64 elements (gufunc core size "
          f"{TIMING_CORE_SIZE}); reference = the kernel's NumPy/SciPy reference:")
    print("  " + f"{'kernel':<14}" + "".join(f"{c:>11}" for c in (*targets, "reference")))
    for row in rows:
        cells = (f"{row[c]:>11.2f}" if row[c] is not None else f"{'skipped':>11}"
                 for c in (*targets, "reference"))
        print(f"  {row['kernel']:<14}" + "".join(cells))


def verdict(check: dict[str, Any]) -> str:
    """The closing line."""
    if check["status"] == "skipped":
        return f"self-check skipped ({check['reason']}); nothing failed"
    skipped = sum(r["status"] == "skipped" for r in check["rows"])
    note = f" ({skipped} skipped: see their notes)" if skipped else ""
    return ("all checks passed" if check["status"] == "passed" else "SOME CHECKS FAILED") + note


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gpufuncs",
        description="Print the versions and available targets, the registered kernels, a self-check of "
                    "every kernel on every target against its NumPy/SciPy reference, and timings at "
                    f"{TIMING_SIZE:.0e} elements. Exit status: 0 when no check failed (also when the "
                    "self-check is skipped because the check extra is not installed), 1 when one "
                    "failed, 2 for a bad option.",
        epilog="Other command: 'python -m gpufuncs warmup' compiles kernels into Numba's disk cache "
               "ahead of time (for containers and clusters); see 'python -m gpufuncs warmup --help'.")
    parser.add_argument("--kernels", metavar="NAMES", type=_names,
                        help="comma-separated kernel names (default: every registered kernel: "
                             f"{', '.join(gf.names())})")
    parser.add_argument("--targets", metavar="NAMES", type=_names,
                        help="comma-separated targets (default: every available one: "
                             f"{', '.join(gf.available_targets())})")
    parser.add_argument("--quick", action="store_true", help="the self-check only: no timing table")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (environment, kernels, check rows, timings) instead "
                             "of the tables")
    opts = parser.parse_args(argv)
    for name in opts.kernels or ():
        try:
            gf.registry[name]
        except KeyError as exc:  # unknown, or a short name that several kernels share
            parser.error(f"--kernels: {exc.args[0]}")
    for target in opts.targets or ():
        if target not in ("cpu", "parallel", "cuda"):
            parser.error(f"unknown target {target!r}; targets: cpu, parallel, cuda")
        if target not in gf.available_targets():
            reason = get_target(target).unavailable_reason()
            parser.error(f"target {target!r} is not available here: {reason}")
    return opts


def main(argv: list[str] | None = None) -> int:
    """Print the report, or run the ``warmup`` command; return the exit status (1 if any check
    failed)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["warmup"]:
        from gpufuncs.warmup import main as warmup_main

        return warmup_main(argv[1:])
    opts = parse_args(argv)
    kernels = [gf.registry[name] for name in opts.kernels or gf.names()]
    targets = tuple(opts.targets or gf.available_targets())
    if not opts.json:
        print("\n".join(environment()))
        print("kernels:", *kernel_lines(), sep="\n")
    check = run_checks(kernels, targets)
    timings = [] if opts.quick else [timing_row(kernel, targets) for kernel in kernels]
    if opts.json:
        print(json.dumps({"environment": environment(), **environment_fields(), "targets": list(targets),
                          "kernels": [{"name": k.__name__, "types": list(k.types),
                                       "layout": k.signature} for k in kernels],
                          "check": check, "timings": {"size": TIMING_SIZE, "unit": "ms", "rows": timings},
                          "verdict": verdict(check)}, indent=2))
    else:
        print_checks(check)
        if timings:
            print_timings(timings, targets)
        print("\n" + verdict(check))
    return 1 if check["status"] == "failed" else 0


def run(argv: list[str] | None = None) -> int:
    """:func:`main`, ending quietly when the output's reader goes away (``| head``)."""
    try:
        status = main(argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at exit
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that no second error
        # is printed there (the recipe of Python's signal documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return status


if __name__ == "__main__":
    sys.exit(run())
