"""The flat loops' disk cache: keyed on what their code depends on, and never a reason to fail.

Numba's own disk cache (``cache=True``) is not usable for the loops as it is (see
:class:`KeyedCache`), and it turns every problem with the cache directory into a failed call: no
writable location makes ``@njit(cache=True)`` raise at definition time, and an unreadable or
corrupt index or data file makes every compilation of that function raise. Here any such problem
costs one :class:`DiskCacheWarning` per process and compilation in memory, and a damaged entry is
written again by the next compilation that finds it (the cache heals).

Numba names an entry's data file by a counter read from the index, so two processes saving
different entries of one index at once can leave the index naming one entry's data file while
the file holds the other's code. Each entry's data here is saved with its key and checked on
load: a mismatch is a cache miss, never someone else's code.
"""

from __future__ import annotations

import dis
import enum
import hashlib
import inspect
import sys
import threading
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba.core.caching import FunctionCache, IndexDataCacheFile
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic
from numba.core.types import Type as NumbaType

from ...errors import DiskCacheWarning
from ...spec import kernel_spec

_warned = False
_warn_lock = threading.Lock()


def _warn_once(what: str, exc: BaseException) -> None:
    """One warning per process: the first problem is news, the others are the same news."""
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(f"gpufuncs: Numba's disk cache failed ({what}: {type(exc).__name__}: {exc}); "
                  "compiling in memory instead (a damaged entry is written again; for an "
                  "unwritable location, set NUMBA_CACHE_DIR to a writable directory)",
                  DiskCacheWarning, stacklevel=3)


class _CheckedCacheFile(IndexDataCacheFile):
    """Index and data files that treat damage as a miss, and store each entry with its key."""

    def _load_index(self) -> dict[Any, str]:
        try:
            return super()._load_index()
        except Exception as exc:  # corrupt or unreadable: the next save writes a fresh index
            _warn_once(f"reading {self._index_path}", exc)
            return {}

    def load(self, key: Any) -> Any:
        try:
            found = super().load(key)
        except Exception as exc:  # a corrupt data file: the next save overwrites it
            _warn_once(f"reading an entry of {self._index_path}", exc)
            return None
        if not (isinstance(found, tuple) and len(found) == 2 and found[0] == key):
            return None  # missing, or another entry's data (see the module docstring)
        return found[1]

    def save(self, key: Any, data: Any) -> None:
        super().save(key, (key, data))


class KeyedCache(FunctionCache):
    """Numba's disk cache for a loop, keyed on the kernel it runs.

    The loops are closures over the kernel's scalar function, and Numba keys a closure's cache
    entries on its pickled cell contents, which for a compiled function hold a random id: no
    entry would ever be found again. The key here is what the compiled code depends on instead:
    the loop's own bytecode and ``key`` (see :func:`dependency_digest` for what the caller puts
    in it). Each key has its own index file (the function's name carries it: see
    :func:`name_after`), and any failure to read or write is a miss.
    """

    def __init__(self, py_func: Callable[..., Any], key: str,
                 before_compile: Callable[[], None] | None = None) -> None:
        super().__init__(py_func)
        self._key = key
        self._before_compile = before_compile
        self._cache_file = _CheckedCacheFile(
            cache_path=self._cache_path, filename_base=self._impl.filename_base,
            source_stamp=self._impl.locator.get_source_stamp())

    def _index_key(self, sig: Any, codegen: Any) -> tuple[Any, ...]:
        code = hashlib.sha256(self._py_func.__code__.co_code).hexdigest()
        return sig, codegen.magic_tuple(), (code, self._key)

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """The entry of ``sig``, or ``None`` after running ``before_compile`` (a miss: Numba
        compiles next, and what the compiled code needs first is done only then; an entry
        loaded from the disk holds all of its code)."""
        try:
            found = super().load_overload(sig, target_context)
        except Exception as exc:  # an entry that unpickles but does not rebuild
            _warn_once(f"loading from {self._cache_path}", exc)
            found = None
        if found is None and self._before_compile is not None:
            self._before_compile()  # outside the try: its errors are the compilation's
        return found

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            super().save_overload(sig, data)
        except Exception as exc:  # unwritable: stop trying for this function
            _warn_once(f"writing to {self._cache_path}", exc)
            self.disable()


def name_after(func: types.FunctionType, key: str) -> None:
    """Give ``func`` a qualified name that carries a digest of ``key``, before Numba compiles it.

    Numba names a compiled function after its module, qualified name and a counter of the
    process, and the JIT links the functions of a library loaded from the disk cache to the
    ones already in the process by those names. Two processes that compile different kernels
    in the same order give their loops (closures of one qualified name) the same counter
    values: a process that compiled one kernel's loops and then loaded the other's from the
    cache ran the first kernel's code for both. With the key in the name, equal names mean
    equal code.
    """
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    func.__qualname__ = f"{func.__qualname__}.k{digest}"


