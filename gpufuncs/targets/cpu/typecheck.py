"""Type-check a kernel's body for each declared signature when the kernel is defined.

A body that cannot be typed for a declared signature (``return x.foo``, ``return "a"``, a
global that does not exist, a complex result from a real signature) used to fail at the first
call, as a ``KernelCompileError``. :func:`check_signatures` runs Numba's front end and type
inference, not code generation, on the copy the ``cpu`` target compiles
(:func:`~gpufuncs.targets.cpu.vecmath.with_vector_math`: the same typing, kernels it calls
included) and raises :class:`~gpufuncs.KernelDefinitionError` naming the kernel, the
signature and Numba's message, without Numba's terminal colours.

Cost: the first typing in a process warms Numba's typing machinery up (about 3 s on the 2-core
machine, which the first compilation would otherwise pay), then tens of milliseconds per
signature (more the first time a vector-math function is typed for a dtype; the compilation
after it reuses that). It is skipped for the built-in kernels (tested, and defined at import),
and for a kernel whose code passed it before: a marker per kernel key and loop in the cache
directory (see :func:`marker`), so a new process that defines the same kernels again (and
loads their loops from the disk cache) pays nothing.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numba
from numba.core import compiler, sigutils, typed_passes
from numba.core.compiler import CompilerBase, DefaultPassBuilder, Flags, _EarlyPipelineCompletion
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.errors import NumbaError
from numba.core.registry import cpu_target

from ...errors import KernelCompileError, KernelDefinitionError
from ...spec import KernelSpec
from ..base import compiling
from . import auto
from .vecmath import with_vector_math

#: Terminal colour codes (Numba highlights its messages).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: The line Numba puts before the message of an error in a pipeline stage.
_STAGE = re.compile(r"^Failed in \w+ mode pipeline \(step: [^)]*\)\n")


@register_pass(mutates_CFG=False, analysis_only=True)
class _Typed(FunctionPass):
    """Stop the pipeline once the function is typed, with its return type."""

    _name = "gpufuncs_typed"

    def __init__(self) -> None:
        FunctionPass.__init__(self)

    def run_pass(self, state: Any) -> bool:
        raise _EarlyPipelineCompletion(state.return_type)


class _TypeOnly(CompilerBase):
    """Numba's untyped passes (bytecode to IR, inlining) and type inference; no lowering."""

    def define_pipelines(self) -> list[Any]:
        pm = DefaultPassBuilder.define_untyped_pipeline(self.state)
        pm.add_pass(typed_passes.NopythonTypeInference, "nopython frontend")
        pm.add_pass(_Typed, "stop once typed")
        pm.finalize()
        return [pm]


def numba_message(exc: BaseException) -> str:
    """Numba's message of ``exc`` without terminal colours or the pipeline-stage line."""
    return _STAGE.sub("", _ANSI.sub("", str(exc))).strip()


def type_signature(pyfunc: Any, signature: str) -> Any:
    """Type ``pyfunc`` (a kernel's copy) for ``signature``; its return type, or Numba's error.

    Under :func:`~gpufuncs.targets.base.compiling`, as a compilation: the first typing of a
    process installs Numba's pending registrations (the vector math's among them), which a
    Ctrl-C in the middle would leave half installed for the life of the process."""
    args, return_type = sigutils.normalize_signature(signature)
    flags = Flags()
    flags.nrt = False
    flags.error_model = "numpy"
    with compiling():
        return compiler.compile_extra(cpu_target.typing_context, cpu_target.target_context, pyfunc,
                                      args, return_type, flags, {}, pipeline_class=_TypeOnly)


def marker(key: str, loop_types: str) -> Path:
    """The file that records that kernel code of cache key ``key`` typed for ``loop_types``
    (under the cache directory of :mod:`.auto`, with Numba's version in the name)."""
    digest = hashlib.sha256(f"{key}:{loop_types}:{numba.__version__}".encode()).hexdigest()[:32]
    return auto._default_directory() / "typed" / digest


def check_signatures(spec: KernelSpec) -> None:
    """Raise :class:`KernelDefinitionError` unless the body types for every declared loop.

    Parameters
    ----------
    spec : KernelSpec
        A kernel with declared signatures (lazy kernels have none to check). Skipped for loops
        whose marker exists (see the module docstring); a kernel without a disk-cache key (no
        source file, closure values that cannot be digested) is always checked.

    Raises
    ------
    KernelDefinitionError
        Naming the kernel, the signature and Numba's message, colourless.
    """
    from . import kernel_key

    key = kernel_key(spec)
    pending = [loop for loop in spec.loops
               if key is None or not marker(key, loop.types).exists()]
    if not pending:
        return
    try:
        copy = with_vector_math(spec.pyfunc)
    except KernelCompileError as exc:  # a body that calls a gufunc kernel
        raise KernelDefinitionError(str(exc)) from None
    for loop in pending:
        try:
            type_signature(copy, loop.signature)
        except NumbaError as exc:
            raise KernelDefinitionError(
                f"kernel {spec.name!r}: its body cannot be compiled for signature "
                f"{loop.signature!r}: {numba_message(exc)}") from None
        if key is not None:
            _touch(marker(key, loop.types))


def _touch(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:  # an unwritable cache directory: checked again next time
        pass
