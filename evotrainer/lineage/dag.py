"""The lineage as an in-memory graph of branches, with typed errors.

    dag = LineageDAG.from_store(store, "demo")
    dag.ancestors("demo/lr-lower")        # ['demo/main']
    dag.topological_order()

Like alembic's revision map: a pure data structure built from (branch, parent, fork_seq)
rows, checked on construction (unknown parents, cycles), answering graph questions
without touching the database again. Cycles cannot be written through the store (a
parent always exists before its child); finding one means the branches table was edited.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from evotrainer.errors import EvotrainerError, NotFoundError


class UnknownRefError(NotFoundError):
    """A branch named in a question or as a parent is not in the graph."""

    def __init__(self, ref: str) -> None:
        super().__init__(f"unknown branch {ref}")
        self.ref = ref


class CycleDetectedError(EvotrainerError):
    """Following parents leads back to where it started: the lineage was tampered with."""

    def __init__(self, cycle: list[str]) -> None:
        super().__init__("lineage cycle: " + " -> ".join(cycle))
        self.cycle = cycle


class BranchNode(NamedTuple):
    """A branch in the graph (a tuple: a large experiment's page builds thousands, and a
    frozen dataclass cost twice as much to make)."""

    ref: str
    parent: str | None
    fork_seq: int
    children: tuple[str, ...] = ()


class LineageDAG:
    def __init__(self, edges: Iterable[tuple[str, str | None, int]]) -> None:
        """Build from (branch ref, parent ref or None, fork_seq) rows."""
        parents: dict[str, tuple[str | None, int]] = {}
        for ref, parent, fork_seq in edges:
            parents[ref] = (parent, fork_seq)
        children: dict[str, list[str]] = {ref: [] for ref in parents}
        for ref, (parent, _) in parents.items():
            if parent is not None:
                if parent not in parents:
                    raise UnknownRefError(parent)
                children[parent].append(ref)
        self.nodes = {
            ref: BranchNode(ref, parent, fork_seq, tuple(sorted(children[ref])))
            for ref, (parent, fork_seq) in parents.items()
        }
        self._order: list[str] | None = None
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        """CycleDetectedError unless every parent chain ends at a root. Each node is walked
        once: a chain stops at the first node already known to reach a root (walking every
        node's whole chain cost most of building a 2,000-branch graph)."""
        reaches_root: set[str] = set()
        for ref in self.nodes:
            on_path: set[str] = set()
            current: str | None = ref
            while current is not None and current not in reaches_root:
                if current in on_path:
                    self.ancestors(ref)  # raises, naming the cycle
                on_path.add(current)
                current = self.nodes[current].parent
            reaches_root |= on_path

    @classmethod
    def from_store(cls, store: object, experiment: str | None = None) -> LineageDAG:
        rows = store.conn.execute(  # type: ignore[attr-defined]
            "SELECT c.experiment || '/' || c.name, p.experiment || '/' || p.name, c.fork_seq"
            " FROM branches c LEFT JOIN branches p ON p.branch_id = c.parent_id"
            " WHERE %s::text IS NULL OR c.experiment = %s ORDER BY c.branch_id",
            (experiment, experiment),
        ).fetchall()
        return cls(rows)

    def node(self, ref: str) -> BranchNode:
        try:
            return self.nodes[ref]
        except KeyError:
            raise UnknownRefError(ref) from None

    def ancestors(self, ref: str) -> list[str]:
        """Parent, grandparent, ... up to the root."""
        chain: list[str] = []
        seen, current = {ref}, self.node(ref).parent
        while current is not None:
            if current in seen:
                raise CycleDetectedError([ref, *chain, current])
            seen.add(current)
            chain.append(current)
            current = self.node(current).parent
        return chain

    def descendants(self, ref: str) -> list[str]:
        out, stack = [], list(reversed(self.node(ref).children))
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(reversed(self.nodes[current].children))
        return out

    def roots(self) -> list[str]:
        return sorted(ref for ref, node in self.nodes.items() if node.parent is None)

    def depth(self, ref: str) -> int:
        return len(self.ancestors(ref))

    def topological_order(self) -> list[str]:
        """Parents before children; siblings by name."""
        if self._order is None:  # a page draws it and lists it: walked once per graph
            order: list[str] = []
            for root in self.roots():
                order.append(root)
                order.extend(self.descendants(root))
            self._order = order
        return list(self._order)

    def common_ancestor(self, a: str, b: str) -> str | None:
        """The nearest branch both descend from (or are)."""
        line_a = [a, *self.ancestors(a)]
        line_b = {b, *self.ancestors(b)}
        return next((ref for ref in line_a if ref in line_b), None)
