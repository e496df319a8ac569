"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml), and a Griffe extension.

- The API reference's built-in kernels are generated from ``gf.registry`` when the site is
  built (the ``<!-- gpufuncs:builtin-kernels -->`` marker in ``docs/api.md``), so a new module in
  ``gpufuncs/kernels/`` gets its entry with no edit here.
- :class:`RstRoles` (a Griffe extension, listed under mkdocstrings' options) turns the Sphinx
  roles of the docstrings (``:func:`~gpufuncs.get```) into cross-references that mkdocstrings
  resolves where the target is documented and shows as code where it is not.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any

import numpy as np

MARKER = "<!-- gpufuncs:builtin-kernels -->"

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`(~?)([\w.]+)`")


def _role_to_autoref(match: re.Match) -> str:
    short, target = match.groups()
    title = target.rsplit(".", 1)[-1] if short else target
    if not target.startswith("gpufuncs"):
        return f"`{title}`"
    return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'


def rst_roles_to_markdown(text: str) -> str:
    """``:func:`~gpufuncs.get``` -> an optional autoref showing ``get``; non-gpufuncs -> code."""
    return _ROLE.sub(_role_to_autoref, text)


try:  # the extension is only needed (and Griffe only installed) when the site is built
    import griffe
except ImportError:  # pragma: no cover
    griffe = None
else:
    class RstRoles(griffe.Extension):
        """Rewrite Sphinx roles in every docstring Griffe loads."""

        def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = rst_roles_to_markdown(obj.docstring.value)


# -- built-in kernels ----------------------------------------------------------------------------
def _name_of(func: Any) -> str:
    module = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    public = module.split(".")[0] if module.startswith("numpy") else module  # np.exp: numpy.exp
    return f"{public}.{name}" if public else name


def _reference(func: Any) -> tuple[str, str]:
    """The reference for the table (its name, or a lambda's text), and its source below the
    table when it is a private helper of the kernel's module."""
    if func is None:
        return "none declared", ""
    name = _name_of(func)
    try:
        source = inspect.getsource(func).strip()
    except (OSError, TypeError):
        source = ""
    if "<lambda>" in name and source and "\n" not in source:
        return f"`{source}`", ""
    if name.rsplit(".", 1)[-1].startswith("_") and source:
        details = f'??? note "Source of `{name}`"\n\n    ```python\n' + textwrap.indent(
            source, "    ") + "\n    ```\n"
        return f"`{name}` (source below)", details
    return f"`{name}`", ""


def _number(value: float, dtype: np.dtype) -> str:
    """``value`` as a multiple of the dtype's epsilon or tiny where it is one, else %.3g."""
    info = np.finfo(dtype)
    for unit, size in (("eps", float(info.eps)), ("tiny", float(info.tiny))):
        ratio = value / size
        if ratio >= 1 and abs(ratio - round(ratio)) < 1e-9:
            return f"{round(ratio)} {unit}" if round(ratio) != 1 else unit
    return f"{value:.3g}"


def _tolerances(spec: Any) -> str:
    parts = []
    for key, tol in spec.tolerances.items():
        target, dtype = key if isinstance(key, tuple) else (None, np.dtype(key))
        dtype = np.dtype(dtype)
        fields = [f"rtol = {_number(tol.rtol, dtype)}"] if tol.rtol else []
        fields += [f"atol = {_number(tol.atol, dtype)}"] if tol.atol else []
        fields += [f"{tol.ulps} ULP"] if tol.ulps is not None else []
        where = f"{dtype}" + (f" on {target}" if target else "")
        parts.append(f"{where}: {', '.join(fields) or 'exact'}")
    return "; ".join(parts) or "default: rtol = 5 eps"


def _anchors(benchmark: Any) -> str:
    """What ``python -m benchmarks`` compares the kernel with, from its declaration."""
    if benchmark is None:
        return "none declared"
    found = [f"`{label}`" for label in benchmark.expressions]
    found += ["CuPy `ElementwiseKernel`"] if benchmark.cupy else []
    return ", ".join([*found, "Numba's bare ufunc", "a copy of the same bytes"])


def kernel_entry(kernel: Any) -> str:
    """The API reference entry of one registered kernel."""
    spec = kernel.spec
    loops = ", ".join(str(loop.dtype) for loop in spec.loops)
    domains = ", ".join(f"`{name}` in [{lo:g}, {hi:g}]" for name, (lo, hi) in spec.domains.items())
    module = spec.pyfunc.__module__
    reference, reference_source = _reference(spec.reference)
    rows = [("call", f"`gf.{kernel.__name__}{inspect.signature(kernel)}`"),
            ("loops", loops),
            ("layout", f"`{spec.layout.text}`" if spec.layout else "elementwise"),
            ("reference", reference),
            ("tolerance", _tolerances(spec)),
            ("input domains", domains or "any value"),
            ("benchmark anchors", _anchors(spec.benchmark)),
            ("source", f"`{module.replace('.', '/')}.py`")]
    table = "\n".join(["| | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)])
    doc = rst_roles_to_markdown(inspect.cleandoc(spec.doc or ""))
    return f"### `{kernel.__name__}`\n\n{doc}\n\n{table}\n\n{reference_source}"


def builtin_kernels() -> str:
    """Entries for every kernel registered by ``gpufuncs.kernels``, sorted by name."""
    import gpufuncs as gf
    from gpufuncs.kernels import builtin_names

    return "\n".join(kernel_entry(gf.registry[name]) for name in builtin_names())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: fill the built-in kernels' marker."""
    return markdown.replace(MARKER, builtin_kernels()) if MARKER in markdown else markdown
