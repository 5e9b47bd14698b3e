"""Lazy re-exports (PEP 562) for package `__init__` modules: a name is imported from its home module on
first use, so importing a package loads none of what it re-exports (tests/test_architecture.py checks)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, where: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`, re-exporting each name of `where` from the module it maps to."""
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> object:
        home = where.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
