"""Floating-point errors of a kernel's run, reported through NumPy's error handling.

NumPy clears the floating-point status before a ufunc's inner loop, reads it after, and hands
what it found to the handling :func:`numpy.seterr` / :func:`numpy.errstate` set
(``numpy/_core/src/umath/extobj.c``, ``PyUFunc_handlefperr``): for each of divide, overflow,
underflow and invalid, in that order, ``'ignore'`` does nothing, ``'warn'`` issues
``RuntimeWarning("overflow encountered in exp")``, ``'raise'`` raises ``FloatingPointError``
with the same words (and stops), ``'call'`` calls ``numpy.geterrcall()(kind, status)``,
``'print'`` writes ``"Warning: ... encountered in exp"`` to stderr and ``'log'`` passes that
line to the ``write`` method of ``numpy.geterrcall()``.

Targets find the status their own way (:mod:`.cpu.fpflags` reads the CPU's flags inside the
compiled loops; the cuda kernels derive a flag word from the values they compute) and call
:func:`report` with NumPy's bits when it is not zero: a call that raises nothing pays one
integer test.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable

import numpy as np

#: NumPy's status bits (``npy_math.h``: ``NPY_FPE_*``).
DIVIDE, OVERFLOW, UNDERFLOW, INVALID = 1, 2, 4, 8

#: The kinds in the order NumPy handles them, with ``np.geterr()``'s key and the message's words.
KINDS = ((DIVIDE, "divide", "divide by zero"), (OVERFLOW, "over", "overflow"),
         (UNDERFLOW, "under", "underflow"), (INVALID, "invalid", "invalid value"))

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reportable(status: int) -> int:
    """The bits of ``status`` whose handling is not ``'ignore'`` now (in this thread/context)."""
    if not status:
        return 0
    modes = np.geterr()
    return sum(bit for bit, key, _ in KINDS if status & bit and modes[key] != "ignore")


def ignoring_all() -> bool:
    """Whether NumPy's handling of every kind is ``'ignore'`` now (``np.errstate(all='ignore')``):
    no status read is needed. ``np.geterr()``: about a microsecond."""
    modes = np.geterr()
    return all(modes[key] == "ignore" for _, key, _ in KINDS)


def report(status: int, name: str, refine: Callable[[int], int] | None = None) -> None:
    """Hand ``status`` (NumPy's bits) of a run of kernel ``name`` to NumPy's error handling.

    ``refine``, if given, is asked for a corrected status when some bit of it would be acted
    on (for the cpu target: ``'invalid'`` raised by ordered comparisons of NaN inputs in
    vectorized code, see :mod:`.cpu.fpflags`); it is never called when every raised kind is
    ignored, so that its cost falls on calls that warn or raise anyway.
    """
    if not status:
        return
    modes = np.geterr()
    if refine is not None and any(status & bit and modes[key] != "ignore" for bit, key, _ in KINDS):
        status = refine(status)
    for bit, key, words in KINDS:
        if status & bit:
            _handle(modes[key], words, name, status)


def _handle(mode: str, words: str, name: str, status: int) -> None:
    """NumPy's ``_error_handler`` for one kind (``extobj.c``), message and arguments as there."""
    if mode == "ignore":
        return
    message = f"{words} encountered in {name}"
    if mode == "warn":
        warnings.warn(message, RuntimeWarning, stacklevel=_caller_level())
    elif mode == "raise":
        raise FloatingPointError(message)
    elif mode == "print":
        print(f"Warning: {message}", file=sys.stderr)
    elif mode == "call":
        handler = np.geterrcall()
        if handler is None:
            raise NameError(f"python callback specified for {words} (in  {name}) but no function found.")
        handler(words, status)
    elif mode == "log":
        handler = np.geterrcall()
        if handler is None:
            raise NameError(f"log specified for {words} (in {name}) but no object with write "
                            "method found.")
        handler.write(f"Warning: {message}\n")


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside gpufuncs: a warning points at the user's
    line, as NumPy's points at the line that called the ufunc."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
