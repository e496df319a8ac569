"""Reduction kernels: a map, a combine, an identity and a finishing step, as CuPy's ``ReductionKernel``.

``gf.reduction`` declares a user reduction (a norm, a log-sum-exp, a count) from scalar parts:
the map of the inputs to the values reduced, the binary combine of two values, the combine's
identity, and an optional finishing step applied to each result. A call reduces over NumPy's
``axis`` (all axes by default, with ``keepdims=`` and ``out=``), on every target, through the
fused reductions (see :mod:`.reduction`): the map is computed where its value is combined, so
the inputs are read once and no array of values is written.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from numba.np.numpy_support import from_dtype

from ..dispatch import Kernel
from ..dispatch.lazy import call_loop, loop_for
from ..errors import FusionError, KernelDefinitionError
from ..spec import KernelSpec, kernel_spec, parse_loop
from . import Fused, _dtype_of
from .reduction import ASSOCIATIVE, NAMED, Finishing, ReducingPart


class ReductionKernel:
    """A reduction declared by :func:`gpufuncs.reduction`; call it as a NumPy reduction.

    ``kernel(*arrays, axis=None, keepdims=False, out=None, target="auto")``: the inputs (arrays
    and scalars, broadcast together; host or device arrays) mapped, combined over ``axis``
    (an int, a tuple, or ``None`` for all), each result finished. Device arrays stay on their
    device, as for any kernel.

    Attributes
    ----------
    map, combine, finish : callable or None
        The parts as declared.
    identity : scalar or None
        The combine's identity, where every partial reduction starts.
    """

    def __init__(self, map: Any, combine: Any, identity: Any, finish: Any, name: str) -> None:
        self.__name__ = self.__qualname__ = name
        self.__module__ = getattr(map, "__module__", None) or __name__
        self.__doc__ = inspect.getdoc(map) if inspect.isfunction(map) else None
        self._map = _Part(map, name, "map")
        self._finish = None if finish is None else _Part(finish, name, "finish")
        identity = _identity(combine, identity, name)
        self._combine = _Part(combine, name, "combine", identity)
        self.map, self.combine, self.finish, self.identity = map, combine, finish, identity
        self._fused: dict[tuple[Any, ...], Fused] = {}
        self._finishings: dict[np.dtype, Finishing] = {}

    def __call__(self, *args: Any, axis: Any = None, keepdims: bool = False, out: Any = None,
                 **options: Any) -> Any:
        """Reduce ``args`` mapped over ``axis``, finished; see the class docstring."""
        if self._finish is None:
            return self.reduced(*args, axis=axis, keepdims=keepdims, out=out, **options)
        if out is None:  # finished by the reduction: in its launch, where it is one on the GPU
            part = self._part(args)
            return part(args, {**options, "out": None}, axis, keepdims, self._finishing(part.reduction.dtype))
        result = self.reduced(*args, axis=axis, keepdims=keepdims, **options)
        if tuple(out.shape) != np.shape(result):
            raise ValueError(f"reduction {self.__name__!r}: out= has shape {tuple(out.shape)}, the "
                             f"result has shape {np.shape(result)}")
        return self.finished(result, out)

    def reduced(self, *args: Any, axis: Any = None, keepdims: bool = False, out: Any = None,
                **options: Any) -> Any:
        """The reduction before its finishing step (the same keywords as a call)."""
        return self._part(args)(args, {**options, "out": out}, axis, keepdims)

    def finished(self, result: Any, out: Any = None) -> Any:
        """The finishing step applied to ``result`` (a reduction's), into ``out`` if given."""
        if self._finish is None:
            return result
        finish = self._finish.typed((_dtype_of(result),))
        return finish(result) if out is None else finish(result, out=out)

    def values(self, *args: Any) -> np.ndarray:
        """The mapped values of ``args`` as a NumPy array (the map run on ``cpu``; for tests)."""
        mapped = self._map.typed(tuple(_dtype_of(a) for a in args))
        return np.asarray(mapped(*args, target="cpu") if isinstance(mapped, Kernel) else mapped(*args))

    def eager(self, *args: Any, axis: Any = None, keepdims: bool = False, finish: bool = True) -> Any:
        """The same reduction run eagerly, part by part (for tests): :meth:`values`, then
        NumPy's ufunc's or the combine kernel's ``reduce`` over ``axis`` (NumPy's order of
        combination), then the finish (unless ``finish`` is false)."""
        values = self.values(*args)
        combine = self._combine.typed((values.dtype, values.dtype))
        reduced = combine.reduce(values, axis=axis, keepdims=keepdims)
        return self.finished(reduced) if finish else reduced

    def _part(self, args: tuple[Any, ...]) -> ReducingPart:
        """The fused reduction's one part for ``args`` (their Python ints checked)."""
        (part,) = self._fused_for(args).checked(args).reductions
        return part

    def _finishing(self, dtype: np.dtype) -> Finishing:
        """The finishing step for results of ``dtype``: :meth:`finished`, and the same as an
        elementwise kernel (the finish as a fused function of one argument computes it, with
        NumPy's dtypes), or ``None`` where the finish cannot be fused."""
        found = self._finishings.get(dtype)
        if found is None:
            step = self._finish.typed((dtype,))

            def finish(result: Any) -> Any:
                return step(result)

            finish.__name__ = finish.__qualname__ = f"{self.__name__}_finish"
            try:
                (part,) = Fused(finish).checked((dtype.type(0),)).parts
                kernel = part.kernel
            except FusionError:  # (it is applied after the reduction instead)
                kernel = None
            found = self._finishings[dtype] = Finishing(self.finished, kernel)
        return found

    def _fused_for(self, args: tuple[Any, ...]) -> Fused:
        """The fused reduction for arguments of ``args``' dtypes: ``combine.reduce(map(*args))``
        with the parts typed for them."""
        key = tuple(_dtype_of(a) for a in args)
        found = self._fused.get(key)
        if found is None:
            values = self._map.output(key)
            reducing = _reducing(self._map.typed(key), self._combine.typed((values, values)),
                                 self._map.input_names, self.__name__, self.__module__)
            found = self._fused[key] = Fused(reducing)
        return found

    def __repr__(self) -> str:
        return f"<gpufuncs reduction kernel {self.__name__!r}>"


class _Part:
    """One part of a reduction kernel: NumPy's ufunc or a gpufuncs kernel as it is, or a scalar
    function as a kernel of exactly the types it is given (a lazy kernel would give a float32
    call the float64 loop it learned before: a result dtype that depends on earlier calls).
    A combine computes in the type of the values it combines."""

    def __init__(self, part: Any, name: str, role: str, identity: Any = None) -> None:
        self.name, self.role = name, role
        if inspect.isbuiltin(part) and getattr(part, "__module__", None) in ("math", "cmath"):
            part = _calling(part, 2 if role == "combine" else 1)
        self.given: Any = None
        self._typed: dict[tuple[Any, ...], Kernel] = {}
        if isinstance(part, np.ufunc):
            self.given, nin = part, part.nin
            self.input_names = tuple(f"x{i}" for i in range(nin))
        elif kernel_spec(part) is not None:
            self.given, nin = part, part.spec.nin
            self.input_names = part.spec.input_names
        elif inspect.isfunction(part):
            params = tuple(inspect.signature(part).parameters)
            self.spec = KernelSpec(name=f"{name}_{role}", pyfunc=part, loops=(), layout=None,
                                   reference=None, tolerances={}, doc=inspect.getdoc(part) or "",
                                   identity=identity, arg_names=params, lazy=True)
            nin, self.input_names = len(params), params
        else:
            raise KernelDefinitionError(f"reduction {name!r}: its {role} must be a scalar function, a "
                                        f"gpufuncs kernel or a NumPy ufunc, got {type(part).__name__}")
        self._check(nin)

    def _check(self, nin: int) -> None:
        name, role, part = self.name, self.role, self.given
        wanted = {"combine": 2, "finish": 1}.get(role)
        if wanted is not None and nin != wanted:
            raise KernelDefinitionError(f"reduction {name!r}: its {role} takes {wanted} input(s), "
                                        f"got one of {nin}")
        spec = kernel_spec(part)
        if spec is not None and (spec.is_gufunc or spec.nout != 1):
            raise KernelDefinitionError(f"reduction {name!r}: its {role} must be an elementwise "
                                        "kernel of one output")
        if isinstance(part, np.ufunc) and part.nout != 1:
            raise KernelDefinitionError(f"reduction {name!r}: its {role} np.{part.__name__} has "
                                        f"{part.nout} outputs")

    def typed(self, dtypes: tuple[Any, ...]) -> Any:
        """The part for inputs of ``dtypes`` (dtypes, or Python types for Python scalars)."""
        if self.given is not None:
            return self.given
        found = self._typed.get(dtypes)
        if found is None:
            loop = loop_for(self.spec, list(dtypes))
            if self.role == "combine":  # a combine gives values of the type it takes
                t = from_dtype(loop.inputs[0])
                loop = parse_loop(f"{t}({t}, {t})", 2, False)
            found = self._typed[dtypes] = Kernel(dataclasses.replace(self.spec, loops=(loop,), lazy=False))
        return found

    def output(self, dtypes: tuple[Any, ...]) -> np.dtype:
        """The dtype of the part's values for inputs of ``dtypes``."""
        part = self.typed(dtypes)
        if isinstance(part, np.ufunc):
            return np.dtype(part.resolve_dtypes((*dtypes, None))[-1])
        return call_loop(part.spec, list(dtypes)).outputs[0]


def _calling(builtin: Any, nin: int) -> Callable[..., Any]:
    """A scalar function calling ``builtin`` (``math.sqrt``), which Numba compiles as the body
    of a kernel (it cannot compile the builtin itself as one)."""
    if nin == 1:
        def call(x: Any) -> Any:
            return builtin(x)
    else:
        def call(a: Any, b: Any) -> Any:  # type: ignore[misc]
            return builtin(a, b)
    call.__name__ = call.__qualname__ = builtin.__name__
    return call


def _reducing(map: Any, combine: Any, names: tuple[str, ...], name: str,
              module: str) -> Callable[..., Any]:
    """The function the reduction fuses: ``combine.reduce(map(*args), axis=None)`` (a call gives
    its own axes), with the map's parameters."""

    def reducing(*args: Any) -> Any:
        return combine.reduce(map(*args), axis=None)

    reducing.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    reducing.__name__ = reducing.__qualname__ = name
    reducing.__module__ = module
    return reducing


def reduction(map: Callable[..., Any] | None = None, /, *, combine: Any, identity: Any = None,
              finish: Any = None, name: str | None = None) -> Any:
    """Declare a reduction kernel from a map, a combine, an identity and a finishing step.

    As CuPy's ``ReductionKernel``: each input element is mapped to a value, the values are
    combined pairwise from the identity, and each result is finished. The map is computed
    where its value is combined: one pass over the inputs, no array of values, on ``cpu``,
    ``parallel`` and ``cuda``.

    Parameters
    ----------
    map : callable
        The map: a scalar Python function (``math`` only) of one or more inputs, a gpufuncs
        elementwise kernel or a NumPy ufunc (the decorated function, used as a decorator).
    combine : callable
        The combine of two values: ``np.add``, ``np.multiply``, ``np.maximum``, ``np.minimum``,
        ``np.logical_and``/``or``/``xor``, ``np.bitwise_and``/``or``/``xor``, ``np.hypot``; a
        binary gpufuncs kernel with an identity; or a scalar function of two values. It must
        be associative and commutative: the order of combination is the reduction's own
        (pieces, then pairs; the same on every run), as in NumPy's ``reduce`` over several axes.
        NumPy's ``add`` sums as the fused ``np.sum`` (compensated), ``maximum`` as ``np.max``.
    identity : scalar, optional
        The combine's identity (``0`` for a sum): where every partial reduction starts, and the
        result of an empty one. Required for a scalar function; a NumPy ufunc's or kernel's
        own otherwise (``np.maximum`` and ``np.minimum`` have none: an empty reduction by them
        raises, as ``np.max`` does).
    finish : callable, optional
        Applied to each result: a scalar function of one value, a kernel or a NumPy ufunc.
    name : str, optional
        The kernel's name; defaults to the map's.

    Returns
    -------
    ReductionKernel or callable
        The reduction (or, without ``map``, a decorator that returns it).

    Raises
    ------
    KernelDefinitionError
        For parts of the wrong kind or number of inputs, a combine without an identity.

    Examples
    --------
    >>> import math, numpy as np, gpufuncs as gf
    >>> @gf.reduction(combine=np.add, identity=0.0, finish=math.sqrt)
    ... def l2norm(x):
    ...     return x * x
    >>> float(l2norm(np.array([3.0, 4.0])))
    5.0
    >>> l2norm(np.ones((2, 4)), axis=1)
    array([2., 2.])
    """
    if map is None:
        return lambda func: reduction(func, combine=combine, identity=identity, finish=finish, name=name)
    name = name or getattr(map, "__name__", "reduction")
    return ReductionKernel(map, combine, identity, finish, name)


def _identity(combine: Any, identity: Any, name: str) -> Any:
    """The combine's identity: NumPy's ufunc's or a kernel's own (``identity=``, if given, must
    equal it), else ``identity=``, required."""
    if isinstance(combine, np.ufunc) and combine not in (*NAMED, *ASSOCIATIVE):
        raise KernelDefinitionError(
            f"reduction {name!r}: np.{combine.__name__} is not an associative ufunc a reduction "
            f"combines with ({', '.join(f'np.{u.__name__}' for u in (*NAMED, *ASSOCIATIVE))}), "
            "or give a kernel or a scalar function")
    spec = kernel_spec(combine)
    own = combine.identity if isinstance(combine, np.ufunc) else spec.identity if spec else None
    if identity is not None and not isinstance(identity, (bool, int, float, complex, np.generic)):
        raise KernelDefinitionError(f"reduction {name!r}: identity= must be a scalar, got {identity!r}")
    same = own == identity or (own != own and identity != identity)  # (NaN is NaN's)
    if own is not None and identity is not None and not same:
        raise KernelDefinitionError(f"reduction {name!r}: identity={identity!r}, but its combine's "
                                    f"identity is {own!r}")
    if spec is not None and own is None:
        raise KernelDefinitionError(f"reduction {name!r}: its combine {spec.name!r} has no identity "
                                    "(declare the kernel with identity=)")
    if own is None and identity is None and not (combine is np.maximum or combine is np.minimum):
        raise KernelDefinitionError(f"reduction {name!r}: give identity=, the value of the combine "
                                    "that changes nothing (0 for a sum)")
    return own if own is not None else identity
