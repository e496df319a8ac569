"""The cuda target's disk cache of compiled kernels: a hit is loaded by the driver, with no numba-cuda.

numba-cuda's own disk cache (``cache=True``) keeps a compiled kernel as a pickled object, and
loading one rebuilds numba-cuda's target context first: in a fresh process that was 0.7 s of
the first call on an H100 (its 152 typing and lowering registries, SciPy's BLAS among them,
which its array functions look for), after 0.3 s of importing ``numba.cuda``, where CuPy loads a
cached kernel in a millisecond. An entry here is the linked cubin and the name of its entry
point, keyed on everything the code depends on (:func:`entry_key`); a hit is one
``cuLibraryLoadData``, and numba-cuda is neither imported nor asked. It compiles on a miss only,
and the entry is written then.

Entries live in Numba's cache directory for this module, as the CPU loops' do for theirs (see
:func:`gpufuncs.warmup.cache_directory`); damage to one, or an unusable directory, is a miss.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from ...spec import KernelSpec, Loop
from ..cpu import kernel_key
from ..cpu.cache import entry_store, load_entry, save_entry
from . import fpflags
from .runtime import Runtime, check


def entry_key(spec: KernelSpec, loop: Loop, argtypes: tuple[Any, ...], per_thread: int,
              runtime: Runtime) -> str | None:
    """The key of a kernel of ``spec`` compiled for ``loop``, Numba argument types ``argtypes``
    and ``per_thread`` loop elements per thread, for ``runtime``'s GPU; ``None`` for a kernel
    that is not cached (see :func:`~..cpu.kernel_key`).

    The key holds :func:`~..cpu.kernel_key` (the kernel's module source, what its code depends
    on beyond it, the kernels and functions it calls among them, and the shared code
    generation: complex and integer arithmetic, the scalar helpers), the sources of this
    package's templates (:func:`_generator_digest`), whether results are checked for
    floating-point errors, the GPU's compute capability, the driver's version and Numba's and
    numba-cuda's."""
    kernel = kernel_key(spec)
    if kernel is None:
        return None
    major, minor = runtime.compute_capability
    return ":".join(map(str, (kernel, loop.signature, argtypes, per_thread, fpflags.ENABLED,
                              _generator_digest(), f"sm_{major}{minor}", *_versions())))


#: The keys of the kernels this process loaded from the disk cache, and of those it saved there
#: (appends: safe from any thread). ``python -m gpufuncs warmup`` counts what it compiles here.
loaded: list[str] = []
saved: list[str] = []


def load(key: str) -> Any:
    """The loaded kernel (a ``CUkernel``) saved under ``key``, or ``None``: not saved, damaged,
    or a cubin this driver cannot load (numba-cuda then compiles it again)."""
    found = load_entry(_store(key), key)
    if not (isinstance(found, tuple) and len(found) == 2):
        return None
    name, cubin = found
    try:
        kernel = kernel_from(name, cubin)
    except Exception:  # not a cubin this driver loads, or not a name and bytes at all
        return None
    loaded.append(key)
    return kernel


def save(key: str, name: str, cubin: bytes) -> None:
    """Save the cubin of a kernel compiled for ``key``, its entry point ``name``."""
    save_entry(_store(key), key, (name, bytes(cubin)))
    saved.append(key)


#: Every library loaded: a kernel lives as long as its library, and ours as long as the process.
_libraries: list[Any] = []


def kernel_from(name: str, cubin: bytes) -> Any:
    """The ``CUkernel`` named ``name`` of a cubin, loaded with ``cuLibraryLoadData``: context
    independent, so one load serves every GPU of its architecture (``cuKernelGetFunction``
    gives each context's function: see :meth:`.Runtime.function`). Through ``cuda.bindings``:
    ``cuda.core``'s ``ObjectCode`` does the same, but importing ``cuda.core`` takes 0.1 s, as
    long as the rest of a first call. Raises ``RuntimeError`` for a cubin the driver rejects."""
    from cuda.bindings import driver

    err, library = driver.cuLibraryLoadData(cubin, None, None, 0, None, None, 0)
    check(err, f"loading the cubin of {name}")
    err, kernel = driver.cuLibraryGetKernel(library, name.encode())
    check(err, f"finding {name} in its cubin")
    _libraries.append(library)
    return kernel


def _store(key: str) -> Any:
    return entry_store(entry_key, key)


@functools.cache
def _generator_digest() -> str:
    """A digest of the sources that generate a kernel's code around its scalar function and
    that :func:`~..cpu.kernel_key` does not cover: this package (the templates, the flags) and
    the arithmetic replaced while kernels compile (``base``)."""
    package = Path(__file__).parent
    digest = hashlib.sha256()
    for path in (*sorted(package.glob("*.py")), package.parent / "base.py"):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


@functools.cache
def _versions() -> tuple[str, ...]:
    """Numba's and numba-cuda's versions and the driver's: what else compiles or loads it."""
    import numba
    from cuda.bindings import driver
    from numba_cuda import __version__ as numba_cuda_version

    err, version = driver.cuDriverGetVersion()
    check(err, "reading the driver's version")
    return numba.__version__, numba_cuda_version, f"driver {version}"
