"""Arguments: what kind each one is, and the call signature that keys resolved calls.

Every argument falls in one of four roles (:mod:`gpufuncs.targets.base`): a weak Python scalar, a
NumPy scalar, a host array, or a device array of the target that recognises it. How to read an
argument is decided once per Python type (:func:`_keyer_for`), so building the key of a repeated
call costs a dictionary lookup and three attribute reads per array.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..targets import DEVICE_ARRAYS, HOST, NUMPY_SCALAR, SCALAR, UNKEYABLE, Arg, DeviceArrays

WEAK_SCALARS = (bool, int, float, complex)


#: Decisions kept per table (resolved calls, reductions' plans), one per call signature; a
#: full table is emptied.
TABLE_SIZE = 256


def lookup(table: dict[Any, Any], key: Any) -> Any:
    """``table``'s entry for ``key``; ``None`` where there is none, or where the key cannot be
    hashed (it holds :data:`UNKEYABLE`, or a keyword given as a list)."""
    try:
        return table.get(key)
    except TypeError:
        return None


def keep(table: dict[Any, Any], key: Any, value: Any, size: int = TABLE_SIZE) -> Any:
    """``value``, kept in ``table`` under ``key`` (the table emptied first when it holds
    ``size``; nothing kept for a key that cannot be hashed)."""
    if len(table) >= size:
        table.clear()
    try:
        table[key] = value
    except TypeError:
        pass
    return value


def overrides_array_ufunc(cls: type) -> bool:
    """Whether ``cls`` overrides ``__array_ufunc__`` (Dask, xarray, pandas, ...), NEP 13."""
    method = getattr(cls, "__array_ufunc__", None)
    return method is not None and method is not np.ndarray.__array_ufunc__


def _classify(cls: type) -> tuple[DeviceArrays | None, bool]:
    """The device target that recognises ``cls``, and whether every instance is its array."""
    for arrays in DEVICE_ARRAYS:
        verdict = arrays.classify(cls)
        if verdict is not False:
            return arrays, bool(verdict)
    return None, False


#: ``type -> (device target or None, whether every instance is its array)`` of the types seen
#: so far: a classification reads only the class (several ``issubclass`` and ``hasattr`` calls,
#: which a reduction of a CuPy array asked twice per call).
_CLASSIFIED: dict[type, tuple[DeviceArrays | None, bool]] = {}


def _device_arrays(cls: type) -> tuple[DeviceArrays | None, bool]:
    """:func:`_classify`, once per class."""
    found = _CLASSIFIED.get(cls)
    if found is None:
        found = _CLASSIFIED[cls] = _classify(cls)
    return found


#: The key of a host array: read by one C call, no Python frame. NumPy's own class needs no
#: class in it (a subclass's key has one more item, so the two never meet).
_ndarray_key = operator.attrgetter("dtype", "shape", "strides")
_host_key = operator.attrgetter("__class__", "dtype", "shape", "strides")


def _unkeyable(obj: Any) -> Any:
    return UNKEYABLE


def _keyer_for(cls: type) -> Callable[[Any], Any]:
    """How to key arguments of type ``cls``, decided once per type."""
    if cls is np.ndarray:
        return _ndarray_key
    if issubclass(cls, np.ndarray):
        return _unkeyable if overrides_array_ufunc(cls) else _host_key
    if cls in WEAK_SCALARS or issubclass(cls, np.generic) or cls is type(None):
        return type  # scalars are keyed by their type (the builtin: no Python frame)
    arrays, _ = _device_arrays(cls)
    keyer = arrays.keyer(cls) if arrays is not None else None
    # None: lists, Dask, xarray, interface dicts take the full path every time. A target's
    # keyer itself tells apart instances it does not own (torch tensors on the CPU).
    return _unkeyable if keyer is None else keyer


_KEYERS: dict[type, Callable[[Any], Any]] = {c: _keyer_for(c) for c in (np.ndarray, *WEAK_SCALARS)}

#: ``type -> keyer`` of the types seen so far (``None`` for a new one: see :func:`first_key`).
#: Callers key an argument as ``(keyer_of(type(a)) or first_key)(a)``, inline: keying a scalar
#: or a host array then costs no Python frame (their keyers are C callables), a device array one.
keyer_of = _KEYERS.get


def first_key(obj: Any) -> Any:
    """The key of an argument of a type not seen before (its keyer is decided and kept)."""
    cls = type(obj)
    keyer = _KEYERS[cls] = _keyer_for(cls)
    return keyer(obj)


def arg_key(obj: Any) -> Any:
    """The part of the call signature that argument ``obj`` contributes."""
    return (keyer_of(type(obj)) or first_key)(obj)


#: Keywords whose value is a runtime value, keyed by type only.
_RUNTIME_KEYWORDS = ("stream",)
#: Keywords keyed by value and type, item by item: NumPy refuses ``keepdims=1`` and ``axes=``
#: given as a tuple, which equal ``True`` and the list it accepts.
_TYPED_KEYWORDS = ("axes", "axis", "keepdims")


class _Absent:
    """The default of ``out`` and ``where`` in ``Kernel.__call__``: a keyword the call did not
    give (``out=None`` given with positional outputs is an error, as in NumPy)."""

    def __repr__(self) -> str:
        return "<not given>"


ABSENT: Any = _Absent()


def keywords_of(out: Any, where: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's keywords as one dictionary, ``out`` and ``where`` first where given (the order
    :func:`keywords_key` keys them in, whatever order the caller wrote)."""
    given = {} if out is ABSENT else {"out": out}
    if where is not ABSENT:
        given["where"] = where
    return {**given, **kwargs}


