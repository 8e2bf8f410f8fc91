"""Where an experiment stands: its step budget (spent, left), each candidate's steps,
verdict and score, the task running now and the human decisions it waits for.

    evotrainer status math-tiny
    experiment_status(store, "math-tiny")

Read from the log alone: the budget is the one `evotrainer run` recorded with the
experiment, the steps are the candidates' own TrainingCompleted events (rejected ones
count, as the controller counts them), and a task is running when it was requested and
has no outcome yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evotrainer.evolve.gates import open_requests
from evotrainer.evolve.promotion import DECISIONS_BRANCH, incumbent_of, own_events
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore


@dataclass(frozen=True)
class BranchStatus:
    branch: str
    steps: int
    verdict: str
    """promoted, rejected, start (main), or waiting (not judged yet)."""
    score: float | None
    """The latest selection score of the branch's own newest policy."""
    tokens: int = 0
    """Prompt and completion tokens its own runs generated and trained on."""
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0


@dataclass(frozen=True)
class ExperimentStatus:
    experiment: str
    budget_steps: int | None
    spent: int
    incumbent: str
    branches: list[BranchStatus]
    running: list[str]
    """`KIND on BRANCH (task id)` for each requested task with no outcome yet, and after a
    colon its newest progress line (`train step 12/40 reward 0.61 ... eta 30s`) once its
    heartbeat has written one."""
    waiting: list[str] = field(default_factory=list)
    """`REQUEST_ID: SUBJECT on BRANCH (WHY)` for each human decision the loop stopped for
    and nobody has answered yet (`evotrainer approve|revise|abort REQUEST_ID`)."""

    @property
    def left(self) -> int | None:
        return None if self.budget_steps is None else max(self.budget_steps - self.spent, 0)


def experiment_status(store: EventStore, experiment: str) -> ExperimentStatus:
    main = store.read_branch(BranchRef(experiment, DECISIONS_BRANCH))  # NotFoundError names a missing one
    config = main[0].payload.get("config") or {}
    verdicts = {e.payload["candidate"]: e.payload["decision"] for e in main if e.type == "PromotionDecided"}
    rows, running = [], []
    for info in store.branches(experiment):
        history = store.read_branch(info.ref)
        own = own_events(history, info.ref)
        runs = [e.payload for e in own if e.type == "TrainingCompleted"]
        steps = sum(int(run["steps"]) for run in runs)
        spent = [sum(float(run.get(what, 0)) for run in runs) for what in ("tokens", "cpu_seconds", "gpu_seconds")]
        policy = next((e.payload["policy_sha256"] for e in reversed(history) if e.type == "PolicyCheckpointed"), None)
        scores = [e.payload["avg_at_k"] for e in own if e.type == "EvaluationRecorded"
                  and e.payload["policy_sha256"] == policy and e.payload["request"].get("part") != "test"]  # fmt: skip
        verdict = "start" if info.name == DECISIONS_BRANCH else verdicts.get(str(info.ref), "waiting")
        rows.append(BranchStatus(info.name, steps, verdict, scores[-1] if scores else None, int(spent[0]), *spent[1:]))
        ended = {e.causation_id for e in own if e.type in ("TaskCompleted", "TaskFailed")}
        running += [(e.event_id, f"{e.payload['kind']} on {info.ref} ({e.payload['task_id']})") for e in own
                    if e.type == "TaskRequested" and e.event_id not in ended]  # fmt: skip
    budget = config.get("budget_steps")
    waiting = [f"{e.payload['request_id']}: {e.payload['subject']} on {e.payload['branch']} ({e.payload['why']})"
               for e in open_requests(main)]  # fmt: skip
    return ExperimentStatus(experiment, int(budget) if budget is not None else None,
                            sum(r.steps for r in rows if r.branch != DECISIONS_BRANCH),
                            str(incumbent_of(store, experiment)), rows, _with_progress(store, running),
                            waiting)  # fmt: skip


def _with_progress(store: EventStore, running: list[tuple[str, str]]) -> list[str]:
    """Each running task's line, followed by the newest progress line its heartbeat wrote."""
    said = dict(store.conn.execute(
        "SELECT event_id::text, progress FROM fleet_tasks WHERE event_id = ANY(%s::uuid[]) AND progress IS NOT NULL",
        ([event_id for event_id, _ in running],)).fetchall())  # fmt: skip
    return [f"{line}: {said[event_id]}" if event_id in said else line for event_id, line in running]