def attach(dispatcher: Any, key: str, before_compile: Callable[[], None] | None = None) -> Any:
    """Give ``dispatcher`` (an ``@njit`` dispatcher, not compiled yet) a :class:`KeyedCache`
    keyed on ``key``, and a name that carries the key (:func:`name_after`); without a usable
    cache location it stays uncached (and warns once). ``before_compile`` runs before each
    compilation of a signature the cache does not hold (see :meth:`KeyedCache.load_overload`).
    Returns it."""
    name_after(dispatcher.py_func, key)
    try:
        dispatcher._cache = KeyedCache(dispatcher.py_func, key, before_compile)
    except Exception as exc:  # Numba: "cannot cache function ...: no locator available"
        _warn_once("finding a cache directory", exc)
    return dispatcher


def keyed(dispatcher: Any) -> bool:
    """Whether ``dispatcher`` has a :class:`KeyedCache` (:func:`attach` found a location)."""
    return isinstance(getattr(dispatcher, "_cache", None), KeyedCache)


def entry_store(anchor: Callable[..., Any], key: str) -> _CheckedCacheFile | None:
    """Where one entry of the disk cache is kept, in Numba's cache directory for ``anchor`` (a
    function of this package: its file's changes invalidate the entry, as for any Numba entry):
    an index and a data file named after a digest of ``key``, which damage or another entry's
    data turn into a miss (see :class:`_CheckedCacheFile`). ``None`` (after one warning) where
    no cache location is usable."""
    try:
        impl = FunctionCache(anchor)._impl
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return _CheckedCacheFile(cache_path=impl.locator.get_cache_path(),
                                 filename_base=f"{impl.filename_base}.k{digest}",
                                 source_stamp=impl.locator.get_source_stamp())
    except Exception as exc:  # Numba: "cannot cache function ...: no locator available"
        _warn_once("finding a cache directory", exc)
        return None


def load_entry(store: _CheckedCacheFile | None, key: Any) -> Any:
    """The data saved under ``key`` in ``store``, or ``None`` (a miss: none, or unreadable)."""
    if store is None:
        return None
    try:
        return store.load(key)
    except Exception as exc:  # an unreadable cache directory
        _warn_once("reading the disk cache", exc)
        return None


def save_entry(store: _CheckedCacheFile | None, key: Any, data: Any) -> None:
    """Save ``data`` under ``key`` in ``store``; a failure only warns (once per process)."""
    if store is None:
        return
    try:
        store.save(key, data)
    except Exception as exc:  # unwritable
        _warn_once(f"writing to {store._cache_path}", exc)


def remembered(anchor: Callable[..., Any], key: str, compute: Callable[[], bool]) -> bool:
    """``compute()``, a fact about compiled code that takes a compilation to learn, kept in the
    disk cache under ``key`` (beside ``anchor``'s entries, a function of this package: its
    file's changes, Numba's version and the CPU the code is compiled for are part of the key,
    as for any entry). A problem with the cache computes it, as a miss does."""
    from numba.core.registry import cpu_target

    index_key = (key, cpu_target.target_context.codegen().magic_tuple())
    store = entry_store(anchor, key)
    found = load_entry(store, index_key)
    if isinstance(found, bool):
        return found
    value = compute()
    save_entry(store, index_key, value)
    return value


# -- what compiled code depends on beyond its module's source -------------------------------------
#: Values Numba freezes into compiled code as constants, digested by value.
_CONSTANTS = (type(None), bool, int, float, complex, str, bytes, np.generic, np.dtype)

#: Packages whose functions and objects Numba implements itself (its own typing and lowering,
#: fixed for their versions and Numba's, which its cache index checks): digested by name.
_IMPLEMENTED = frozenset({"numpy", "numba", "llvmlite", *sys.stdlib_module_names})

#: Instructions that read an attribute of the value on the stack (3.11: ``LOAD_METHOD`` for a
#: call; 3.12 on: ``LOAD_ATTR`` for both).
_ATTRIBUTE_READS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


def dependency_digest(func: Callable[..., Any]) -> str | None:
    """A digest of what code compiled from ``func`` depends on besides its source file.

    That is its bytecode, the values in its closure and defaults (a factory's kernels share
    their source and differ only there), every value Numba freezes into the code at
    compilation (the globals it reads, and attributes read through global modules, however
    deep: ``cfg.SCALE``, ``pkg.cfg.SCALE``, an ``Enum`` member), and the same for every
    function it calls, from any module, the scalar function of every gpufuncs kernel it calls
    included (``gf.clamp``, and its module's source where it has one), and the source file of
    every ``@intrinsic`` it calls. ``None`` when one of those values is of a kind this
    cannot digest: such a kernel is not cached on disk.

    Parameters
    ----------
    func : callable
        A Python function or a Numba dispatcher (its ``py_func`` is read).

    Returns
    -------
    str or None
        A hex digest, equal in every process for the same code and values.
    """
    digest = hashlib.sha256()
    return digest.hexdigest()[:32] if _feed_function(digest, func, set()) else None


