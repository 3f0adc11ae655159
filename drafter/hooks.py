"""Subclasses of mlx-lm's module classes whose `__call__` wraps the original.

drafter/forward.py swaps them in as a module's `__class__`; this module only makes
them, once per (prefix, class), so swapping back finds the plain class again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Call = Callable[..., Any]
_HOOKED: dict[tuple[str, type], type] = {}


def hooked_class(cls: type, prefix: str, hook: Callable[[Call], Call]) -> type:
    """The subclass of `cls` named prefix + its name whose `__call__` is
    `hook(cls.__call__)`."""
    key = (prefix, cls)
    if key not in _HOOKED:
        _HOOKED[key] = type(f"{prefix}{cls.__name__}", (cls,), {"__call__": hook(cls.__call__)})
    return _HOOKED[key]


def original_class(cls: type, prefix: str) -> type:
    """The class `hooked_class` made `cls` from with `prefix`; `cls` itself if none."""
    return next((orig for (p, orig), sub in _HOOKED.items() if sub is cls and p == prefix), cls)
