"""Tamper evidence: re-verify every branch's hash chain from what the database holds.

The triggers stop ordinary changes; a superuser can disable them. The hash chain is what
makes such changes visible: each event's hash commits to its predecessor's, so editing a
payload, deleting, inserting or reordering events breaks the chain at the first event
touched, and `audit` names it. A fork's first event must chain to the parent's event at
the fork point, and its BranchForked payload must agree with the branch row.

An event row whose branch does not exist is in no chain at all (the events table has no
foreign key, see migration 0004); a whole-store audit names such rows too.

What a chain cannot show by itself is the removal of a branch's newest events: the
shortened chain is still valid. `anchors` (the head hashes `audit` reports) kept outside
the database close that gap: `verify_anchors` proves each anchored head is still there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from evotrainer.refs import BranchRef
from evotrainer.store.encoding import GENESIS_HASH, canonical_json, event_hash, format_time
from evotrainer.store.eventstore import EventStore
from evotrainer.store.records import StoredEvent


@dataclass(frozen=True)
class AuditProblem:
    branch: str
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"{self.branch}@{self.seq}: {self.problem}"


@dataclass
class AuditReport:
    branches: int = 0
    events: int = 0
    heads: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[AuditProblem] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "intact": self.intact,
            "branches": self.branches,
            "events": self.events,
            "first_problem": str(self.problems[0]) if self.problems else None,
            "problems": [p.__dict__ for p in self.problems],
            "heads": self.heads,
        }


_BRANCH_ROWS = """
SELECT b.branch_id, b.experiment, b.name, b.fork_seq, p.experiment, p.name
  FROM branches b LEFT JOIN branches p ON p.branch_id = b.parent_id
 WHERE %s::bigint[] IS NULL OR b.branch_id = ANY(%s::bigint[])
 ORDER BY b.branch_id
"""

_OWN_EVENTS = """
SELECT seq, event_id::text, type, schema_version, payload::text, causation_id::text, correlation_id::text,
       idempotency_key, actor, recorded_at, prev_hash, hash
  FROM events WHERE branch_id = %s ORDER BY seq
"""

_ORPHAN_EVENTS = """
SELECT e.branch_id, e.seq FROM events e
 WHERE NOT EXISTS (SELECT 1 FROM branches b WHERE b.branch_id = e.branch_id)
 ORDER BY e.branch_id, e.seq LIMIT 1
