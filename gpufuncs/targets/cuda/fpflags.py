"""Floating-point errors of the cuda target's elementwise kernels, derived from values.

A GPU keeps no floating-point status, so the elementwise templates (:mod:`.kernels`) derive one
from the values they compute: each result is tested, with one compare, for being finite once
stored in the output's dtype (:func:`finite_in`), and a thread that found one that is not reads
its stored results back and classifies them from their arguments (:func:`flag`):

* NaN while no argument is NaN: *invalid* (``0 / 0``, ``inf - inf``, ``sqrt(-1)``);
* infinite while every argument is finite: *divide by zero* when some argument is zero
  (``1 / 0``, ``log(0)``), else *overflow* (``exp(1000)``, ``1e300 * 1e300``).

Underflow leaves no trace in the values (a tiny or zero result is also what exact arithmetic
gives): it is never reported (NumPy ignores it by default). Integer and bool results never flag.
Kernels with core dimensions (gufuncs) are not checked; a kernel of several outputs checks each
result, and reports the kinds of all of them.

Each thread gathers its elements' kinds in a register; a warp that found any ORs them across its
lanes and its first lane stores each kind found as one byte into a *flag slot*: four bytes of
pinned host memory mapped into the GPU's address space (:class:`FlagRing`, one per GPU), so that
the host reads them without a copy once the launch has finished, and pays nothing when nothing
was found. A call that will read its flags takes a slot of its own (zeroed by the host); a call
that will not points its kernel at a shared slot that is never read (a constant of its launch).

When the flags are read (see ``docs/semantics.md``):

* host arrays: always, after the call's last copy back, which waits for the GPU anyway;
* device arrays: only when ``np.errstate`` says ``'raise'``, ``'call'``, ``'print'`` or ``'log'``
  for divide, overflow or invalid (:func:`watched`): the call then synchronizes its stream. Under
  ``'warn'`` (NumPy's default) and ``'ignore'`` a call on device arrays stays asynchronous and
  reports nothing.

``GPUFUNCS_FPSTATUS=0`` in the environment (as for the cpu target) compiles kernels without the
check and reads no flags; the setting is a closure constant of the templates, so part of the
kernels' disk-cache key.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from typing import Any

import numpy as np

from ..fpstatus import DIVIDE, INVALID, KINDS, OVERFLOW

#: Whether the elementwise kernels check their results (``GPUFUNCS_FPSTATUS`` is not ``0``).
ENABLED = os.environ.get("GPUFUNCS_FPSTATUS", "1") != "0"

#: The kinds the kernels can find (NumPy's bits).
FLAGGED = DIVIDE | OVERFLOW | INVALID

# Bits of _inputs: some argument is NaN, infinite, zero.
_NAN, _INF, _ZERO = 1, 2, 4


# -- in the kernels -------------------------------------------------------------------------------
def _one(a):
    """:data:`_NAN`, :data:`_INF` or :data:`_ZERO` for argument ``a`` (0: finite, not zero)."""
    if isinstance(a, complex | np.complexfloating):
        return (_one(a.real) | _one(a.imag)) & (_NAN | _INF) | (_one(a.real) & _one(a.imag) & _ZERO)
    if isinstance(a, float | np.floating):
        return _NAN if a != a else _INF if abs(a) == math.inf else _ZERO if a == 0 else 0
    if isinstance(a, int | np.integer | np.bool_):
        return _ZERO if a == 0 else 0
    return 0


def _inputs(args):
    """The :func:`_one` bits of every argument of the tuple ``args``, OR-ed."""
    bits = 0
    for a in args:
        bits |= _one(a)
    return bits


def _kind(nan, args):
    """The kind of a result that is not finite (NaN: ``nan``) from arguments ``args``."""
    found = _inputs(args)
    if nan:
        return 0 if found & _NAN else INVALID
    if found & (_NAN | _INF):
        return 0
    return DIVIDE if found & _ZERO else OVERFLOW


def flag(r, args):
    """NumPy's bit for result ``r`` (as stored) computed from ``args``; 0 in the common case:
    a finite result, a result of integer or bool type."""
    if isinstance(r, complex | np.complexfloating):
        if np.isfinite(r.real) and np.isfinite(r.imag):
            return 0
        return _kind(np.isnan(r.real) or np.isnan(r.imag), args)
    if not isinstance(r, float | np.floating) or np.isfinite(r):
        return 0
    return _kind(np.isnan(r), args)


def finite_in(p, r):
    """Whether result ``r`` is finite once stored into output ``p`` (of ``p.dtype``): true for
    integer and bool outputs. The common case: one compare per element on the GPU."""
    with np.errstate(all="ignore"):
        stored = np.asarray(r).astype(p.dtype)
    return not np.issubdtype(p.dtype, np.inexact) or bool(np.all(np.isfinite(stored)))


def publish(flags, bits):
    """Store the kinds ``bits`` one thread found into the flag slot ``flags`` (bytes 0 to 3,
    byte ``k`` holding bit ``k``: stores of the same value by many threads cannot lose one)."""
    if bits:
        for k in range(4):
            if bits & (1 << k):
                flags[k] = 1 << k


@functools.cache
def device_overloads() -> None:
    """Give the helpers above their GPU implementations (numba-cuda overloads), once, before
    the first kernel compiles (:mod:`.kernels` calls this): not at import, which would import
    numba-cuda in a process that only loads kernels from the disk cache."""
    from numba import cuda
    from numba.core import types
    from numba.cuda.extending import overload

    _FULL = 0xFFFFFFFF

    @overload(_one, inline="always")
    def _one_typing(a):
        if isinstance(a, types.Complex):
            def complex_bits(a):
                re, im = _one(a.real), _one(a.imag)
                return (re | im) & (_NAN | _INF) | (re & im & _ZERO)
            return complex_bits
        if isinstance(a, types.Float):
            return lambda a: _NAN if a != a else _INF if abs(a) == math.inf else _ZERO if a == 0 else 0
        if isinstance(a, types.Integer | types.Boolean):
            return lambda a: _ZERO if a == 0 else 0
        return lambda a: 0

    @overload(_inputs, inline="always")
    def _inputs_typing(args):
        if len(args) == 0:
            return lambda args: 0
        return lambda args: _one(args[0]) | _inputs(args[1:])

    @overload(_kind)
    def _kind_typing(nan, args):  # the rare branch: the Python body, its helpers overloaded
        return _kind

    def _threshold(out: types.Type) -> float:
        """The magnitude from which a value rounds to infinity when stored as ``out``: halfway
        between ``out``'s largest value and the next power of two (exact in float64; in the
        value's own type, where that is ``out``, it rounds to inf: the test is ``abs(r) < inf``)."""
        info = np.finfo(str(out))  # half an ulp of max: 2**(maxexp - 1 - nmant) / 2
        return float(info.max) + math.ldexp(1.0, info.maxexp - 2 - info.nmant)

    @overload(finite_in, inline="always")
    def _finite_in_typing(p, r):
        out = p.dtype
        if isinstance(out, types.Complex) and isinstance(r, types.Complex):
            part, limit = r.underlying_float, _threshold(out.underlying_float)
            return lambda p, r: abs(r.real) < part(limit) and abs(r.imag) < part(limit)
        if isinstance(out, types.Float) and isinstance(r, types.Float):
            typ, limit = r, _threshold(out)
            return lambda p, r: abs(r) < typ(limit)
        return lambda p, r: True

    @overload(flag, inline="always")
    def _flag_typing(r, args):
        # r: a stored value, float16 already widened to float32 (no half-precision arithmetic).
        if isinstance(r, types.Complex):
            def complex_flag(r, args):
                if abs(r.real) < math.inf and abs(r.imag) < math.inf:
                    return 0
                return _kind(r.real != r.real or r.imag != r.imag, args)
            return complex_flag
        if not isinstance(r, types.Float):
            return lambda r, args: 0

        def float_flag(r, args):
            if abs(r) < math.inf:
                return 0
            return _kind(r != r, args)
        return float_flag

    @overload(publish, inline="always")
    def _publish_typing(flags, bits):
        # Every thread of a block reaches this (the templates end with it): the warp votes,
        # and only a warp that found something ORs its lanes' bits and stores, once per kind.
        def impl(flags, bits):
            if cuda.any_sync(_FULL, bits != 0):
                b = np.int32(bits)
                b |= cuda.shfl_xor_sync(_FULL, b, 16)
                b |= cuda.shfl_xor_sync(_FULL, b, 8)
                b |= cuda.shfl_xor_sync(_FULL, b, 4)
                b |= cuda.shfl_xor_sync(_FULL, b, 2)
                b |= cuda.shfl_xor_sync(_FULL, b, 1)
                if cuda.laneid == 0:
                    if b & DIVIDE:
                        flags[0] = np.uint8(DIVIDE)
                    if b & OVERFLOW:
                        flags[1] = np.uint8(OVERFLOW)
                    if b & INVALID:
                        flags[3] = np.uint8(INVALID)
        return impl


