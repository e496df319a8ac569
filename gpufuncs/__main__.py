"""``python -m gpufuncs``: environment, registered kernels, a self-check and quick timings.

Every registered kernel is run on every available target, for each of its dtypes, on a few
thousand points chosen to reach every order of magnitude, the edges of the kernel's declared
domains, zeros, subnormals, infinities and NaN, and compared with its reference under its
declared tolerance. The exit status is 1 if any check fails. References that need a package
that is not installed (SciPy, on a plain ``pip install .``) are skipped with a note.
"""

from __future__ import annotations

import sys
import timeit
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np

import gpufuncs as gf
from gpufuncs.dispatch import Kernel
from gpufuncs.spec import KernelSpec

#: Points per kernel and dtype in the self-check.
POINTS = 4096
#: Size given to output-only core dimensions (hermite_norm's ``n``) in the check and in timings.
CHECK_CORE_SIZE, TIMING_CORE_SIZE = 32, 8
#: Elements per input in the timing table.
TIMING_SIZE = 10**6


def environment() -> list[str]:
    """Lines describing the versions and the targets available here."""
    targets = gf.available_targets()
    lines = [f"gpufuncs {gf.__version__}  (numpy {np.__version__}, numba {numba.__version__}, "
             f"Python {sys.version.split()[0]})",
             f"targets available: {', '.join(targets)}"]
    if "cuda" in targets:
        from numba import cuda

        name = cuda.get_current_device().name
        lines.append(f"GPU: {name.decode() if isinstance(name, bytes) else name}")
    return lines


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


def comparison() -> Callable[..., tuple[float, float]] | None:
    """:func:`gpufuncs.testing.compare` as ``(max rel, max ulp)``; ``None`` when it cannot be
    imported (it needs Hypothesis: ``pip install "gpufuncs[check]"``)."""
    try:
        from gpufuncs.testing import compare
    except ImportError:
        return None

    def via_testing(kernel: Kernel, args: tuple, result: np.ndarray, dtype: np.dtype, target: str) -> tuple:
        found = compare(kernel, args, result, dtype=dtype, target=target)
        return found.max_rel, found.max_ulp

    return via_testing


def core_sizes(kernel: Kernel, size: int) -> list[int]:
    """Values for the output-only core dimensions of ``kernel`` (none for elementwise kernels)."""
    return [size] * len(kernel.spec.layout.output_only_dims if kernel.spec.layout else ())


def reference_runs(spec: KernelSpec, *args: Any) -> bool:
    """Whether the reference can run here (it may need SciPy, which a plain install lacks)."""
    try:
        with np.errstate(all="ignore"):
            spec.reference(*args)
    except (ImportError, TypeError):  # TypeError: no reference declared
        return False
    return True


def to_host(result: Any) -> np.ndarray:
    """A NumPy copy of a kernel result that may live on the GPU."""
    if hasattr(result, "copy_to_host"):
        return result.copy_to_host()
    return np.asarray(result.get() if hasattr(result, "get") else result)


def check_rows(kernel: Kernel, targets: tuple[str, ...], compare: Callable[..., Any]) -> Iterator[dict]:
    """Check ``kernel`` for each of its dtypes on each target; one row per (target, dtype)."""
    for dtype in (loop.dtype for loop in kernel.spec.loops):
        args = (*check_inputs(kernel.spec, dtype), *core_sizes(kernel, CHECK_CORE_SIZE))
        for target in targets:
            row = {"kernel": kernel.__name__, "target": target, "dtype": str(dtype)}
            try:
                with np.errstate(all="ignore"):
                    result = to_host(kernel(*args, target=target))
                row["rel"], row["ulps"] = compare(kernel, args, result, dtype, target)
                row["ok"] = True
            except ImportError as exc:  # the reference needs SciPy, say
                row["note"] = f"the reference needs {exc.name or exc}, which is not installed"
            except Exception as exc:  # a mismatch, or a kernel that fails to compile or run
                row["ok"], row["note"] = False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            yield row


def best_time(fn: Callable[[], Any]) -> float:
    """Best of three timed calls after one warm-up call, in seconds."""
    fn()
    return min(timeit.repeat(fn, number=1, repeat=3))


def timing_row(kernel: Kernel, targets: tuple[str, ...]) -> dict[str, Any]:
    """Milliseconds per call at ``TIMING_SIZE`` float64 elements on each target and for the reference."""
    spec, rng = kernel.spec, np.random.default_rng(0)
    inputs = [rng.uniform(max(lo, -4.0), min(hi, 4.0), TIMING_SIZE)
              for lo, hi in (spec.domains.get(n, (-np.inf, np.inf)) for n in spec.input_names)]
    args = (*inputs, *core_sizes(kernel, TIMING_CORE_SIZE))
    row: dict[str, Any] = {t: 1e3 * best_time(lambda t=t: kernel(*args, target=t)) for t in targets}
    runs = reference_runs(spec, *(a[:8] for a in inputs), *args[len(inputs):])
    row["reference"] = 1e3 * best_time(lambda: spec.reference(*args)) if runs else None
    return row


def print_checks(targets: tuple[str, ...]) -> bool:
    """Print the self-check table; True when every check that could run passed."""
    compare = comparison()
    if compare is None:
        print('\nself-check: needs gpufuncs.testing (SciPy, Hypothesis): pip install "gpufuncs[check]"')
        return False
    print(f"\nself-check, {POINTS} points per kernel and dtype (gufunc core size {CHECK_CORE_SIZE}), "
          "with gpufuncs.testing.compare:")
    print(f"  {'kernel':<14}{'target':<10}{'dtype':<9}{'max rel err':>12}{'max ulp':>10}  OK")
    passed = True
    for kernel in gf.registry.values():
        for r in check_rows(kernel, targets, compare):
            passed &= r.get("ok", True)
            status = {True: "ok", False: "FAIL"}.get(r.get("ok"), "skipped")
            err = f"{r['rel']:>12.2e}{r['ulps']:>10.1f}" if "rel" in r else f"{'-':>12}{'-':>10}"
            print(f"  {r['kernel']:<14}{r['target']:<10}{r['dtype']:<9}{err}  {status}"
                  + (f"  ({r['note']})" if "note" in r else ""))
    print("  max rel err: to |reference|, or its largest value along gufunc core dimensions; near 1 only "
          "where results underflow\n  (atol or ULPs apply there). max ulp: per element, so large at the "
          "small entries of gufunc rows.")
    return passed


def print_timings(targets: tuple[str, ...]) -> None:
    """Print milliseconds per call at ``TIMING_SIZE`` float64 elements, kernels vs references."""
    print(f"\ntimings, ms per call, {TIMING_SIZE:.0e} float64 elements (gufunc core size "
          f"{TIMING_CORE_SIZE}); reference = the kernel's NumPy/SciPy reference:")
    print("  " + f"{'kernel':<14}" + "".join(f"{c:>11}" for c in (*targets, "reference")))
    for kernel in gf.registry.values():
        row = timing_row(kernel, targets)
        cells = (f"{row[c]:>11.2f}" if row[c] is not None else f"{'skipped':>11}"
                 for c in (*targets, "reference"))
        print(f"  {kernel.__name__:<14}" + "".join(cells))


def main() -> int:
    """Print the report; return the exit status (1 if any check failed)."""
    print("\n".join(environment()))
    print("kernels:", *kernel_lines(), sep="\n")
    targets = gf.available_targets()
    passed = print_checks(targets)
    print_timings(targets)
    print("\nall checks passed" if passed else "\nSOME CHECKS FAILED")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
