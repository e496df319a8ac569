"""Benchmark cases built from the registry: each kernel's :class:`gpufuncs.Benchmark` declaration.

Nothing here names a kernel. A registered kernel without a declaration stops the benchmarks
with a message naming it (NumPy's ``bench_ufunc.py`` does the same for a ufunc it does not
know), so that a new kernel is never silently left out of the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

import gpufuncs as gf


class MissingBenchmarkError(LookupError):
    """A kernel to benchmark was registered without a benchmark declaration."""


@dataclass(frozen=True)
class Case:
    """One kernel as the benchmarks call it: arguments, anchors and bytes moved."""

    name: str
    kernel: gf.Kernel
    bench: gf.Benchmark

    @property
    def outputs_per_sample(self) -> int:
        """Output elements one sample writes (``hermite_norm``: its 32 orders)."""
        return self.bench.outputs_per_sample(self.kernel.spec.nout)

    def nbytes(self, n: int, dtype: Any) -> int:
        """Bytes read plus written by a call on ``n`` samples of ``dtype``."""
        return n * self.bench.bytes_per_sample(np.dtype(dtype).itemsize, self.kernel.spec.nout)

    def inputs(self, x: Any) -> tuple[Any, ...]:
        """The kernel's inputs for samples ``x``: ``x`` for every sample array, then the scalars
        in ``x``'s dtype."""
        scalar = np.dtype(x.dtype).type
        return (x,) * self.bench.arrays + tuple(scalar(v) for v in self.bench.scalars)

    def args(self, x: Any) -> tuple[Any, ...]:
        """The public call's arguments (and the expressions'): inputs, then output-only sizes."""
        return self.inputs(x) + self.bench.sizes

    def expressions(self) -> dict[str, Callable[..., Any]]:
        """Label -> NumPy/SciPy function of :meth:`args`; the first is the anchor."""
        return dict(self.bench.expressions)

    @property
    def anchor(self) -> str:
        """The label of the expression every ``/np`` ratio divides by."""
        return next(iter(self.bench.expressions))

    def new_out(self, x: np.ndarray) -> np.ndarray:
        """An output array for samples ``x`` (host)."""
        return np.empty(x.shape + self.bench.sizes, x.dtype)

    def bare(self, compiled: Any, args: tuple[Any, ...]) -> Any:
        """Numba's own ``@vectorize``/``@guvectorize`` object called as its user would.

        Numba gufuncs cannot allocate output-only core dimensions (numba#2797): a generalized
        kernel's bare call gets a new output array, which is what its user writes too.
        """
        if self.kernel.spec.is_gufunc:
            inputs = args[: self.kernel.spec.nin]
            return compiled(*inputs, self.new_out(inputs[0]))
        return compiled(*args)

    def bare_out(self, compiled: Any, out: np.ndarray, args: tuple[Any, ...]) -> Any:
        """The bare call writing into ``out``."""
        if self.kernel.spec.is_gufunc:
            return compiled(*args[: self.kernel.spec.nin], out)
        return compiled(*args, out=out)


def cases(names: Iterable[str] | None = None) -> list[Case]:
    """The cases of ``names`` (default: every registered kernel), in order.

    Raises
    ------
    MissingBenchmarkError
        Naming every kernel among them that has no benchmark declaration.
    KeyError
        For a name that is not registered (listing the registered ones).
    """
    names = list(gf.names() if names is None else names)
    kernels = {name: gf.registry[name] for name in names}
    missing = [name for name, kernel in kernels.items() if kernel.spec.benchmark is None]
    if missing:
        raise MissingBenchmarkError(
            f"registered kernels without a benchmark declaration: {', '.join(missing)}; give each "
            "one with benchmark=gf.Benchmark(...) in its decorator (docs/adding-kernels.md), or "
            "leave it out with --kernels")
    return [Case(name, kernel, kernel.spec.benchmark) for name, kernel in kernels.items()]


def cupy_missing(selected: Iterable[Case]) -> list[str]:
    """Names among ``selected`` without a CuPy formula (the GPU suite needs one for each)."""
    return [case.name for case in selected if case.bench.cupy is None]
