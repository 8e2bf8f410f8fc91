"""Names of a package resolved on first use, so importing the package imports nothing.

    __getattr__, __dir__ = lazy_names(__name__, {"Client": "evotrainer.client"})

The CLI imports `evotrainer` for every command, and the sandbox's launcher process imports
`evotrainer.sandbox`: neither may pay for what it does not use (pydantic, pandas, the
runner). A package lists where each public name lives; the first access imports that
module and keeps the value in the package, so later accesses are plain lookups.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_names(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package`, resolving `where`'s names."""
    import sys

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        sys.modules[package].__dict__[name] = value  # resolved once
        return value

    def __dir__() -> list[str]:
        return sorted({*sys.modules[package].__dict__, *where})

    return __getattr__, __dir__
