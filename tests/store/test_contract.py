"""The store's guarantees, each stated once as a contract and checked on the real Postgres."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

import psycopg
import pytest

from evotrainer.errors import ConcurrencyError, InvalidPayloadError, NotFoundError, UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, GlobalPosition, NewEvent, sql
from evotrainer.store.audit import audit
from evotrainer.store.encoding import GENESIS_HASH
from evotrainer.store.eventstore import CHUNK_EVENTS, LATER_CHUNK_EVENTS

MAIN = BranchRef("exp", "main")


def task(n: int, key: str | None = None) -> NewEvent:
    return NewEvent("TaskRequested", {"task_id": f"t{n}", "kind": "noop", "queue": "control"}, idempotency_key=key)


def count_events(store: EventStore) -> int:
    return store.conn.execute("SELECT count(*) FROM events").fetchone()[0]


def wait_until_blocked(database_url: str, writer: EventStore) -> None:
    """Return once `writer`'s connection waits on a lock: the race under test is on."""
    pid = writer.conn.info.backend_pid
    deadline = time.monotonic() + 30
    with psycopg.connect(database_url, autocommit=True) as watcher:
        while watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                              (pid,)).fetchone() != ("Lock",):
            assert time.monotonic() < deadline, "the other writer never queued on a lock"
            time.sleep(0.01)


class TestImmutability:
    @pytest.mark.parametrize(
        "statement",
        ["UPDATE events SET actor = 'x'", "DELETE FROM events", "TRUNCATE events", "UPDATE branches SET name = 'x'",
         "DELETE FROM branches", "TRUNCATE branches CASCADE"],
    )
    def test_database_refuses_changes_even_from_a_superuser(self, store: EventStore, statement: str) -> None:
        store.create_experiment("exp")
        with pytest.raises(psycopg.errors.RestrictViolation, match="immutable"):
            store.conn.execute(statement)
        assert count_events(store) == 1

    def test_writer_role_may_insert_and_read_but_not_update(self, store: EventStore) -> None:
        store.create_experiment("exp")
        with store.conn.transaction():
            store.conn.execute("SET LOCAL ROLE evotrainer_writer")
            store.append(MAIN, [task(1)])
            assert len(store.read_branch(MAIN)) == 2
        with store.conn.transaction():
            store.conn.execute("SET LOCAL ROLE evotrainer_writer")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                store.conn.execute("UPDATE events SET actor = 'x'")


class TestHashChain:
    def test_each_event_chains_to_its_predecessor(self, store: EventStore) -> None:
        first = store.create_experiment("exp")
        events = store.append(MAIN, [task(1), task(2)])
        assert first.prev_hash == GENESIS_HASH
        assert [e.prev_hash for e in events] == [first.hash, events[0].hash]

    def test_a_fork_chains_to_the_parent_event_at_the_fork_point(self, store: EventStore) -> None:
        store.create_experiment("exp")
        parent_events = store.append(MAIN, [task(1), task(2), task(3)])
        forked = store.fork(BranchRef("exp", "main", 2), "alt")
        assert forked.seq == 3 and forked.type == "BranchForked"
        assert forked.prev_hash == parent_events[0].hash
        grandchild = store.fork(BranchRef("exp", "alt", 3), "deeper")
        assert grandchild.prev_hash == forked.hash
        assert audit(store).intact

    def test_server_and_client_hashed_appends_continue_one_chain(self, store: EventStore) -> None:
        """Small appends are chained on the server, large ones by this process: mixed on
        one branch (and on a fork) they make one gapless chain."""
        store.create_experiment("exp")
        sizes = [1, 3 * CHUNK_EVENTS, 2, CHUNK_EVENTS + 1, CHUNK_EVENTS + 2 * LATER_CHUNK_EVENTS + 1, 1]
        appended = []
        for round_, size in enumerate(sizes):
            appended += store.append(MAIN, [task(100 * round_ + i) for i in range(size)])
        store.fork(BranchRef("exp", "main", 5), "alt")
        store.append(BranchRef("exp", "alt"), [task(1)])
        store.append(BranchRef("exp", "alt"), [task(i) for i in range(2 * CHUNK_EVENTS)])
        assert [e.seq for e in appended] == list(range(2, 2 + sum(sizes)))
        assert all(later.prev_hash == earlier.hash for earlier, later in zip(appended, appended[1:], strict=False))
        assert store.read_branch(MAIN)[1:] == appended
        report = audit(store)
        assert report.intact, report.problems