def _feed_function(digest: Any, func: Any, seen: set[int]) -> bool:
    """Digest a function Numba compiles from its Python source; ``False`` if it cannot."""
    func = getattr(func, "py_func", func)  # a Numba dispatcher: its Python function
    if not isinstance(func, types.FunctionType):
        return False
    if id(func) in seen:
        return True
    seen.add(id(func))
    _feed_code(digest, func.__code__)
    cells = dict(zip(func.__code__.co_freevars,
                     (c.cell_contents if _filled(c) else _EMPTY for c in func.__closure__ or ())))
    values = [*cells.values(), *(func.__defaults__ or ()), *(func.__kwdefaults__ or {}).values()]
    if not all(_feed_value(digest, v, seen) for v in values):
        return False
    for kind, *path in sorted(attribute_paths(func.__code__)):
        scope = cells if kind == "LOAD_DEREF" else func.__globals__
        if path[0] in scope and not _feed_path(digest, scope[path[0]], path, seen):
            return False
    return True


#: What an empty closure cell (a variable assigned after the function was made) digests as.
_EMPTY = "<empty cell>"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def _feed_code(digest: Any, code: types.CodeType) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(digest, const)
        else:
            digest.update(repr(const).encode())


def global_names(code: types.CodeType) -> set[str]:
    """The names ``code`` and the code nested in it may read as globals (a superset: attribute
    names are among them)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def attribute_paths(code: types.CodeType) -> set[tuple[str, ...]]:
    """What ``code`` and the code nested in it read from its globals and closure: tuples of
    the instruction that loads the name (``LOAD_GLOBAL``, ``LOAD_DEREF``), the name, and the
    attributes read from it one after the other (``cfg.sub.SCALE``: ``("LOAD_GLOBAL", "cfg",
    "sub", "SCALE")``)."""
    paths: set[tuple[str, ...]] = set()
    path: list[str] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF"):
            path = ["LOAD_DEREF" if "DEREF" in instruction.opname else "LOAD_GLOBAL", instruction.argval]
        elif instruction.opname in _ATTRIBUTE_READS and path:
            path.append(instruction.argval)
        else:
            if path:
                paths.add(tuple(path))
            path = []
            continue
        paths.add(tuple(path))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            paths |= attribute_paths(const)
    return paths


def _feed_path(digest: Any, value: Any, path: list[str], seen: set[int]) -> bool:
    """Digest the value a name holds and each attribute read from it through modules and
    ``Enum`` classes (Numba freezes them; an attribute of anything else is read at run time)."""
    digest.update(".".join(path).encode())
    for name in path[1:]:
        if not isinstance(value, types.ModuleType) and not _is_enum_class(value):
            break
        value = getattr(value, name, _EMPTY)
    return _feed_value(digest, value, seen)


def _feed_defining_file(digest: Any, func: types.FunctionType) -> bool:
    """Digest the name of ``func`` and the whole source file that defines it (an ``@intrinsic``'s
    typing function: its code generation, in the same file, is not Python Numba compiles);
    ``False`` where it has no file."""
    try:
        path = inspect.getsourcefile(func)
        source = Path(path).read_bytes() if path else None
    except (TypeError, OSError):
        source = None
    if source is None:
        return False
    digest.update(f"{func.__module__}.{func.__qualname__}".encode())
    digest.update(hashlib.sha256(source).digest())
    return True


def _is_enum_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, enum.Enum)


def _implemented(value: Any) -> bool:
    """Whether ``value`` belongs to a package Numba implements itself (see :data:`_IMPLEMENTED`)."""
    module = getattr(value, "__module__", None) or type(value).__module__ or ""
    return module.partition(".")[0] in _IMPLEMENTED


def _feed_value(digest: Any, value: Any, seen: set[int]) -> bool:
    """Digest one value compiled code may depend on; ``False`` for one it cannot."""
    kind = type(value)
    digest.update(f"{kind.__module__}.{kind.__qualname__}".encode())
    if isinstance(value, _CONSTANTS):
        digest.update(repr(value).encode())
    elif isinstance(value, enum.Enum):
        return _feed_value(digest, value.name, seen) and _feed_value(digest, value.value, seen)
    elif isinstance(value, np.ndarray):
        digest.update(f"{value.dtype.str}{value.shape}".encode())
        digest.update(hashlib.sha256(np.ascontiguousarray(value).tobytes()).digest())
    elif isinstance(value, (tuple, list)):
        return all(_feed_value(digest, v, seen) for v in value)
    elif isinstance(value, types.ModuleType):
        digest.update(value.__name__.encode())  # what is read from it: see _feed_path
    elif isinstance(value, (types.FunctionType, Dispatcher)) and not _implemented(value):
        return _feed_function(digest, value, seen)
    elif kernel_spec(value) is not None:  # a kernel called from the code: its body is inlined
        spec = kernel_spec(value)
        digest.update((spec.source_key or "").encode())  # (its module's source, where it has one)
        return _feed_function(digest, spec.pyfunc, seen)
    elif isinstance(value, _Intrinsic):
        return _feed_defining_file(digest, value._defn)
    elif isinstance(value, (type, NumbaType)) or _implemented(value):
        # Classes (Numba types them by name), Numba's types, and what Numba implements.
        digest.update(repr(value).encode() if isinstance(value, NumbaType) else
                      f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}".encode())
    else:
        return False  # an object of another kind: a lowered constant this cannot see into
    return True
