"""The built-in kernels, one module each; importing this package registers them.

To add a kernel, add a module here with a decorated scalar function: every module of this
package is imported, so the registry, the tests, the benchmarks and the docs' kernel list find
it with no other edit.
"""

import importlib
import pkgutil

from ..registry import registry

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")  # registration side effect


def builtin_names() -> list[str]:
    """Names of the registered kernels defined in this package (not a user's).

    Returns
    -------
    list of str
        As :func:`gpufuncs.names` gives them (a short name, or the full name where a user's
        kernel has the same short name), restricted to the built-in kernels.
    """
    return [name for name in registry if registry[name].full_name.startswith(f"{__name__}.")]
