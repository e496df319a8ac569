"""The registry of kernels by name, and the public decorators that fill it."""

from __future__ import annotations

import inspect
import operator
import pickle
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .dispatch import Kernel
from .errors import KernelDefinitionError
from .spec import (
    Benchmark,
    KernelSpec,
    Tolerance,
    check_benchmark,
    check_loops,
    parse_layout,
    parse_loop,
)
from .targets import get_target


class Registry(Mapping[str, Kernel]):
    """The registered kernels, by full name or by short name.

    Each kernel is kept under its full name (:attr:`Kernel.full_name`: the module and qualified
    name of its definition, ``"gpufuncs.kernels.gaussian.gaussian"``, ``"__main__.act"``), so
    two modules may each define a kernel ``act``. ``registry[name]`` takes a full name, or a
    short name (``__name__``) while exactly one registered kernel has it: ``registry["gaussian"]``
    is ``gpufuncs.gaussian``. A short name that several kernels share raises ``KeyError``
    listing their full names.

    Iterating yields one key per kernel, sorted by short name: its short name where no other
    registered kernel has it, else its full name. :func:`gpufuncs.names` lists the same keys.
    """

    def __init__(self) -> None:
        self._kernels: dict[str, Kernel] = {}  # by full name
        self._lock = threading.Lock()
        # Kernels pickled by value, by a token that identifies them across processes; kept
        # alive, as registered kernels are, so that a worker compiles each once.
        self._tokens: weakref.WeakKeyDictionary[Kernel, str] = weakref.WeakKeyDictionary()
        self._by_token: dict[str, Kernel] = {}

    def __getitem__(self, name: str) -> Kernel:
        found = self._kernels.get(name)
        if found is not None:
            return found
        named = self._named(name)
        if len(named) == 1:
            return self._kernels[named[0]]
        if named:
            raise KeyError(f"kernel name {name!r} is ambiguous: {len(named)} registered kernels have "
                           f"it ({', '.join(named)}); ask for one by its full name")
        raise KeyError(f"unknown kernel {name!r}; registered kernels: {', '.join(self)}")

    def _named(self, name: str) -> list[str]:
        """The full names of the registered kernels whose short name is ``name``, sorted."""
        return sorted(full for full, kernel in list(self._kernels.items()) if kernel.__name__ == name)

    def __iter__(self) -> Iterator[str]:
        kernels = sorted((kernel.__name__, full) for full, kernel in list(self._kernels.items()))
        shared = Counter(short for short, _ in kernels)
        return iter([full if shared[short] > 1 else short for short, full in kernels])

    def __len__(self) -> int:
        return len(self._kernels)

    def __repr__(self) -> str:
        return f"<gpufuncs registry of {len(self)} kernels: {', '.join(self)}>"

    def register(self, kernel: Kernel, replace: bool = False) -> Kernel:
        """Add ``kernel`` under its full name.

        A kernel of the same full name is replaced, its compiled code with it: the same
        definition run again (a notebook cell re-run, a module reloaded, a function that makes
        a kernel called again). Kernels of other full names stay, even with the same short
        name, unless ``replace=True``: then they leave the registry (their callables keep
        working), so that this kernel's short name finds it.
        """
        with self._lock:
            if replace:
                for full in self._named(kernel.__name__):
                    del self._kernels[full]
            self._kernels[kernel.full_name] = kernel
            kernel.registry = self
        return kernel

    def __reduce__(self) -> str:
        return "registry"  # the module-level instance below, found again by import

    # -- kernels that no import finds again (``__main__``, notebook cells) --------------------
    def reduce(self, kernel: Kernel) -> tuple[Any, ...]:
        """How ``kernel`` pickles when importing its module does not find it again.

        By value where cloudpickle is installed (as with Dask): its declaration, scalar function
        included, so that a process that never defined it (a Dask worker) gets it. Else by
        full name, found in the receiver's registry; a kernel that a newer one of its full
        name replaced here cannot be pickled so (it would unpickle as the newer one).
        """
        try:
            import cloudpickle
        except ImportError:
            if self._kernels.get(kernel.full_name) is not kernel:
                raise pickle.PicklingError(
                    f"kernel {kernel.full_name!r} is no longer the registered kernel of that name "
                    "(a newer definition replaced it), so it cannot be pickled by name; install "
                    "cloudpickle to pickle it by value") from None
            return operator.getitem, (self, kernel.full_name)
        with self._lock:
            token = self._tokens.get(kernel)
            if token is None:
                token = self._tokens[kernel] = uuid.uuid4().hex
                self._by_token[token] = kernel
        return self.unpickle, (kernel.full_name, token, cloudpickle.dumps(kernel.spec))

    def unpickle(self, name: str, token: str, declaration: bytes) -> Kernel:
        """The kernel that :meth:`reduce` pickled: one object per process, compiled once.

        It is registered under its full name ``name`` unless another kernel has it here.
        """
        with self._lock:
            found = self._by_token.get(token)
            if found is not None:
                return found
            kernel = Kernel(pickle.loads(declaration))
            kernel.registry = self
            self._kernels.setdefault(name, kernel)
            self._tokens[kernel] = token
            self._by_token[token] = kernel
        return kernel


