"""Kernels that call kernels: the copy of a scalar function that a target compiles.

A kernel's body may call another gpufuncs elementwise kernel (reached as a global, a closure
variable, or an attribute of a module: ``gf.clamp``) and any ``@numba.njit`` function. Numba
cannot type a kernel object, and should not: the call is to be inlined, with the target's own
treatment of a scalar function (vector math on the CPU, a device function on the GPU), so that
``clamp(gaussian(x, 0, 1) * w, 0, 1)`` compiles to one loop. Each target therefore compiles a
copy of the scalar function (:func:`rebind`) whose globals, closure cells and module attributes
name, in place of each kernel or helper it calls, that target's compiled copy of the callee's
own scalar function, made the same way (:class:`Copies`). The callee's types follow Numba's
inference on its scalar function, as for any called ``@njit`` function.

Targets import nothing from dispatch: a kernel is known by the spec it carries
(:func:`~gpufuncs.spec.kernel_spec`).
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import KernelCompileError
from ..spec import KernelSpec, kernel_spec
from .cpu.cache import attribute_paths, global_names

#: Module globals every copy keeps besides those its code reads (what Python and tools expect of
#: a function's globals). A copy is compiled and cached by Numba, whose dispatcher keeps its
#: compiled overloads, and through them the copy and its globals, alive from a process-wide
#: finalizer until the dispatcher is freed: globals that lead back to the dispatcher (the
#: kernel that owns it, named in its module) would keep it forever.
_SCOPE_NAMES = frozenset({"__name__", "__builtins__", "__package__", "__file__"})

Swap = Callable[[Any], Any]


def rebind(pyfunc: types.FunctionType, swap: Swap) -> types.FunctionType:
    """A copy of ``pyfunc`` whose globals, closure cells and module attributes are swapped.

    Parameters
    ----------
    pyfunc : function
        A plain Python function (a scalar kernel or a helper). It is not modified.
    swap : callable
        ``value -> replacement`` (``value`` itself where nothing changes), applied to every
        global the code reads, every closure cell, and every attribute the code reads through
        a module (``gf.clamp``: the copy sees a module of its own where a read attribute
        changes; the module itself is left alone).

    Returns
    -------
    function
        A new function with the same code object, defaults, name, qualname and module. A
        closure cell whose value does not change is shared with ``pyfunc``. The globals are a
        snapshot taken now.

    Raises
    ------
    KernelCompileError
        Where the code reads a generalized (gufunc) kernel, which a kernel's body cannot call:
        the message names both functions.
    """
    if not isinstance(pyfunc, types.FunctionType):
        raise TypeError(f"rebind needs a Python function, got {type(pyfunc).__name__}")
    code = pyfunc.__code__
    reads = _reads(attribute_paths(code))

    def swapped(kind: str, name: str, value: Any) -> Any:
        return _swapped(value, reads.get((kind, name), set()), swap, pyfunc)

    # Only the names the code reads: a copy of the module's globals would hold whatever they
    # held then for as long as the copy lives (a notebook's earlier kernels: see _SCOPE_NAMES).
    used = global_names(code)
    scope = {key: swapped("LOAD_GLOBAL", key, value) if key in used else value
             for key, value in pyfunc.__globals__.items() if key in used or key in _SCOPE_NAMES}
    cells = None
    if pyfunc.__closure__ is not None:
        cells = tuple(_swapped_cell(cell, lambda v, n=name: swapped("LOAD_DEREF", n, v))
                      for name, cell in zip(code.co_freevars, pyfunc.__closure__))
    copy = types.FunctionType(code, scope, pyfunc.__name__, pyfunc.__defaults__, cells)
    copy.__kwdefaults__ = pyfunc.__kwdefaults__
    copy.__qualname__ = pyfunc.__qualname__
    copy.__module__ = pyfunc.__module__
    copy.__doc__ = pyfunc.__doc__
    copy.__annotations__ = dict(pyfunc.__annotations__)
    copy.__dict__.update(pyfunc.__dict__)
    return copy


def _reads(paths: set[tuple[str, ...]]) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """``(instruction, name) -> the attribute paths read from it`` (``gf.clamp``: ``("clamp",)``)."""
    found: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for kind, name, *attributes in paths:
        found.setdefault((kind, name), set()).add(tuple(attributes))
    return found


def _swapped(value: Any, attributes: set[tuple[str, ...]], swap: Swap, caller: Any) -> Any:
    """``swap(value)``; for a module left as it is, a module of the same name whose attributes
    in ``attributes`` (paths read from it, possibly through submodules) are swapped, where any
    of them changes."""
    spec = kernel_spec(value)
    if spec is not None and spec.is_gufunc:
        raise KernelCompileError(
            f"kernel {caller.__name__!r} calls {spec.name!r}, a generalized kernel (gufunc "
            f"{spec.layout.text!r}): a kernel's body may call elementwise kernels only; call "
            f"the scalar function of {spec.name!r} or an @numba.njit helper instead")
    new = swap(value)
    if new is not value or not isinstance(value, types.ModuleType):
        return new
    heads: dict[str, set[tuple[str, ...]]] = {}
    for path in attributes:
        if path:
            heads.setdefault(path[0], set()).add(path[1:])
    changed = {}
    for name, rest in heads.items():
        old = getattr(value, name, None)
        if old is not None and (now := _swapped(old, rest, swap, caller)) is not old:
            changed[name] = now
    if not changed:
        return value
    module = types.ModuleType(value.__name__, value.__doc__)
    vars(module).update(vars(value))
    vars(module).update(changed)
    return module


def _swapped_cell(cell: Any, swap: Swap) -> Any:
    """``cell``, or a new cell where ``swap`` changes its value (an empty cell stays)."""
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell (a name the enclosing function binds later)
        return cell
    new = swap(value)
    return cell if new is value else types.CellType(new)


class Copies:
    """A target's compiled copy of each callee (a kernel or an ``@njit`` helper), made once.

    ``make(original)`` builds the copy; it typically :func:`rebind`\\ s the callee's function
    with the same swap, which meets the callee's own callees in turn. Weak keys let the copy of
    a callee made inside a function go with it. A callee that calls back into one being copied
    is left as it is (a recursion would never end), and Numba reports what it cannot compile.
    """

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self._make = make
        self._copies: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._copying: set[int] = set()
        self._lock = threading.RLock()

    def __call__(self, original: Any) -> Any:
        """The copy of ``original``, made on first use."""
        with self._lock:
            copy = self._copies.get(original)
            if copy is not None or id(original) in self._copying:
                return copy if copy is not None else original
            self._copying.add(id(original))
            try:
                copy = self._copies[original] = self._make(original)
            finally:
                self._copying.discard(id(original))
            return copy


def compiled_body(spec: KernelSpec, prepare: Callable[[types.FunctionType], types.FunctionType],
                  jit: Callable[[Any], Any]) -> types.FunctionType:
    """The Python function a target compiles as ``spec``'s scalar function.

    ``prepare(spec.pyfunc)`` (the target's copy: see :func:`rebind`); for an elementwise kernel
    of several outputs, run as its gufunc form (see :meth:`KernelSpec.executed`), a function of
    the inputs and the one-element outputs that calls ``jit`` of that copy and stores each value
    it returns into its output (:func:`storing_results`).
    """
    body = prepare(spec.pyfunc)
    if not spec.tuple_results:
        return body
    return storing_results(jit(body), spec.nin, spec.nout, body.__qualname__)


def storing_results(func: Any, nin: int, nout: int, qualname: str) -> types.FunctionType:
    """``def f(x0, .., out0, ..): results = func(x0, ..); out0[0] = results[0]; ..``.

    Made from source text: Numba compiles a ufunc's entry point (Numba's own gufunc objects take
    this function as theirs) for an exact number of parameters, refusing ``*args`` ("Signature
    mismatch"), and Python makes a function of a given arity only from source or bytecode. The
    text holds nothing but generated names; ``func`` is the one global it reads.
    """
    inputs = ", ".join(f"x{i}" for i in range(nin))
    outputs = ", ".join(f"out{k}" for k in range(nout))
    lines = [f"def store({inputs}, {outputs}):", f"    results = func({inputs})",
             *(f"    out{k}[0] = results[{k}]" for k in range(nout))]
    scope: dict[str, Any] = {"func": func, "__name__": __name__}
    exec(compile("\n".join(lines), f"<gpufuncs results of {qualname}>", "exec"), scope)
    store = scope["store"]
    store.__qualname__ = f"{qualname}.results"
    store.body = func  # what it calls (see CpuKernel.may_raise)
    return store
