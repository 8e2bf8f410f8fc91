"""Retro-validation: an analyzer joins the harness only if it separates good from bad runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from evotrainer.artifacts import open_store
from evotrainer.diagnostics import (
    DiagnosisInput,
    EvidenceView,
    InvalidAnalyzerError,
    LabelledRun,
    Measurement,
    available_analyzers,
    diagnose,
    labelled_runs,
    registry,
    retro_validate,
    revise,
    revision_events,
)
from evotrainer.evidence import to_jsonl
from evotrainer.harness import AnalyzerSettings, HarnessSpec
from evotrainer.harness.versions import branch_harness
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.diagnostics.builders import record


@dataclass(frozen=True)
class EmptyAnswerRate:
    """Share of completions that are empty: the gap no built-in metric captured."""

    name: str = "empty_answer_rate"
    version: int = 1
    layer: str = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        recs = data.evidence.records
        empty = [i for i, r in enumerate(recs) if not r.text.strip()]
        return Measurement(len(empty) / len(recs) if recs else None, empty)


@dataclass(frozen=True)
class PromptLength:
    """Does not separate anything: every run has the same prompts."""

    name: str = "prompt_length"
    version: int = 1
    layer: str = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        recs = data.evidence.records
        return Measurement(sum(r.prompt_tokens for r in recs) / len(recs))


def run(name: str, empty: int, good: bool) -> LabelledRun:
    """Ten completions, the first `empty` of them empty (the rest name the run, so no two
    runs have the same bytes)."""
    return LabelledRun(name, [record(0, 0, i, text="" if i < empty else f"{name} {i}") for i in range(10)], good)


# Three of each label: revision.min_runs_per_label.
RUNS = [run("v1", 0, True), run("v2", 1, True), run("v3", 5, False), run("v4", 6, False), run("v5", 4, False),
        run("v6", 0, True)]  # fmt: skip
SETTINGS = AnalyzerSettings(warning=0.2, critical=0.5)


def test_an_analyzer_that_separates_the_runs_is_accepted_and_joins_the_harness() -> None:
    base = HarnessSpec()
    revision = retro_validate(EmptyAnswerRate(), SETTINGS, RUNS, base, gap="empty answers were not measured")
    e = revision.event
    assert e.accepted and e.change == "added"
    assert e.validation["balanced_accuracy"] == 1.0
    assert e.validation["bad_runs"] == 3 and e.validation["good_runs"] == 3
    assert [r["flagged"] for r in e.validation["runs"]] == [False, False, True, True, True, False]
    assert e.thresholds == {"warning": 0.2, "critical": 0.5}
    assert revision.candidate is not None and "empty_answer_rate" in revision.candidate.diagnostics
    events = revision_events(revision, base.address())
    assert [ev.type for ev in events] == ["DiagnosticRevised", "HarnessVersioned"]
    assert events[1].payload["changed_fields"] == ["diagnostics.empty_answer_rate"]
    assert events[1].payload["parent_hash"] == base.address()
    # once joined, diagnose runs it with the harness's thresholds
    d = diagnose(DiagnosisInput(EvidenceView(RUNS[3].records)), revision.candidate,
                 {**available_analyzers(), "empty_answer_rate": EmptyAnswerRate()})
    assert {f.metric: f.severity for f in d.findings}["empty_answer_rate"] == "critical"


def test_an_analyzer_that_does_not_separate_the_runs_is_refused() -> None:
    revision = retro_validate(PromptLength(), AnalyzerSettings(warning=4), RUNS, HarnessSpec())
    assert not revision.accepted and revision.candidate is None
    assert revision.event.validation["balanced_accuracy"] == 0.5  # flags every run, good or bad
    assert revision.event.validation["true_positive_rate"] == 1.0
    assert revision.event.validation["true_negative_rate"] == 0.0
    assert "does not separate" in revision.event.validation["reason"]
    assert [e.type for e in revision_events(revision, HarnessSpec().address())] == ["DiagnosticRevised"]


def test_thresholds_that_flag_good_runs_too_are_refused() -> None:
    loose = AnalyzerSettings(warning=0.05)  # flags v2 (good) as well as every bad run
    revision = retro_validate(EmptyAnswerRate(), loose, RUNS, HarnessSpec())
    assert revision.event.validation["balanced_accuracy"] == pytest.approx(5 / 6)  # (1 + 2/3) / 2
    assert revision.accepted  # the default asks for 0.75
    stricter = HarnessSpec().with_field("revision.min_balanced_accuracy", 0.9)
    refused = retro_validate(EmptyAnswerRate(), loose, RUNS, stricter)
    assert not refused.accepted and "does not separate" in refused.event.validation["reason"]


def test_without_enough_runs_of_both_labels_nothing_is_accepted() -> None:
    revision = retro_validate(EmptyAnswerRate(), SETTINGS, [r for r in RUNS if not r.good], HarnessSpec())
    assert not revision.accepted and "needs at least 3 good and 3 bad runs; got 0 good, 3 bad" in (
        revision.event.validation["reason"])
    # Two good runs would let any analyzer that happens to differ between them through.
    two_good = retro_validate(EmptyAnswerRate(), SETTINGS, RUNS[:5], HarnessSpec())
    assert two_good.event.validation["balanced_accuracy"] == 1.0  # it separates them, yet
    assert not two_good.accepted and "got 2 good, 3 bad" in two_good.event.validation["reason"]
    assert HarnessSpec().revision.min_runs_per_label == 3


def _record_run(store: EventStore, branch: BranchRef, sha: str) -> None:
    store.append(branch, [NewEvent("RolloutsRecorded", {"evidence_sha256": sha, "policy_sha256": "b" * 64,
                                                        "base_policy_sha256": "b" * 64})])  # fmt: skip


def _decide(store: EventStore, main: BranchRef, candidate: str, decision: str) -> None:
    store.append(main, [NewEvent("PromotionDecided", {"candidate": f"demo/{candidate}", "decision": decision})])


def test_judged_branches_in_the_store_retro_validate_an_analyzer(store: EventStore, tmp_path: Path) -> None:
    artifacts = open_store(tmp_path / "arts")
    sha = {r.name: artifacts.put_bytes(to_jsonl(r.records)) for r in RUNS}
    main = BranchRef("demo", "main")
    store.create_experiment("demo")
    _record_run(store, main, sha["v1"])  # inherited by every fork; v1's own run has the same bytes
    store.fork(main, "idle")  # judged, but never ran: left out
    _decide(store, main, "idle", "rejected")
    for r in RUNS:
        store.fork(main, r.name)  # later forks inherit the earlier decisions on main
        _record_run(store, BranchRef("demo", r.name), sha[r.name])
        _decide(store, main, r.name, "promoted" if r.good or r.name == "v5" else "rejected")
    _decide(store, main, "v5", "rejected")  # judged again: the latest decision counts
    _record_run(store, BranchRef("demo", "v3"), sha["v1"])  # a run after its rejection was not judged

    runs = labelled_runs(store, "demo", artifacts)
    assert [(r.name, r.good) for r in runs] == [(f"demo/{r.name}", r.good) for r in RUNS]
    assert [sum(not x.text for x in r.records) for r in runs] == [0, 1, 5, 6, 4, 0]

    events = revise(store, main, EmptyAnswerRate(), SETTINGS, gap="empty answers were not measured",
                    artifacts=artifacts)  # fmt: skip
    assert [e.type for e in events] == ["HarnessVersioned", "DiagnosticRevised", "HarnessVersioned"]
    revised = events[1].payload
    assert revised["accepted"] and revised["validation"]["balanced_accuracy"] == 1.0
    assert [row["run"] for row in revised["validation"]["runs"]] == [f"demo/{r.name}" for r in RUNS]
    store.append(main, events)
    assert "empty_answer_rate" in branch_harness(store, main).spec.diagnostics


class _FakeEntryPoint(EntryPoint):
    def load(self):  # type: ignore[no-untyped-def]
        return {"plugin:EmptyAnswerRate": EmptyAnswerRate, "plugin:Bad": object}[self.value]


def test_user_analyzers_come_from_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = _FakeEntryPoint("empty_answer_rate", "plugin:EmptyAnswerRate", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "analyzer_entry_points", lambda: [ep])
    assert isinstance(available_analyzers()["empty_answer_rate"], EmptyAnswerRate)
    spec = HarnessSpec().with_field("diagnostics.empty_answer_rate", SETTINGS.model_dump())
    d = diagnose(DiagnosisInput(EvidenceView(RUNS[2].records)), spec)
    assert {f.metric: f.value for f in d.findings}["empty_answer_rate"] == 0.5


def test_a_broken_entry_point_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = _FakeEntryPoint("bad", "plugin:Bad", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "analyzer_entry_points", lambda: [ep])
    with pytest.raises(InvalidAnalyzerError, match="without 'name'"):
        available_analyzers()


def test_a_harness_naming_a_missing_analyzer_is_refused() -> None:
    spec = HarnessSpec().with_field("diagnostics.not_installed", {"warning": 0.1})
    with pytest.raises(Exception, match="not installed"):
        diagnose(DiagnosisInput(EvidenceView([])), spec)