#: The process-wide registry.
registry = Registry()


def get_kernel(name: str) -> Kernel:
    """The public callable registered as ``name``, a full or unambiguous short name (see
    :class:`Registry`; ``KeyError`` listing the names if unknown or ambiguous)."""
    return registry[name]


def get(name: str, target: str = "cpu") -> Any:
    """The compiled Numba object of kernel ``name`` (a full or unambiguous short name) for
    ``target``, compiling it if needed.

    For ``cpu`` this is a ``DUFunc`` (or ``GUFunc``), for ``parallel`` a :class:`numpy.ufunc`,
    for ``cuda`` Numba's CUDA ufunc object.
    """
    kernel = registry[name]
    return get_target(target).public_object(kernel.compiled(target))


def names() -> list[str]:
    """One name per registered kernel, sorted by short name: its short name where unique,
    else its full name (``"__main__.act"``), as iterating :class:`Registry` gives them."""
    return list(registry)


def _tolerances(given: Mapping[Any, Tolerance | float] | None) -> dict[Any, Tolerance]:
    """Keys: a dtype, or ``(target, dtype)`` for a target-specific tolerance."""
    result: dict[Any, Tolerance] = {}
    for key, tol in (given or {}).items():
        key = (key[0], np.dtype(key[1])) if isinstance(key, tuple) else np.dtype(key)
        result[key] = tol if isinstance(tol, Tolerance) else Tolerance(rtol=float(tol))
    return result


#: Where the built-in kernels are defined: not type-checked at definition.
_BUILTIN_MODULES = "gpufuncs.kernels."