def keywords_key(key: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The call signature: ``key``, the positional arguments' keys (their kinds, dtypes, shapes
    and strides, as ``Kernel.__call__`` builds them), extended by the keywords (as
    :func:`keywords_of` orders them).

    Hashable for a call whose resolution can be reused; otherwise looking it up raises
    ``TypeError`` (see :data:`UNKEYABLE`). Keywords are keyed by name and value, except the
    operands ``out`` and ``where`` (keyed like arguments; a Python bool ``where`` by value)
    and runtime values such as ``stream`` (by type only: any stream resolves the same way);
    a gufunc's ``axes``, ``axis`` and ``keepdims`` by value and the type of every item.
    ``Kernel.__call__`` keys one ``out=`` array, alone or with a ``where=`` array, itself, to
    the same key as this would give.
    """
    extra: list[Any] = []
    for name, value in kwargs.items():
        if name == "out":
            extra += (name, tuple(map(arg_key, value)) if type(value) is tuple else arg_key(value))
        elif name == "where":
            extra += (name, value if type(value) is bool else arg_key(value))
        elif name in _RUNTIME_KEYWORDS:
            extra += (name, type(value))
        elif name in _TYPED_KEYWORDS:
            extra += (name, _typed(value))
        else:
            extra += (name, value)
    return key + tuple(extra)


def _typed(value: Any) -> Any:
    """``value`` keyed with the type of each item (unhashable where an item is)."""
    if type(value) is list or type(value) is tuple:
        return (type(value), *map(_typed, value))
    return (type(value), value)


def describe(obj: Any) -> Arg | None:
    """The :class:`Arg` of ``obj``, or ``None`` for an array-like to convert with NumPy."""
    cls = type(obj)
    if cls in WEAK_SCALARS:
        return Arg(SCALAR, cls, cls)
    if isinstance(obj, np.generic):
        return Arg(NUMPY_SCALAR, cls, obj.dtype)
    if isinstance(obj, np.ndarray):
        return Arg(HOST, cls, obj.dtype, obj.shape, obj.strides)
    arrays = device_arrays_of(obj)
    return None if arrays is None else arrays.describe(obj)


def device_arrays_of(obj: Any) -> DeviceArrays | None:
    """The device target's recognizer if ``obj`` is one of its arrays, else ``None``."""
    arrays, always = _device_arrays(type(obj))
    if arrays is not None and (always or arrays.owns(obj)):
        return arrays
    return None


_NOT_SET: Any = object()


def overriding(name: str, objs: Sequence[Any]) -> list[Any]:
    """Arguments whose type overrides ``__array_ufunc__``, in NumPy's order (NEP 13): subclasses
    before superclasses, otherwise left to right, one per type (device arrays excluded).

    An argument whose class sets ``__array_ufunc__ = None`` opts out of ufuncs altogether:
    ``TypeError`` with NumPy's message, prefixed with the kernel's ``name``.
    """
    found: list[Any] = []
    for obj in objs:
        cls = type(obj)
        if getattr(cls, "__array_ufunc__", _NOT_SET) is None:
            raise TypeError(f"{name}: operand {cls.__name__!r} does not support ufuncs "
                            "(__array_ufunc__=None)")
        if not overrides_array_ufunc(cls) or device_arrays_of(obj) is not None:
            continue
        if any(type(f) is cls for f in found):
            continue
        at = next((i for i, f in enumerate(found) if issubclass(cls, type(f))), len(found))
        found.insert(at, obj)
    return found


def defer(name: str, ufunc: Any, method: str, candidates: list[Any], inputs: Sequence[Any],
          kwargs: dict[str, Any], extra: Callable[[Any], dict[str, Any]] | None = None,
          finish: Callable[[Any, Any], Any] | None = None) -> Any:
    """Hand ``ufunc.method(*inputs, **kwargs)`` to each candidate's ``__array_ufunc__`` in turn
    (``extra(obj)``: keywords for that candidate only; ``finish(obj, result)``: what the caller
    gets); ``TypeError`` naming the kernel when every one returns ``NotImplemented``, as NumPy
    raises."""
    for obj in candidates:
        more = extra(obj) if extra is not None else {}
        result = type(obj).__array_ufunc__(obj, ufunc, method, *inputs, **kwargs, **more)
        if result is not NotImplemented:
            return finish(obj, result) if finish is not None else result
    shown = "" if method == "__call__" else f".{method}"
    raise TypeError(f"{name}{shown}: operand types {[type(c).__name__ for c in candidates]} all "
                    f"returned NotImplemented from __array_ufunc__ (method {method!r})")


def refuse_target(name: str, target: str, candidate: Any) -> None:
    """NumPy's protocol has no target: an override runs the kernel with ``'auto'``."""
    if target != "auto":
        raise TypeError(f"{name}: target={target!r} cannot be passed through "
                        f"{type(candidate).__name__}.__array_ufunc__; its blocks use 'auto'")