"""


def audit(store: EventStore, ref: BranchRef | None = None, experiment: str | None = None) -> AuditReport:
    """Verify the chains of one branch and its ancestors, of every branch of `experiment`
    (each once), or of every branch."""
    ids = None
    if ref is not None:
        ids = [segment[0] for segment in store.branch(ref.branch_ref).segments]
    elif experiment is not None:
        ids = [info.branch_id for info in store.branches(experiment)]
    report = AuditReport()
    rows = store.conn.execute(_BRANCH_ROWS, (ids, ids)).fetchall()
    for branch_id, experiment, name, fork_seq, parent_exp, parent_name in rows:
        report.branches += 1
        branch = f"{experiment}/{name}"
        parent = BranchRef(parent_exp, parent_name) if parent_name else None
        problems, count, head = _verify_branch(store, branch_id, experiment, name, fork_seq, parent)
        report.events += count
        report.heads[branch] = head
        report.problems.extend(problems[:1])  # branches come oldest first: ancestors before forks
    if ids is None:
        for branch_id, seq in store.conn.execute(_ORPHAN_EVENTS):
            report.problems.append(AuditProblem(f"(no branch {branch_id})", seq, "event belongs to no branch"))
    return report


def _expected_start(store: EventStore, fork_seq: int, parent: BranchRef | None) -> str | None:
    if parent is None:
        return GENESIS_HASH
    try:
        return store.read_branch(parent, after_seq=fork_seq - 1, upto_seq=fork_seq)[0].hash
    except IndexError:
        return None


def _verify_branch(
    store: EventStore, branch_id: int, experiment: str, name: str, fork_seq: int, parent: BranchRef | None
) -> tuple[list[AuditProblem], int, dict[str, Any]]:
    branch = f"{experiment}/{name}"
    problems: list[AuditProblem] = []
    prev = _expected_start(store, fork_seq, parent)
    if prev is None:
        problems.append(AuditProblem(branch, fork_seq + 1, f"fork point {parent}@{fork_seq} is missing"))
    expected_seq = fork_seq + 1
    count = 0
    head = {"seq": fork_seq, "hash": prev}
    for row in store.conn.execute(_OWN_EVENTS, (branch_id,)):
        (seq, event_id, type_, version, payload_text, causation, correlation, key, actor, recorded_at,
         prev_hash, stored_hash) = row
        count += 1
        if seq != expected_seq:
            problems.append(AuditProblem(branch, expected_seq, f"event missing (next stored event is seq {seq})"))
        elif prev is not None and prev_hash != prev:
            problems.append(AuditProblem(branch, seq, "prev_hash does not match the preceding event's hash"))
        payload = orjson.loads(payload_text)
        recomputed = event_hash(
            prev_hash=prev_hash, event_id=event_id, experiment=experiment, branch=name, seq=seq,
            event_type=type_, schema_version=version, payload_json=canonical_json(payload),
            causation_id=causation, correlation_id=correlation, idempotency_key=key, actor=actor,
            recorded_at=format_time(recorded_at),
        )
        if recomputed != stored_hash:
            problems.append(AuditProblem(branch, seq, "contents do not match the recorded hash (altered)"))
        if seq == fork_seq + 1 and parent is not None:
            problems.extend(_check_fork_event(branch, seq, type_, payload, parent, fork_seq))
        if seq == 1 and parent is None and type_ != "ExperimentCreated":
            problems.append(AuditProblem(branch, seq, f"first event is {type_}, not ExperimentCreated"))
        prev = stored_hash
        expected_seq = seq + 1
        head = {"seq": seq, "hash": stored_hash}
    return problems, count, head


def _check_fork_event(
    branch: str, seq: int, type_: str, payload: dict[str, Any], parent: BranchRef, fork_seq: int
) -> Iterable[AuditProblem]:
    if type_ != "BranchForked":
        yield AuditProblem(branch, seq, f"first own event is {type_}, not BranchForked")
    elif payload.get("parent") != str(parent) or payload.get("fork_seq") != fork_seq:
        yield AuditProblem(branch, seq, "BranchForked disagrees with the branch's recorded parent")


def verify_anchors(store: EventStore, anchors: dict[str, dict[str, Any]]) -> list[AuditProblem]:
    """Each anchored head (from an earlier audit) must still be in its branch, unchanged."""
    problems = []
    for branch, head in sorted(anchors.items()):
        ref = BranchRef.parse(branch, allow_seq=False)
        seq = int(head["seq"])
        found = store.read_branch(ref, after_seq=seq - 1, upto_seq=seq) if seq > 0 else []
        if seq > 0 and (not found or found[0].hash != head["hash"]):
            problems.append(AuditProblem(branch, seq, "anchored head is gone or changed (history truncated)"))
    return problems


def promotion_decisions(store: EventStore, branch: BranchRef | None) -> list[StoredEvent]:
    """PromotionDecided events (recorded on each experiment's main), oldest first; with a
    branch, those whose candidate is the branch or one of its ancestors."""
    experiments = [branch.experiment] if branch else sorted({info.experiment for info in store.branches()})
    lineage = {f"{e.experiment}/{e.branch}" for e in store.read_branch(branch)} if branch else None
    found = []
    for experiment in experiments:
        for event in store.read_branch(BranchRef(experiment, "main")):
            if event.type == "PromotionDecided" and (lineage is None or event.payload["candidate"] in lineage):
                found.append(event)
    return found


def describe_decision(event: StoredEvent) -> list[str]:
    """One decision as `audit --promotions` prints it: where and what it said, then one
    indented line per piece of evidence the gate recorded."""
    p = event.payload
    evidence = p.get("evidence", {})
    said = p.get("reason") or f"{p['decision']} {p['candidate']}"
    lines = [f"{event.experiment}/{event.branch}@{event.seq}: {said}"]
    for role in ("candidate_evaluation", "baseline_evaluation"):
        if role in evidence:
            e = evidence[role]
            lines.append(f"  {role.replace('_', ' ')}: {e['branch']} policy {e['policy_sha256'][:12]} "
                         f"results {e['results_sha256'][:12]} (event {e['event_id']})")  # fmt: skip
    if "diagnosis" in evidence:
        lines.append(f"  diagnosis: event {evidence['diagnosis']['event_id']} of evidence "
                     f"{evidence['diagnosis']['evidence'][:12]}")  # fmt: skip
    if "gate" in evidence:
        g = evidence["gate"]
        conditions = ", ".join(g["blocking_conditions"]) or "no condition"
        lines.append(f"  gate: harness {g['harness_hash'][:12]}, min_margin {g['min_margin']}, blocking at "
                     f"{g['blocking_severity']} or {conditions}")  # fmt: skip
    if evidence.get("criterion"):
        c = evidence["criterion"]
        lines.append(f"  criterion {c['text']}: {c['outcome']}")
    if not evidence:
        lines.append("  (recorded without the gate's evidence)")
    return lines


def decision_lines(decisions: list[StoredEvent]) -> list[str]:
    """What `audit --promotions` prints for a lineage's decisions."""
    if not decisions:
        return ["no promotion decision in this lineage"]
    return [line for event in decisions for line in describe_decision(event)]
