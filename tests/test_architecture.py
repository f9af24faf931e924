"""The direction of imports (docs/architecture.md), read from the source with `ast`.

protocol < store < server, client; the gateway on top of the server. Inside
`router/server` and `store` the folders are layers: each imports only the
layers below it, and no import of any kind (at run time, for type checking or
inside a function) goes round in a circle, so each folder can be read (and
tested) knowing only what lies below it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Bottom first. A name is a module or a folder (and all below it); names in one
# row are siblings, which do not import each other.
SERVER_LAYERS = (
    ("router.server.settings",),  # the configuration record, its table, file and data dir
    ("router.server.edge",),  # listener, WebSocket, HTTP, transports, handshake, identity
    ("router.server.core",),  # connections, dispatch, commands, subscriptions, delivery
    ("router.server.ops",),  # control, metrics, stats log, info page, collector policy
    ("router.server.open_stores",),  # the stores the configuration asks for
    ("router.server.router",),  # the composition root
    ("router.server.workers",),  # the supervisor of several worker processes
    ("router.server.cli",),  # the command line
    ("router.server", "router.server.__main__"),
)
STORE_LAYERS = (
    ("store.interfaces",),  # the two interfaces every kind implements
    ("store.durability",),  # fsync, atomic writes, group commits
    ("store.queue_table", "store.kinds"),  # the queue table; what every kind's opener gives
    ("store.memory", "store.journal", "store.sqlite", "store.postgres"),  # one folder per kind
    ("store.factory",),  # opens the kind a data directory holds
    ("store",),
)
LAYERS = {"router.server": SERVER_LAYERS, "store": STORE_LAYERS}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _named(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
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


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    """The modules an import statement runs; `from package import module` names
    the module too."""
    for name in _named(node, package):
        yield name
        if isinstance(node, ast.ImportFrom) and node.module:
            yield from (f"{name}.{alias.name}" for alias in node.names
                        if is_module(f"{name}.{alias.name}"))


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


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


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, every import counted:
    at run time, for type checking, and inside functions.

    A package's `__init__` run before its submodules is left out: that is how
    packages work, not a dependency of design.
    """
    graph = {}
    for path in files(package.replace(".", "/")):
        name = module_name(path)
        graph[name] = {i for i in all_imports(path)
                       if (i == package or i.startswith(package + ".")) and i != name}
    return graph


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str] | None:
    """(row, name) of the most specific name in `layers` covering the module."""
    found = [(len(name), row, name) for row, names in enumerate(layers) for name in names
             if module == name or (module.startswith(name + ".") and is_folder(name))]
    return max(found)[1:] if found else None


def is_folder(name: str) -> bool:
    return ROOT.joinpath(*name.split(".")).is_dir()


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


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_every_module_has_its_place_in_the_layers(package: str) -> None:
    graph = import_graph(package)
    assert graph
    assert {m for m in graph if layer_of(m, LAYERS[package]) is None} == set()
    names = {name for row in LAYERS[package] for name in row}
    assert {n for n in names if not is_module(n) and not is_folder(n)} == set()


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_folders_import_only_the_layers_below_them(package: str) -> None:
    """Type-only and function-level imports included; no exceptions."""
    layers = LAYERS[package]
    upward = set()
    for source, targets in import_graph(package).items():
        source_row, source_name = layer_of(source, layers)  # type: ignore[misc]
        for target in targets:
            target_row, target_name = layer_of(target, layers)  # type: ignore[misc]
            if target_row > source_row or (target_row == source_row
                                           and target_name != source_name):
                upward.add((source, target))
    assert upward == set()


def test_the_layer_check_sees_an_upward_import_and_a_sibling_import() -> None:
    layers = (("a.low",), ("a.left", "a.right"), ("a.top",))
    assert layer_of("a.low", layers) == (0, "a.low")
    assert layer_of("a.right", layers) == (1, "a.right")
    assert layer_of("a.nowhere", layers) is None
    assert layer_of("router.server.core.commands", SERVER_LAYERS) == (2, "router.server.core")


@pytest.mark.parametrize("package", ["router", "store"])
def test_no_import_circle_of_any_kind(package: str) -> None:
    """At run time, for type checking or inside a function: no module reaches
    itself again through its imports."""
    graph = import_graph(package)
    assert "router.server.router" in graph or package == "store"
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
    assert importers
    assert {m for m in importers if not m.startswith("router.server.cli.")} == set()
