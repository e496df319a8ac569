"""The built-in kernels, one module each; importing this package registers them.

To add a kernel, add a module here with a decorated scalar function and list it below.
"""

from . import clamp, exp, gaussian, hermite_norm  # noqa: F401  (registration side effect)