class TestOptimisticConcurrency:
    def test_a_stale_expected_seq_is_refused_and_nothing_is_written(self, store: EventStore) -> None:
        store.create_experiment("exp")
        store.append(MAIN, [task(1)], expected_seq=1)
        with pytest.raises(ConcurrencyError) as caught:
            store.append(MAIN, [task(2), task(3)], expected_seq=1)
        assert (caught.value.expected_seq, caught.value.actual_seq) == (1, 2)
        assert count_events(store) == 2

    def test_two_connections_racing_for_one_seq_have_one_winner(self, store: EventStore, database_url: str) -> None:
        store.create_experiment("exp")
        with EventStore.connect(database_url) as other:
            with store.conn.transaction():
                store.append(MAIN, [task(1)], expected_seq=1)
                # The other writer queues on the branch lock we hold, then finds the head
                # moved past the seq it expected.
                outcome: list[object] = []
                thread = threading.Thread(
                    target=lambda: outcome.append(_try(lambda: other.append(MAIN, [task(2)], expected_seq=1)))
                )
                thread.start()
                wait_until_blocked(database_url, other)
            thread.join()
        assert isinstance(outcome[0], ConcurrencyError)
        assert [e.seq for e in store.read_branch(MAIN)] == [1, 2]


def test_an_append_inside_a_callers_transaction_waits_its_turn_on_the_branch(store: EventStore, database_url: str) -> None:
    """It queues on the branch lock, then reads the head the other writer left; the caller's transaction stays usable."""
    store.create_experiment("exp")
    store.append(MAIN, [task(0)])  # this connection now caches the head: seq 2
    appended: list[list[object]] = []

    def append_in_a_transaction() -> None:
        with store.transaction() as conn:
            conn.execute("SELECT 1")
            appended.append(store.append(MAIN, [task(2)]))
            conn.execute("SELECT 1")

    with EventStore.connect(database_url) as other, other.transaction():
        other.append(MAIN, [task(1)])  # seq 3, committed only when this block ends
        thread = threading.Thread(target=append_in_a_transaction)
        thread.start()
        wait_until_blocked(database_url, store)
    thread.join()
    assert [e.seq for e in appended[0]] == [4]  # type: ignore[attr-defined]
    assert audit(store).intact


@pytest.mark.parametrize("size", [2, 3 * CHUNK_EVENTS])
@pytest.mark.parametrize("in_callers_transaction", [False, True])
def test_a_branch_cached_from_a_rolled_back_transaction_is_resolved_again(
    store: EventStore, size: int, in_callers_transaction: bool
) -> None:
    """Events have no foreign key; the append finds that the cached branch is gone, in a
    small append (one statement), a large one trusting a cached head (its lock statement)
    and a large one in a caller's transaction (the head lookup), and tries again."""
    with pytest.raises(RuntimeError), store.transaction():
        store.create_experiment("exp")
        store.append(MAIN, [task(i) for i in range(size)])  # caches the branch and its head
        raise RuntimeError("rolled back")
    store.create_experiment("exp")  # the same name, a new branch id
    with store.transaction() if in_callers_transaction else nullcontext():
        appended = store.append(MAIN, [task(i) for i in range(size)])
    assert [e.seq for e in appended] == list(range(2, size + 2))
    assert [e.seq for e in store.read_branch(MAIN)] == list(range(1, size + 2))
    assert audit(store).intact  # no event outside a branch


def test_appending_to_a_branch_that_never_committed_is_not_found(store: EventStore) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.create_experiment("exp")
        store.append(MAIN, [task(1)])
        raise RuntimeError("rolled back")
    for size in (1, 3 * CHUNK_EVENTS):
        with pytest.raises(NotFoundError, match="no branch exp/main"):
            store.append(MAIN, [task(i) for i in range(size)])
    assert count_events(store) == 0