def _define(
    func: Callable[..., Any],
    *,
    signatures: Sequence[str] | None,  # None or empty: a lazy kernel
    layout: str | None,
    reference: Callable[..., Any] | None,
    name: str | None,
    tolerances: Mapping[Any, Tolerance | float] | None,
    doc: str | None,
    identity: float | None,
    domains: Mapping[str, tuple[float, float]] | None,
    replace: bool,
    benchmark: Benchmark | None = None,
    boundscheck: bool = False,
) -> Kernel:
    kname = name or getattr(func, "__name__", None) or repr(func)
    if not callable(func):
        raise TypeError(f"kernel {kname!r}: the decorator was given {type(func).__name__} "
                        "where it takes the kernel's scalar Python function")
    signatures = _signature_strings(signatures, kname)
    params = tuple(inspect.signature(func).parameters)
    parsed = parse_layout(layout) if layout is not None else None
    if parsed is not None and len(parsed.inputs) + len(parsed.outputs) != len(params):
        raise KernelDefinitionError(
            f"kernel {kname!r}: layout {layout!r} has {len(parsed.inputs) + len(parsed.outputs)} "
            f"arguments, the function takes {len(params)} ({', '.join(params)})"
        )
    if not signatures and parsed is not None:
        raise KernelDefinitionError(f"kernel {kname!r}: a gufunc needs signatures (only "
                                    "elementwise kernels compile loops as calls need them)")
    nout = len(parsed.outputs) if parsed is not None else 0
    try:
        loops = tuple(parse_loop(s, len(params), parsed is not None, nout) for s in signatures or ())
    except KernelDefinitionError as exc:
        raise KernelDefinitionError(f"kernel {kname!r}: {exc}") from None
    check_loops(loops, kname)
    if identity is not None and (parsed is not None or len(params) != 2):
        raise KernelDefinitionError(f"kernel {kname!r}: only binary elementwise kernels have an identity")
    unknown = set(domains or {}) - set(params)
    if unknown:
        raise KernelDefinitionError(f"kernel {kname!r}: domains name unknown arguments {sorted(unknown)}")
    if benchmark is not None:
        check_benchmark(benchmark, kname, len(parsed.inputs) if parsed else len(params), parsed)
    spec = KernelSpec(
        name=kname,
        pyfunc=func,
        loops=loops,
        layout=parsed,
        reference=reference,
        tolerances=_tolerances(tolerances),
        doc=doc or inspect.getdoc(func) or "",
        identity=identity,
        domains=dict(domains or {}),
        arg_names=params,
        benchmark=benchmark,
        lazy=not signatures,
        boundscheck=bool(boundscheck),
    )
    if loops and not func.__module__.startswith(_BUILTIN_MODULES):
        # A body Numba cannot type for a declared signature is refused now, not at the first
        # call (the built-ins are tested, and typing them would cost every import).
        from .targets.cpu.typecheck import check_signatures

        check_signatures(spec)
    return registry.register(Kernel(spec), replace=replace)


def ufunc(
    func: Callable[..., Any] | None = None,
    /,
    *,
    signatures: Sequence[str] | None = None,
    reference: Callable[..., Any] | None = None,
    name: str | None = None,
    tolerances: Mapping[Any, Tolerance | float] | None = None,
    doc: str | None = None,
    identity: float | None = None,
    domains: Mapping[str, tuple[float, float]] | None = None,
    replace: bool = False,
    benchmark: Benchmark | None = None,
    boundscheck: bool = False,
) -> Any:
    """Declare an elementwise kernel from a scalar Python function.

    Used bare (``@gf.ufunc``) or without ``signatures``, the kernel is lazy, as Numba's
    ``DUFunc``: each call whose inputs fit none of its loops compiles one for their types
    (``kernel.types`` lists them).

    Parameters
    ----------
    func : callable, optional
        The scalar function, when the decorator is used bare (``@gf.ufunc``).
    signatures : sequence of str, or str, optional
        Numba signatures, in the order calls select them (the first loop every input casts
        to safely), e.g. ``["float32(float32, float32)", "float64(float64, float64)"]``; one
        string for one, and positionally as Numba's ``@vectorize`` takes them. Any
        mix of bool, integer, float32/float64 and complex64/complex128 types, such as
        ``"float64(float64, int64)"`` or ``"boolean(float64)"``. None: a lazy kernel.
    reference : callable, optional
        The NumPy/SciPy function the kernel must agree with. Without one,
        :func:`gpufuncs.testing.check_kernel` checks every target against the kernel run as
        plain Python.
    name : str, optional
        The kernel's short name (``__name__``), without dots; defaults to the function's. It
        renames the function in its scope: the full name, the registry's key, is the module
        and qualified name with this as its last part.
    tolerances : mapping, optional
        Per-dtype :class:`~gpufuncs.Tolerance` (or a plain rtol); default five epsilons.
    doc : str, optional
        Docstring of the public callable; defaults to the function's.
    identity : float, optional
        For binary kernels: the value ``reduce`` starts from (like ``np.add.identity``).
    domains : mapping, optional
        ``{argument: (low, high)}`` where an input is meaningful, for generated test inputs.
    replace : bool
        Also take the short name over: registered kernels of other full names with this short
        name leave the registry. A kernel of the same full name (a cell run again, a
        function that makes kernels called again) is replaced in any case.
    benchmark : Benchmark, optional
        What ``python -m benchmarks`` compares the kernel with (its NumPy/SciPy expression, its
        CuPy formula) and calls it with; the library itself never needs it.
    boundscheck : bool
        Compile the body with bounds checks (as Numba's ``boundscheck=True``; also on for
        every kernel with the environment variable ``GPUFUNCS_BOUNDSCHECK=1``, or Numba's
        ``NUMBA_BOUNDSCHECK=1``): an out-of-range index raises an ``IndexError`` naming the
        kernel on ``cpu`` and ``parallel``; ``cuda`` cannot check and refuses such calls.

    Returns
    -------
    Kernel or callable
        The registered :class:`~gpufuncs.Kernel` (bare use), or a decorator returning it.

    Examples
    --------
    >>> import math, numpy as np, gpufuncs as gf
    >>> @gf.ufunc(signatures=["float32(float32, float32)",
    ...                       "float64(float64, float64)"],
    ...           reference=np.hypot, replace=True)
    ... def my_hypot(a, b):
    ...     return math.sqrt(a * a + b * b)
    >>> float(my_hypot(3.0, 4.0))
    5.0
    """

    if func is not None and not callable(func):  # Numba's @vectorize(["float64(float64)"])
        if signatures is not None:
            raise TypeError("gf.ufunc() takes the signatures once: positionally (as Numba's "
                            f"@vectorize) or as signatures=, got both ({func!r} and {signatures!r})")
        func, signatures = None, func

    def decorate(func: Callable[..., Any]) -> Kernel:
        return _define(func, signatures=signatures, layout=None, reference=reference, name=name,
                       tolerances=tolerances, doc=doc, identity=identity, domains=domains,
                       replace=replace, benchmark=benchmark, boundscheck=boundscheck)

    return decorate if func is None else decorate(func)


