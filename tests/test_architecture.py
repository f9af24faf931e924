"""The direction of imports (docs/architecture.md), read from the source with `ast`.

protocol < store < server, client; the gateway on top of the server. Inside
`router/server` the modules import each other without a circle, so each can be
read (and tested) knowing only what lies below it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVER = "router.server"
# The operation ports are handed the assembled Router (for type checking only):
# the one way back up to router.py.
OPERATION_PORTS = {("router.server.ops.control", "router.server.router"),
                   ("router.server.ops.metrics", "router.server.router")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if not node.level:
        yield node.module or ""
        return
    base = package.rsplit(".", node.level - 1)[0]
    if node.module:
        yield f"{base}.{node.module}"
    else:  # `from . import der`: the names are modules
        yield from (f"{base}.{alias.name}" for alias in node.names)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: list[ast.stmt], type_checking: bool) -> Iterator[ast.stmt]:
    """Statements run at import (functions' bodies left out); `if TYPE_CHECKING:`
    bodies only with `type_checking`."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if type_checking or not _is_type_checking(node):
                yield from _module_level(node.body, type_checking)
            yield from _module_level(node.orelse, type_checking)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(h.body for h in node.handlers)):
                yield from _module_level(block, type_checking)


def module_imports(path: Path, *, type_checking: bool) -> set[str]:
    """What the module imports when it is imported."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package(path)
    return {
        name
        for node in _module_level(tree.body, type_checking)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in _imported(node, package)
    }


def all_imports(path: Path) -> set[str]:
    """Every import in the file, functions' lazy ones included."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package(path)
    return {
        name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in _imported(node, package)
    }


def server_graph(*, type_checking: bool) -> dict[str, set[str]]:
    """router.server module -> the router.server modules it imports at module level.

    The package itself is left out: every submodule's import runs its
    `__init__` first, which is how packages work, not a dependency of design.
    """
    graph = {}
    for path in sorted((ROOT / "router" / "server").rglob("*.py")):
        name = module_name(path)
        if name != SERVER:
            imports = module_imports(path, type_checking=type_checking)
            graph[name] = {i for i in imports if i.startswith(SERVER + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as e:
        return list(e.args[1])
    return None


def files(package: str) -> list[Path]:
    found = sorted((ROOT / package).rglob("*.py"))
    assert found, f"no Python files under {package}"
    return found


def test_the_graph_reader_finds_a_circle_and_ignores_type_checking_and_function_imports(
    tmp_path: Path,
) -> None:
    source = (
        "from typing import TYPE_CHECKING\nfrom .b import x\n"
        "if TYPE_CHECKING:\n    from .c import y\n"
        "def f():\n    from .d import z\n"
    )
    path = ROOT / "router" / "server" / "a.py"
    tree_imports = {
        name
        for node in _module_level(ast.parse(source).body, type_checking=False)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in _imported(node, _package(path))
    }
    assert tree_imports == {"typing", "router.server.b"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_router_server_modules_import_each_other_without_a_circle_at_run_time() -> None:
    graph = server_graph(type_checking=False)
    assert "router.server.router" in graph and graph["router.server.router"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_parts_of_the_router_do_not_know_the_router_even_for_type_checking() -> None:
    """Only the operation ports name router.py; the parts it puts together
    (subscriptions, delivery, commands, ...) get what they use instead."""
    graph = server_graph(type_checking=True)
    for source, target in OPERATION_PORTS:
        graph[source].discard(target)
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_stores_do_not_import_the_router() -> None:
    offending = {
        (module_name(path), name)
        for path in files("store")
        for name in all_imports(path)
        if name.startswith(("router.server", "router.client", "router.gateway"))
    }
    assert offending == set()


def test_the_protocol_codec_imports_only_the_standard_library_and_nacl() -> None:
    """Pure: bytes in, values out; no trio, no sockets."""
    io_modules = {"socket", "ssl", "asyncio", "selectors", "select", "threading", "subprocess"}
    offending = set()
    for path in files("router/protocol"):
        for name in all_imports(path):
            top = name.partition(".")[0]
            allowed = (
                name.startswith("router.protocol")
                or top == "nacl"
                or (top in sys.stdlib_module_names and top not in io_modules)
            )
            if not allowed:
                offending.add((module_name(path), name))
    assert offending == set()


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("router/client", ("router.server", "router.gateway", "store")),
        ("router/gateway", ("router.client", "store")),
    ],
)
def test_the_client_and_the_gateway_stay_on_their_side(
    package: str, forbidden: tuple[str, ...]
) -> None:
    offending = {
        (module_name(path), name)
        for path in files(package)
        for name in all_imports(path)
        if name.startswith(forbidden)
    }
    assert offending == set()


def test_the_server_uses_the_gateway_only_to_offer_its_command() -> None:
    """The gateway sits on top of the server; `smp-router gateway` is the one
    place the server's command line reaches up to it."""
    importers = {
        module_name(path)
        for path in files("router/server")
        if any(name.startswith("router.gateway") for name in all_imports(path))
    }
    assert importers <= {"router.server.cli.main"}
