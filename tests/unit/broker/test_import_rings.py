"""No import ring inside broker/ but the few named here, each with why it stays (issue 29, item 2).

Every import counts: at module level, inside a function, and under ``if TYPE_CHECKING:`` - a ring
of type-only imports still means each module of it has to be read with all the others. Before
issue 29's item 2 broker/ had six rings over 27 modules: 13 through the request seam (dispatcher,
request_types, registry, connection, request channel, quotas, authz, the SASL authenticator, the
group coordinator, api_versions, ...), 6 inside group/ (context, shard and the managers), and four
pairs. Now four pairs stay, below, each defended; a new ring fails here, and a listed one that is
broken fails too, so the list stays true.

Modules are named by their file's stem, so the check reads the same before and after a move into
folders; imports are read in both spellings (``broker.x`` and ``odradek.broker.x``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

BROKER = Path(__file__).resolve().parents[3] / "broker"

# Rings that stay, by module stems, and why.
KNOWN_RINGS: dict[frozenset[str], str] = {
    frozenset({"metadata", "metadata_authz"}):
        "Metadata with an authorizer is one handler in two files: metadata_authz imports metadata's "
        "answer helpers at call time and types metadata's Services",
    frozenset({"connection", "request_channel"}):
        "the network seam in two files, as Kafka's Processor and RequestChannel: a connection submits "
        "its frames to its channel, the channel queues connections and completes their responses "
        "(type-only imports both ways)",
    frozenset({"partition", "append_lane"}):
        "a Partition holds its AppendLane while its topic recompresses and the lane appends to that "
        "partition: a part and its owner (type-only on the partition's side)",
    frozenset({"replica_manager", "log_dir_mover"}):
        "the mover is the replica manager's AlterReplicaLogDirs (Kafka's "
        "ReplicaManager.alterReplicaLogDirs) and reads the manager's partitions, pools and cleaner "
        "(type-only on the mover's side)",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(BROKER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, package: str) -> Iterator[str]:
    """Every dotted name an import statement can bind (``from a import b``: a.b and a)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module or ""
        for alias in node.names:
            yield f"{module}.{alias.name}"
        yield module


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in BROKER.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, package):
                target = target.removeprefix("odradek.")
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def rings(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_ring_finder_finds_a_ring_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert rings(graph) == [{"a", "b", "c"}]


def test_broker_has_no_import_ring_but_the_known_ones() -> None:
    found = {frozenset(name.rpartition(".")[2] for name in ring): sorted(ring) for ring in rings(import_graph())}
    unexplained = {stems: members for stems, members in found.items() if stems not in KNOWN_RINGS}
    assert not unexplained, f"import rings in broker/ (break them, or name one in KNOWN_RINGS with why): {unexplained}"
    gone = set(KNOWN_RINGS) - set(found)
    assert not gone, f"no longer rings, take them out of KNOWN_RINGS: {sorted(map(sorted, gone))}"
