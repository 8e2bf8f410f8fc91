"""Random fork trees: histories compose, chains verify, projections rebuild identically."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evotrainer.lineage.projections import LIVE_SCHEMA, Projector, compare, rebuild
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.store.audit import audit

# A plan: each step either appends k events to an existing branch, or forks an existing
# branch at a fraction of its head. Indices are taken modulo the branches that exist.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 50), st.integers(1, 3)),
        st.tuples(st.just("fork"), st.integers(0, 50), st.floats(0, 1)),
    ),
    min_size=1,
    max_size=14,
)


def task(label: str) -> NewEvent:
    return NewEvent("TaskRequested", {"task_id": label, "kind": "noop", "queue": "control"})


def sql_history(store: EventStore, ref: BranchRef) -> list[tuple[str, int, str]]:
    return store.conn.execute(
        "SELECT branch, seq, hash FROM branch_history(%s)", (f"{ref.experiment}/{ref.branch}",)
    ).fetchall()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_random_fork_trees(store: EventStore, plan: list[tuple]) -> None:
    experiment = f"x{uuid.uuid4().hex[:10]}"
    store.create_experiment(experiment)
    branches = [BranchRef(experiment, "main")]
    for n, (kind, index, arg) in enumerate(plan):
        ref = branches[index % len(branches)]
        if kind == "append":
            store.append(ref, [task(f"{n}.{i}") for i in range(arg)])
        else:
            head, _ = store.head(ref)
            at = max(1, round(head * arg))
            store.fork(BranchRef(ref.experiment, ref.branch, at), f"b{n}")
            branches.append(BranchRef(experiment, f"b{n}"))

    fresh = EventStore.connect(store.conn.info.dsn)  # resolves ancestry from the database
    try:
        for ref in branches:
            history = fresh.read_branch(ref)
            assert [e.seq for e in history] == list(range(1, len(history) + 1))
            assert [(e.branch, e.seq, e.hash) for e in history] == sql_history(store, ref)
            info = fresh.branch(ref)
            if info.parent is not None:
                parent_prefix = fresh.read_branch(info.parent, upto_seq=info.fork_seq)
                own = [e for e in history if e.branch == ref.branch]
                assert history == parent_prefix + own
                assert own[0].type == "BranchForked" and own[0].prev_hash == parent_prefix[-1].hash
    finally:
        fresh.close()

    report = audit(store, None)
    assert report.intact, report.problems
    projector = Projector(store)
    projector.catch_up(batch_size=7)  # small batches: the result must not depend on them
    scratch = f"t_{uuid.uuid4().hex[:8]}"
    try:
        rebuild(store, scratch, upto=projector.position(), batch_size=1000)
        assert compare(store.conn, LIVE_SCHEMA, scratch) is None
    finally:
        store.conn.execute(f'DROP SCHEMA IF EXISTS "{scratch}" CASCADE')