def test_causation_and_correlation_ids_are_stored_and_hashed_in_canonical_form(store: EventStore) -> None:
    store.create_experiment("exp")
    spelled = "{A1B2C3D4-E5F6-4711-8899-AABBCCDDEEFF}"
    stored = store.append(MAIN, [NewEvent("TaskRequested", {"task_id": "t", "kind": "noop", "queue": "q"},
                                          causation_id=spelled, correlation_id="urn:uuid:" + spelled[1:-1])])[0]
    assert stored.causation_id == stored.correlation_id == "a1b2c3d4-e5f6-4711-8899-aabbccddeeff"
    assert store.read_branch(MAIN)[-1] == stored
    assert audit(store).intact


def _try(fn):  # type: ignore[no-untyped-def]
    try:
        return fn()
    except ConcurrencyError as exc:
        return exc


class TestIdempotency:
    def test_a_repeated_key_returns_the_original_and_writes_nothing(self, store: EventStore) -> None:
        store.create_experiment("exp")
        original = store.append(MAIN, [task(1, key="k")], expected_seq=1)[0]
        again = store.append(MAIN, [task(1, key="k")], expected_seq=1)[0]
        assert again == original
        assert count_events(store) == 2

    def test_a_batch_mixing_old_and_new_keys_appends_only_the_new(self, store: EventStore) -> None:
        store.create_experiment("exp")
        first = store.append(MAIN, [task(1, key="a")])[0]
        both = store.append(MAIN, [task(1, key="a"), task(2, key="b")])
        assert both[0] == first and both[1].seq == 3

    def test_keys_are_per_branch(self, store: EventStore) -> None:
        store.create_experiment("exp")
        store.fork(MAIN, "alt")
        a = store.append(MAIN, [task(1, key="k")])[0]
        b = store.append(BranchRef("exp", "alt"), [task(1, key="k")])[0]
        assert a.event_id != b.event_id

    @pytest.mark.parametrize("size", [2, 3 * CHUNK_EVENTS])  # one statement, and pipelined chunks
    def test_a_taken_key_inside_a_batch_comes_back_and_the_rest_is_chained(
            self, store: EventStore, size: int) -> None:
        """Keys are not looked up before the INSERTs: the index refuses the taken one, and
        the append still returns its original and chains the fresh events after the head."""
        store.create_experiment("exp")
        original = store.append(MAIN, [task(0, key="k1")])[0]  # the head is now cached
        batch = [task(i, key=f"k{i}") for i in range(size)]
        stored = store.append(MAIN, batch, expected_seq=2)
        assert stored[1] == original
        assert [e.seq for i, e in enumerate(stored) if i != 1] == list(range(3, 2 + size))
        assert count_events(store) == 1 + size
        again = store.append(MAIN, batch)  # every key taken now: nothing written
        assert again == stored and count_events(store) == 1 + size
        assert audit(store).intact

    @pytest.mark.parametrize("size", [2, 3 * CHUNK_EVENTS])
    def test_a_taken_key_does_not_excuse_a_stale_expected_seq(self, store: EventStore, size: int) -> None:
        store.create_experiment("exp")
        store.append(MAIN, [task(0, key="k0")])
        with pytest.raises(ConcurrencyError):
            store.append(MAIN, [task(i, key=f"k{i}") for i in range(size)], expected_seq=1)
        assert count_events(store) == 2

    def test_a_key_taken_by_another_connection_comes_back(self, store: EventStore, database_url: str) -> None:
        """This connection's cached head is stale and the key is taken: both are found out
        by the INSERT, and the retry returns the other writer's event."""
        store.create_experiment("exp")
        store.append(MAIN, [task(0)])
        with EventStore.connect(database_url) as other:
            theirs = other.append(MAIN, [task(1, key="k")])[0]
        batch = [task(1, key="k")] + [task(i) for i in range(2, 2 * CHUNK_EVENTS)]
        stored = store.append(MAIN, batch)
        assert stored[0] == theirs and stored[1].seq == theirs.seq + 1
        assert audit(store).intact

    def test_a_batch_may_not_repeat_a_key(self, store: EventStore) -> None:
        store.create_experiment("exp")
        for size in (2, 3 * CHUNK_EVENTS):  # one statement, and pipelined chunks
            with pytest.raises(UsageError, match="repeats an idempotency key"):
                store.append(MAIN, [task(i, key="k") for i in range(size)])
        # Statements of other modules that append through evotrainer_append() too.
        with pytest.raises(UsageError, match="repeats an idempotency key"):
            store.append_through(MAIN, [task(1, key="k"), task(2, key="k")], sql.APPEND_CALL, {"expected_seq": None})
        assert count_events(store) == 1


