"""The store package's imports point one way: openers import backends, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import store

STORE_DIR = Path(store.__file__).parent
OPENERS = {"factory", "open_memory", "open_journal", "open_sqlite", "__init__"}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative ones as `store.<name>`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names.add(f"store.{base}" if node.level else base)
    return names


def modules() -> dict[str, set[str]]:
    return {p.stem: imported_modules(p) for p in STORE_DIR.glob("*.py")}


def test_no_backend_imports_the_factory_or_an_opener():
    openers = {f"store.{name}" for name in OPENERS}
    for name, imports in modules().items():
        if name not in OPENERS:
            assert not imports & openers, f"store/{name}.py imports {imports & openers}"


def test_the_store_does_not_import_the_router_server_or_load_modules_by_name():
    for name, imports in modules().items():
        assert not {i for i in imports if i.startswith("router.server")}, name
        assert "importlib" not in imports, name