# -- on the host ----------------------------------------------------------------------------------
class FlagRing:
    """One GPU's flag slots: :data:`SLOTS` words of mapped pinned memory (host array ``words``,
    device address ``base``). Slot 0 is the shared slot of launches whose flags nobody reads
    (:attr:`discard`); the others are taken in turn by calls that read theirs (:meth:`take`).

    A slot is taken again :data:`SLOTS` - 1 reading calls later: were its former launch still
    unfinished then (thousands of launches queued), its late store could show in the new one.
    """

    SLOTS = 4096

    def __init__(self, words: np.ndarray, base: int) -> None:
        self.words, self.base = words, base
        #: The device address of the slot that is never read.
        self.discard = base
        self._next = itertools.count()

    @staticmethod
    def nbytes() -> int:
        return 4 * FlagRing.SLOTS

    def take(self) -> tuple[int, int]:
        """A zeroed slot for one call: ``(slot, device address)``."""
        slot = 1 + next(self._next) % (self.SLOTS - 1)  # (count's next: atomic under the GIL)
        self.words[slot] = 0
        return slot, self.base + 4 * slot

    def status(self, slot: int) -> int:
        """NumPy's bits stored into ``slot`` (read once the launches that use it have finished)."""
        word = int(self.words[slot])
        return (word | word >> 8 | word >> 16 | word >> 24) & 0xFF


