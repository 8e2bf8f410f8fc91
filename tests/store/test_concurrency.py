"""Concurrent writers and readers on the real Postgres.

A Hypothesis state machine races writer threads (each with its own connection) on shared
branches and checks after every step: exactly one winner per seq, no gaps, no duplicates.
A second test has writers commit and randomly roll back while a subscriber follows the
global order: it must see every committed event exactly once, in commit-safe order.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from evotrainer.errors import ConcurrencyError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.store.subscription import Subscription
from tests.conftest import create_database, drop_database, url_for


def task(label: str) -> NewEvent:
    return NewEvent("TaskRequested", {"task_id": label, "kind": "noop", "queue": "control"})


@pytest.fixture(scope="module")
def race_url(template_database: str) -> Iterator[str]:
    name = create_database(template_database)
    yield url_for(name)
    drop_database(name)


class RacingWriters(RuleBasedStateMachine):
    url: str = ""

    @initialize()
    def open(self) -> None:
        self.store = EventStore.connect(self.url)
        self.experiment = f"race{uuid.uuid4().hex[:12]}"
        self.store.create_experiment(self.experiment)
        self.branches = [BranchRef(self.experiment, "main")]
        self.written: dict[BranchRef, list[str]] = {self.branches[0]: ["created"]}
        self.writers = [EventStore.connect(self.url) for _ in range(4)]

    def teardown(self) -> None:
        for s in [self.store, *getattr(self, "writers", [])]:
            s.close()

    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from(self.branches))
        name = f"b{len(self.branches)}"
        self.store.fork(parent, name)
        ref = BranchRef(self.experiment, name)
        self.branches.append(ref)
        self.written[ref] = ["forked"]

    @rule(data=st.data(), writers=st.integers(2, 4), batch=st.integers(1, 5))
    def race_with_expected_seq(self, data: st.DataObject, writers: int, batch: int) -> None:
        """All writers read the same head and try to extend it: exactly one may win."""
        ref = data.draw(st.sampled_from(self.branches))
        head, _ = self.store.head(ref)
        barrier = threading.Barrier(writers)
        outcomes: list[object] = [None] * writers

        def write(i: int) -> None:
            labels = [f"w{i}-{head}-{j}" for j in range(batch)]
            barrier.wait()
            try:
                self.writers[i].append(ref, [task(label) for label in labels], expected_seq=head)
                outcomes[i] = labels
            except ConcurrencyError as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [o for o in outcomes if isinstance(o, list)]
        assert len(winners) == 1, outcomes
        self.written[ref].extend(winners[0])

    @rule(data=st.data(), writers=st.integers(2, 4))
    def race_without_expected_seq(self, data: st.DataObject, writers: int) -> None:
        """Without an expected seq every writer eventually lands, each exactly once."""
        ref = data.draw(st.sampled_from(self.branches))
        labels = [f"free{i}-{time.monotonic_ns()}" for i in range(writers)]
        threads = [
            threading.Thread(target=self.writers[i].append, args=(ref, [task(labels[i])])) for i in range(writers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.written[ref].extend(labels)

    @invariant()
    def every_branch_is_gapless_and_holds_exactly_what_won(self) -> None:
        for ref in getattr(self, "branches", []):
            own = [e for e in self.store.read_branch(ref) if e.branch == ref.branch]
            info = self.store.branch(ref)
            assert [e.seq for e in own] == list(range(info.fork_seq + 1, info.fork_seq + 1 + len(own)))
            labels = [e.payload.get("task_id") for e in own if e.type == "TaskRequested"]
            assert sorted(labels) == sorted(label for label in self.written[ref] if label not in ("created", "forked"))
            assert len(labels) == len(set(labels))


@pytest.mark.slow
def test_racing_writers(race_url: str) -> None:
    RacingWriters.url = race_url
    machine = RacingWriters.TestCase
    machine.settings = settings(
        max_examples=25, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)
    )
    machine().runTest()


@pytest.mark.slow
def test_subscriber_sees_every_committed_event_once_in_order(store: EventStore, database_url: str) -> None:
    writers = 4
    per_writer = 40
    for w in range(writers):
        store.create_experiment(f"w{w}")
    committed: list[set[str]] = [set() for _ in range(writers)]

    def write(w: int) -> None:
        rng = random.Random(w)
        with EventStore.connect(database_url) as own:
            ref = BranchRef(f"w{w}", "main")
            for i in range(per_writer):
                labels = [f"{w}-{i}-{j}" for j in range(rng.randint(1, 3))]
                rollback = rng.random() < 0.3
                try:
                    with own.transaction():
                        own.append(ref, [task(label) for label in labels])
                        time.sleep(rng.random() * 0.01)  # hold the transaction open: out-of-order commits
                        if rollback:
                            raise _RolledBack
                    committed[w].update(labels)
                except _RolledBack:
                    pass

    seen: list[str] = []
    last_seq: dict[str, int] = {}

    def handle(_conn: object, events: list) -> None:  # type: ignore[type-arg]
        for event in events:
            if event.type == "TaskRequested":
                seen.append(event.payload["task_id"])
            assert event.seq > last_seq.get(event.experiment, 0), "a branch was read out of order"
            last_seq[event.experiment] = event.seq

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    with EventStore.connect(database_url) as reader_store:
        subscription = Subscription(reader_store, "test")
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            subscription.process(handle, limit=7)
        subscription.catch_up(handle)
    expected = set().union(*committed)
    assert len(seen) == len(set(seen)), "an event was delivered twice"
    assert set(seen) == expected
    assert len(expected) > 50


class _RolledBack(Exception):
    pass


@pytest.mark.parametrize("durable", [True, False])
def test_two_instances_of_one_consumer_never_handle_an_event_twice(
    store: EventStore, database_url: str, durable: bool
) -> None:
    """A consumer reads its next batch before locking its checkpoint; when another
    instance moves the checkpoint in between, the batch is read again under the lock."""
    store.create_experiment("sub")
    store.append(BranchRef("sub", "main"), [
        NewEvent("TaskRequested", {"task_id": f"t{i}", "kind": "noop", "queue": "control"}) for i in range(5)])
    handled: list[str] = []

    def handle(_conn: object, events: list) -> None:  # type: ignore[type-arg]
        handled.extend(e.event_id for e in events)

    with EventStore.connect(database_url) as first_store, EventStore.connect(database_url) as other_store:
        first, other = Subscription(first_store, "one", durable), Subscription(other_store, "one", durable)
        read_all = first_store.read_all
        cut_in = []

        def read_then_let_the_other_cut_in(*args: object, **kwargs: object) -> list:  # type: ignore[type-arg]
            events = read_all(*args, **kwargs)  # type: ignore[arg-type]
            if not cut_in:
                cut_in.append(other.process(handle))
            return events

        first_store.read_all = read_then_let_the_other_cut_in  # type: ignore[method-assign]
        assert first.process(handle) == 0  # its batch was taken meanwhile
        assert cut_in == [6]
        first_store.read_all = read_all  # type: ignore[method-assign]
        assert first.process(handle) == other.process(handle) == 0
    assert len(handled) == len(set(handled)) == 6
