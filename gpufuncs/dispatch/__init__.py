"""Dispatch: from a call to a validated, cached resolved call, and the ufunc methods.

``kernel`` holds the public callable (:class:`Kernel`), ``args`` the argument roles and call
signatures, ``plan`` the validation, ``methods`` ``outer``/``reduce``/``accumulate``/``at``.
Dispatch knows no device: targets recognise their own arrays (``gpufuncs.targets``).
"""

from .kernel import Kernel, ResolvedCall, SizedKernel

__all__ = ["Kernel", "ResolvedCall", "SizedKernel"]