class TestAtomicBatches:
    def test_one_invalid_event_refuses_the_whole_batch(self, store: EventStore) -> None:
        store.create_experiment("exp")
        bad = NewEvent("TaskRequested", {"task_id": "x"})
        with pytest.raises(InvalidPayloadError):
            store.append(MAIN, [task(1), bad, task(2)])
        assert count_events(store) == 1

    def test_a_batch_gets_consecutive_seqs_in_one_transaction(self, store: EventStore) -> None:
        store.create_experiment("exp")
        events = store.append(MAIN, [task(i) for i in range(50)])
        assert [e.seq for e in events] == list(range(2, 52))
        assert len({e.transaction_id for e in events}) == 1

    def test_an_invalid_event_late_in_a_pipelined_batch_leaves_nothing(self, store: EventStore) -> None:
        """Past CHUNK_EVENTS, chunks are sent while later events are still being validated."""
        store.create_experiment("exp")
        events = [task(i) for i in range(3 * CHUNK_EVENTS)] + [NewEvent("TaskRequested", {"task_id": "x"})]
        with pytest.raises(InvalidPayloadError):
            store.append(MAIN, events)
        assert count_events(store) == 1
        assert store.append(MAIN, [task(1)], expected_seq=1)[0].seq == 2  # the connection is still usable

    def test_a_pipelined_batch_that_fails_on_the_server_is_rolled_back_and_retried(
        self, store: EventStore, database_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The store's own transaction around pipelined chunks is BEGIN and COMMIT queued
        with them: when a chunk fails (here: the head cached from our last append is stale,
        so the first INSERT collides), the transaction is rolled back, the connection is
        idle again, and the retry lands after the other writer's event."""
        store.create_experiment("exp")
        store.append(MAIN, [task(i) for i in range(2 * CHUNK_EVENTS)])  # caches the head
        with EventStore.connect(database_url) as other:
            other.append(MAIN, [task(99)])
        events = store.append(MAIN, [task(i) for i in range(2 * CHUNK_EVENTS)])
        assert events[0].seq == 2 * CHUNK_EVENTS + 3
        assert store.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not [r for r in caplog.records if "error ignored" in r.getMessage()]
        assert [e.seq for e in store.read_branch(MAIN)] == list(range(1, 4 * CHUNK_EVENTS + 3))
        assert audit(store).intact

    def test_a_bad_event_met_after_a_chunk_failed_on_the_server_is_what_is_reported(
        self, store: EventStore, database_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The first chunk collides with another writer's event (stale cached head) and,
        before its error is read, the next chunk's preparation finds a bad event: the bad
        event is what the caller hears about, nothing is written and nothing is logged."""
        store.create_experiment("exp")
        store.append(MAIN, [task(i) for i in range(2 * CHUNK_EVENTS)])  # caches the head
        with EventStore.connect(database_url) as other:
            other.append(MAIN, [task(99)])
        bad = NewEvent("TaskRequested", {"task_id": "x"})
        with pytest.raises(InvalidPayloadError):
            store.append(MAIN, [task(i) for i in range(CHUNK_EVENTS + 1)] + [bad])
        assert store.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not [r for r in caplog.records if "error ignored" in r.getMessage()]
        assert count_events(store) == 2 + 2 * CHUNK_EVENTS

    def test_appends_on_an_idle_connection_without_autocommit_commit_themselves(self, database_url: str) -> None:
        """On a caller's connection that opens transactions itself (psycopg's default), an
        append made while the connection is idle is the store's own transaction and is
        committed, whether or not the store had to look the branch up first; one made
        inside the caller's transaction is the caller's to commit or roll back, and its
        head is not remembered: past the table after the rollback, it would make the next
        append leave a gap in the seqs and the chain."""
        with EventStore.connect(database_url) as setup:
            setup.create_experiment("exp")
        appended = []
        for size in (2, 2 * CHUNK_EVENTS):  # one statement, and pipelined chunks
            with EventStore(psycopg.connect(database_url)) as store:  # the branch is not known yet
                appended += store.append(MAIN, [task(i) for i in range(size)])
                assert store.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                appended += store.append(MAIN, [task(i) for i in range(size)])
                store.conn.execute("SELECT 1")  # the caller's transaction
                store.append(MAIN, [task(i) for i in range(size)])
                store.conn.rollback()
                appended += store.append(MAIN, [task(i) for i in range(size)])
        with EventStore(psycopg.connect(database_url)) as store:  # so is a fork
            store.fork(MAIN, "alt")
            assert store.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with EventStore.connect(database_url) as reader:
            assert reader.read_branch(MAIN)[1:] == appended
            assert [e.seq for e in appended] == list(range(2, 2 + len(appended)))
            assert reader.branch(BranchRef("exp", "alt")).fork_seq == 1 + len(appended)
            assert audit(reader).intact

    def test_a_pipelined_batch_returns_what_is_stored(self, store: EventStore) -> None:
        store.create_experiment("exp")
        first = store.append(MAIN, [task(0, key="k0"), task(1, key="k1")])
        keys = [f"k{i}" for i in range(CHUNK_EVENTS + 2 * LATER_CHUNK_EVENTS + 5)]
        events = store.append(MAIN, [task(i, key=key) for i, key in enumerate(keys)])
        assert events[:2] == first  # old keys come back; the new ones span the first INSERT and three later
        assert [e.seq for e in events[2:]] == list(range(4, 4 + len(keys) - 2))
        assert store.read_branch(MAIN, after_seq=1) == events
        assert sorted(e.position for e in events) == [e.position for e in events]
        assert audit(store).intact

    def test_racing_pipelined_batches_have_one_winner(self, store: EventStore, database_url: str) -> None:
        store.create_experiment("exp")
        big = [task(i) for i in range(3 * CHUNK_EVENTS)]
        with EventStore.connect(database_url) as other:
            with store.conn.transaction():
                store.append(MAIN, big, expected_seq=1)
                outcome: list[object] = []
                thread = threading.Thread(target=lambda: outcome.append(_try(lambda: other.append(MAIN, big, expected_seq=1))))
                thread.start()
                wait_until_blocked(database_url, other)
            thread.join()
            assert isinstance(outcome[0], ConcurrencyError)
            assert other.append(MAIN, big)[0].seq == 2 + len(big)  # no expected seq: it re-reads and lands
        assert [e.seq for e in store.read_branch(MAIN)] == list(range(1, 2 + 2 * len(big)))
        assert audit(store).intact

    def test_an_invalid_event_is_refused_even_when_its_key_exists(self, store: EventStore) -> None:
        store.create_experiment("exp")
        store.append(MAIN, [task(0, key="k0")])
        bad = NewEvent("TaskRequested", {"task_id": "x"}, idempotency_key="k0")
        for size in (2, 2 * CHUNK_EVENTS):  # one chunk, and several (prepared as they are sent)
            with pytest.raises(InvalidPayloadError):
                store.append(MAIN, [task(i) for i in range(1, size)] + [bad])
        assert count_events(store) == 2

    def test_a_batch_rolled_back_by_the_caller_leaves_nothing(self, store: EventStore) -> None:
        store.create_experiment("exp")
        with pytest.raises(RuntimeError), store.transaction():
            store.append(MAIN, [task(1), task(2)])
            raise RuntimeError("caller changed its mind")
        assert count_events(store) == 1


    def test_appends_after_a_rolled_back_append_stay_gapless(self, store: EventStore, database_url: str) -> None:
        store.create_experiment("exp")
        store.append(MAIN, [task(1)])
        with pytest.raises(RuntimeError), store.transaction():
            store.append(MAIN, [task(2)])
            raise RuntimeError("rolled back")
        with EventStore.connect(database_url) as other:
            other.append(MAIN, [task(3)])
        store.append(MAIN, [task(4)])
        store.append(MAIN, [task(5)], expected_seq=4)
        assert [e.seq for e in store.read_branch(MAIN)] == [1, 2, 3, 4, 5]
        assert audit(store).intact


class TestReading:
    def test_a_fork_reads_its_inherited_prefix_then_its_own_events(self, store: EventStore) -> None:
        store.create_experiment("exp")
        store.append(MAIN, [task(1), task(2), task(3)])
        store.fork(BranchRef("exp", "main", 2), "alt")
        store.append(BranchRef("exp", "alt"), [task(9)])
        store.append(MAIN, [task(4)])
        history = store.read_branch(BranchRef("exp", "alt"))
        assert [(e.branch, e.seq) for e in history] == [("main", 1), ("main", 2), ("alt", 3), ("alt", 4)]
        assert [e.seq for e in store.read_branch(BranchRef("exp", "alt", 3))] == [1, 2, 3]

    def test_read_all_follows_the_global_order_from_a_position(self, store: EventStore) -> None:
        store.create_experiment("exp")
        store.append(MAIN, [task(1), task(2)])
        everything = store.read_all()
        assert [e.seq for e in everything] == [1, 2, 3]
        rest = store.read_all(everything[0].global_position)
        assert [e.seq for e in rest] == [2, 3]
        assert store.read_all(everything[-1].global_position) == []
        assert store.read_all(GlobalPosition(), limit=2) == everything[:2]

    def test_events_come_back_as_their_typed_models(self, store: EventStore) -> None:
        created = store.create_experiment("exp", {"domain": "math"})
        model = created.model()
        assert type(model).__name__ == "ExperimentCreated" and model.domain == "math"  # type: ignore[attr-defined]


def test_a_fork_inside_an_inherited_prefix_reads_only_what_it_inherits(store: EventStore, database_url: str) -> None:
    """main -> b forked at 4 -> c forked at 2 (inside b's inherited prefix): c sees main@1..2."""
    store.create_experiment("exp")
    store.append(MAIN, [task(i) for i in range(5)])
    store.fork(BranchRef("exp", "main", 4), "b")
    store.fork(BranchRef("exp", "b", 2), "c")
    with EventStore.connect(database_url) as fresh:  # resolves the ancestry from the database
        history = fresh.read_branch(BranchRef("exp", "c"))
    assert [(e.branch, e.seq) for e in history] == [("main", 1), ("main", 2), ("c", 3)]


def test_every_function_takes_the_branch_lock_of_one_class() -> None:
    """Migrations 0005, 0006 and 0008 write the advisory lock's class number into SQL;
    they must all take the one lock sql.BRANCH_LOCK_CLASS names."""
    versions = Path(__file__).resolve().parents[2] / "migrations" / "versions"
    for name in ("0005_append_lookup.py", "0006_append_in_one_statement.py", "0008_lock_branch.py"):
        text = (versions / name).read_text()
        assert f"pg_advisory_xact_lock({sql.BRANCH_LOCK_CLASS}," in text, name


def test_event_ids_are_time_ordered_uuids(store: EventStore) -> None:
    """Version 7: later appends get ids that sort after earlier ones (at millisecond
    grain), which keeps the event id index growing at its right edge."""
    store.create_experiment("exp")
    first = store.append(MAIN, [task(i) for i in range(3 * CHUNK_EVENTS)])
    time.sleep(0.002)
    second = store.append(MAIN, [task(1)])
    for event in [*first, *second]:
        parsed = uuid.UUID(event.event_id)
        assert (str(parsed), parsed.version, parsed.variant) == (event.event_id, 7, uuid.RFC_4122)
    assert max(e.event_id[:13] for e in first) < second[0].event_id[:13]