def masked_status(status: int, result: np.ndarray, inputs: list[Any], types: tuple[np.dtype, ...],
                  where: Any) -> int:
    """``status`` restricted to the elements ``where`` selects, from the values on the host: the
    host pipeline computes every element and applies ``where`` when it copies the results back,
    so its kernels also flag elements that NumPy never computes. The kernels' own test
    (:func:`flag`), array-wise, on ``result`` and on the ``inputs`` cast to the loop's ``types``;
    called only when some kind was found."""
    mask = np.broadcast_to(where, result.shape)
    r = result[mask]
    with np.errstate(all="ignore"):
        args = [np.broadcast_to(np.asarray(a).astype(t, copy=False), result.shape)[mask]
                for a, t in zip(inputs, types)]
        parts = (r.real, r.imag) if r.dtype.kind == "c" else (r,) if r.dtype.kind == "f" else ()
        if not parts:
            return 0
        nan = np.zeros(r.shape, bool)
        bad = np.zeros(r.shape, bool)
        for part in parts:
            nan |= np.isnan(part)
            bad |= ~np.isfinite(part)
        in_nan, in_inf, in_zero = (np.zeros(r.shape, bool) for _ in range(3))
        for a in args:
            for part in (a.real, a.imag) if a.dtype.kind == "c" else (a,):
                in_nan |= np.isnan(part) if part.dtype.kind == "f" else False
                in_inf |= np.isinf(part) if part.dtype.kind == "f" else False
            in_zero |= a == 0
    infinite = bad & ~nan & ~in_nan & ~in_inf
    found = (INVALID if np.any(nan & ~in_nan) else 0) | (DIVIDE if np.any(infinite & in_zero) else 0)
    return status & (found | (OVERFLOW if np.any(infinite & ~in_zero) else 0))


#: NumPy's error state as a context variable: NumPy sets a new, immutable object in it on every
#: change (``seterr``, ``errstate``, ``seterrcall``), so a state's object identifies its modes.
try:
    from numpy._core._ufunc_config import _extobj_contextvar

    errstate_now = _extobj_contextvar.get
except (ImportError, AttributeError):  # pragma: no cover - a NumPy without it: ask every time
    def errstate_now() -> Any:
        return object()

_SYNCHRONOUS = ("raise", "call", "print", "log")
#: ``(state, watched)`` for the last error state looked at (NumPy's object, by identity): one
#: tuple, replaced whole, so that threads see a pair or the one before it.
seen: tuple[Any, bool] = (None, False)


def watched() -> bool:
    """Whether a call on device arrays must wait for its kernel and read its flags now: NumPy's
    handling is ``'raise'``, ``'call'``, ``'print'`` or ``'log'`` for a kind the kernels find.
    About 0.1 us: the answer is kept for the last error state seen (:data:`seen`); the device
    executor inlines this."""
    state = errstate_now()
    last = seen
    return last[1] if last[0] is state else watch(state)


def watch(state: Any) -> bool:
    """:func:`watched` for the error state ``state`` (``errstate_now()``), asked of NumPy."""
    global seen
    modes = np.geterr()
    found = any(bit & FLAGGED and modes[key] in _SYNCHRONOUS for bit, key, _ in KINDS)
    seen = (state, found)
    return found