def gufunc(
    signatures: Sequence[str] | str,
    layout: str,
    *,
    reference: Callable[..., Any] | None = None,
    name: str | None = None,
    tolerances: Mapping[Any, Tolerance | float] | None = None,
    doc: str | None = None,
    domains: Mapping[str, tuple[float, float]] | None = None,
    replace: bool = False,
    benchmark: Benchmark | None = None,
    boundscheck: bool = False,
) -> Callable[[Callable[..., Any]], Kernel]:
    """Declare a generalized kernel: a scalar-style function that writes its output arrays.

    The function receives the inputs, then one array per output, and fills the outputs.
    Core dimensions that appear only in outputs (``n`` in ``"()->(n)"``) are passed to the
    public call as trailing integer arguments: ``hermite_norm(x, n)``.

    Parameters
    ----------
    signatures : sequence of str, or str
        Numba signatures returning ``void``, e.g. ``["void(float32, float32[:])", ...]``
        (positionally or by name, as Numba's ``@guvectorize`` takes them; one string for one).
    layout : str
        NumPy gufunc layout, e.g. ``"()->(n)"``.
    reference, name, tolerances, doc, domains, replace, benchmark, boundscheck
        As for :func:`ufunc`. The reference and the benchmark's expressions receive the inputs
        and the output-only sizes.

    Returns
    -------
    callable
        A decorator returning the registered :class:`~gpufuncs.Kernel`.
    """

    def decorate(func: Callable[..., Any]) -> Kernel:
        return _define(func, signatures=signatures, layout=layout, reference=reference, name=name,
                       tolerances=tolerances, doc=doc, identity=None, domains=domains,
                       replace=replace, benchmark=benchmark, boundscheck=boundscheck)

    return decorate


def _signature_strings(signatures: Sequence[str] | str | None, kname: str) -> list[str] | None:
    """``signatures`` as a list of strings (one string is one signature, as for Numba)."""
    if signatures is None or isinstance(signatures, str):
        return None if signatures is None else [signatures]
    if not isinstance(signatures, Sequence) or not all(isinstance(s, str) for s in signatures):
        raise KernelDefinitionError(f"kernel {kname!r}: signatures must be strings such as "
                                    f"'float64(float64)' or a list of them, got {signatures!r}")
    return list(signatures)


def float_signatures(nin: int) -> list[str]:
    """``["float32(float32, ...)", "float64(float64, ...)"]`` for an ``nin``-input ufunc."""
    return [f"{t}({', '.join([t] * nin)})" for t in ("float32", "float64")]
