"""The layers of odradek/__init__.py and broker/__init__.py, held by reading every import (AST).

Rules, each a statement about the source tree:
1. One namespace: nothing imports ``broker``, ``protocol``, ``storage`` or ``controller`` by its bare
   name; everything goes through ``odradek.`` (a bare import would load a second copy of a module).
2. The four runtime packages are layered protocol < storage < controller < broker: a package imports
   only packages below it, TYPE_CHECKING imports included (a type is a dependency too).
3. The runtime packages never import the test tooling (``odradek.testing``).
4. Inside the broker: ``runtime/`` (timing wheel, purgatory, completion, metrics) imports nothing else
   of the broker; the handlers are reached only through ``api/`` (the registry) and the builder
   (``server``); nothing imports the
   entry points ``main`` and ``server`` but ``main`` itself and the test tooling.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = ("protocol", "storage", "controller", "broker")
LAYER = {name: i for i, name in enumerate(RUNTIME)}
SCANNED = (*RUNTIME, "odradek", "tests", "tools", "bench", "pipeline")


def _module_name(rel: str) -> str:
    parts = list(Path(rel).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in RUNTIME:
        parts.insert(0, "odradek")
    return ".".join(parts)


def _sources(top: str) -> list[Path]:
    base = REPO / top
    if top == "odradek":  # its own files only, not the links to the four packages
        return [p for p in base.rglob("*.py") if p.relative_to(base).parts[0] not in RUNTIME]
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(source: str, rel: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file at ``rel``, relative ones resolved."""
    tree = ast.parse(source, rel)
    here = _module_name(rel).split(".")
    is_package = rel.endswith("__init__.py")
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            # ``from odradek.broker import server`` names a module too.
            out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def _all_imports(tops: tuple[str, ...]) -> list[tuple[str, int, str]]:
    files = [(str(p.relative_to(REPO)), p.read_text()) for top in tops for p in _sources(top)]
    return _imports_of(files)


def _imports_of(files: list[tuple[str, str]]) -> list[tuple[str, int, str]]:
    return [(rel, line, target) for rel, source in files for line, target in _imports(source, rel)]


def bare_imports(imports: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    return [(f, line, t) for f, line, t in imports if t.split(".")[0] in RUNTIME]


def upward_imports(imports: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    upward = []
    for f, line, target in imports:
        source_pkg = f.split("/")[0]
        parts = target.split(".")
        if parts[0] != "odradek" or len(parts) < 2:
            continue
        if parts[1] == "testing" or (parts[1] in LAYER and LAYER[parts[1]] > LAYER[source_pkg]):
            upward.append((f, line, target))
    return upward


def test_nothing_imports_the_packages_by_their_bare_names() -> None:
    assert bare_imports(_all_imports(SCANNED)) == []


def test_runtime_packages_import_only_the_layers_below_them() -> None:
    assert upward_imports(_all_imports(RUNTIME)) == []


def _broker_folder(path_or_module: str) -> str | None:
    parts = path_or_module.replace("/", ".").removesuffix(".py").split(".")
    if parts[0] == "odradek":
        parts = parts[1:]
    if len(parts) < 2 or parts[0] != "broker":
        return None
    return parts[1]


def test_the_broker_runtime_folder_imports_nothing_else_of_the_broker() -> None:
    reaching_out = [(f, line, t) for f, line, t in _all_imports(("broker",))
                    if _broker_folder(f) == "runtime" and _broker_folder(t) not in (None, "runtime")]
    assert reaching_out == []


def test_handlers_are_reached_through_the_api_folder_only() -> None:
    outside = [(f, line, t) for f, line, t in _all_imports(("broker",))
               if t.startswith("odradek.broker.api.handlers") and _broker_folder(f) != "api"
               and f != "broker/server.py"]
    assert outside == []


def test_only_main_and_the_test_tooling_import_the_entry_points() -> None:
    entry = ("odradek.broker.main", "odradek.broker.server")
    importers = {f for f, _, t in _all_imports(("broker", "odradek"))
                 if t in entry or any(t.startswith(e + ".") for e in entry)}
    assert importers <= {"broker/main.py", "broker/server.py", *(
        str(p.relative_to(REPO)) for p in (REPO / "odradek" / "testing").rglob("*.py"))}, importers


@pytest.mark.parametrize("bad, rule", [
    ("from broker.server import Broker\n", bare_imports),
    ("from odradek.broker.server import Broker\n", upward_imports),
    ("if TYPE_CHECKING:\n    from odradek.controller.image import MetadataImage\n", upward_imports),
    ("import odradek.testing.cluster\n", upward_imports),
    ("from odradek.protocol import codec\n", None),
])
def test_the_rules_catch_a_planted_import(bad: str, rule) -> None:
    """An import planted in a storage module is caught by its rule (the checks can fail), and an
    allowed one by none."""
    imports = _imports_of([("storage/planted.py", bad)])
    for check in (bare_imports, upward_imports):
        assert bool(check(imports)) == (check is rule), (check.__name__, bad)


# The broker's folders bottom-up: a folder imports only folders before it (TYPE_CHECKING imports included),
# the entry points (main, server) import anything. broker/__init__.py describes each folder.
BROKER_FOLDERS = ("runtime", "config", "security", "network", "metadata", "quota", "coordinator", "replica",
                  "txn", "group", "share", "client_telemetry", "cluster", "api", "faults", "launcher")

# The imports that still run upward, each with why; the test fails on a new one, and on one of these that
# is gone (so this list only shrinks).
KNOWN_UPWARD = {
    ("config", "security"): "config validation asks security/sasl which SASL keys are implemented and "
                            "checks the listeners' TLS settings",
    ("security", "metadata"): "authz and quotas ask whether a request was forwarded by another broker "
                              "(metadata/controller_client.is_forwarded)",
    ("security", "api"): "authz checks and SASL take the ApiRequest type (annotations only)",
    ("quota", "api"): "client quotas wrap a handler's answer (the ApiRequest and Handler types)",
    ("group", "api"): "the group coordinator's entry points take the ApiRequest type",
}


def _folder_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for f, line, target in _all_imports(("broker",)):
        source = _broker_folder(f)
        dest = _broker_folder(target)
        if source in BROKER_FOLDERS and dest in BROKER_FOLDERS and source != dest:
            edges.setdefault((source, dest), []).append(f"{f}:{line}")
    return edges


def test_every_broker_folder_is_placed_in_the_order() -> None:
    folders = {p.name for p in (REPO / "broker").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(BROKER_FOLDERS)


def test_broker_folders_import_only_folders_below_them() -> None:
    rank = {name: i for i, name in enumerate(BROKER_FOLDERS)}
    upward = {edge: where for edge, where in _folder_edges().items() if rank[edge[1]] > rank[edge[0]]}
    assert {edge: where for edge, where in upward.items() if edge not in KNOWN_UPWARD} == {}
    assert set(KNOWN_UPWARD) - set(upward) == set(), "gone: remove it from KNOWN_UPWARD"
