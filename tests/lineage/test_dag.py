"""The in-memory lineage graph and its typed errors, on small named topologies."""

from __future__ import annotations

import pytest

from evotrainer.lineage.dag import CycleDetectedError, LineageDAG, UnknownRefError

#   a/main ── a/x ── a/y
#        └── a/z
TREE = [("a/main", None, 0), ("a/x", "a/main", 3), ("a/y", "a/x", 5), ("a/z", "a/main", 2)]


def test_ancestors_descendants_and_order() -> None:
    dag = LineageDAG(TREE)
    assert dag.ancestors("a/y") == ["a/x", "a/main"]
    assert dag.descendants("a/main") == ["a/x", "a/y", "a/z"]
    assert dag.topological_order() == ["a/main", "a/x", "a/y", "a/z"]
    assert dag.depth("a/y") == 2 and dag.roots() == ["a/main"]
    assert dag.common_ancestor("a/y", "a/z") == "a/main"
    assert dag.common_ancestor("a/y", "a/x") == "a/x"


def test_unknown_refs_are_typed_errors() -> None:
    dag = LineageDAG(TREE)
    with pytest.raises(UnknownRefError) as caught:
        dag.ancestors("a/nope")
    assert caught.value.ref == "a/nope"
    with pytest.raises(UnknownRefError):
        LineageDAG([("a/x", "a/ghost", 1)])


def test_a_cycle_is_detected_with_its_path() -> None:
    with pytest.raises(CycleDetectedError) as caught:
        LineageDAG([("a/p", "a/q", 1), ("a/q", "a/p", 1)])
    assert caught.value.cycle == ["a/p", "a/q", "a/p"]
