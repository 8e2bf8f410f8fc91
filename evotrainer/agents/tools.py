"""The MCP server's tools: one per client method, named as the CLI commands are.

Reading tools are marked read-only (diagnose and backtest too when told not to record).
Each takes what the command takes, as JSON: a harness change is `field` and `value` (any
JSON value), so a proposal names exactly one field, as `propose --set FIELD=VALUE` does.
"""

from typing import Any

from mcp.server.fastmcp import Context, FastMCP

from evotrainer.agents.server import READ, WRITE, Tools, client_name, event_json, plain, tool_errors

MAX_EVENTS = 200
"""Events one `events` call returns at most (the newest): payloads can be large."""


def register_tools(server: FastMCP, tools: Tools) -> None:
    @server.tool(annotations=READ)
    @tool_errors
    def list_experiments(ctx: Context) -> list[dict[str, Any]]:
        """Every experiment with its domain, description and creation time, oldest first."""
        with tools.client(ctx) as db:
            return plain(db.experiments().records())

    @server.tool(annotations=READ)
    @tool_errors
    def experiment(name: str, ctx: Context) -> dict[str, Any]:
        """One experiment: its domain, description, config and branches."""
        with tools.client(ctx) as db:
            return plain(db.experiment(name))

    @server.tool(annotations=READ)
    @tool_errors
    def lineage(experiment: str, ctx: Context) -> dict[str, Any]:
        """The branch tree of an experiment: each branch's fork point, status (incumbent is the
        best so far), head, scores and, for a candidate, who proposed its intervention."""
        with tools.client(ctx) as db:
            tree = db.lineage(experiment)
            return {"tree": "\n".join(tree.lines), "branches": plain(tree.to_json())}

    @server.tool(annotations=READ)
    @tool_errors
    def branch(ref: str, ctx: Context) -> dict[str, Any]:
        """EXPERIMENT/BRANCH: its parent, fork point and head."""
        with tools.client(ctx) as db:
            return plain(db.branch(ref))

    @server.tool(annotations=READ)
    @tool_errors
    def events(ref: str, ctx: Context, last: int = 50) -> list[dict[str, Any]]:
        """The newest `last` events (at most 200) of a branch's effective history
        (EXPERIMENT/BRANCH, or EXPERIMENT/BRANCH@SEQ up to SEQ), oldest first."""
        with tools.client(ctx) as db:
            rows = db.events(ref).rows
        return [event_json(e) for e in rows[-max(1, min(last, MAX_EVENTS)):]]

    @server.tool(annotations=READ)
    @tool_errors
    def sql(query: str, ctx: Context, timeout_ms: int = 30_000) -> dict[str, Any]:
        """One read-only SQL query over the lineage's views (lineage_edges, branch_heads,
        promotion_audit, experiments) and projections (projections.interventions, ...), under
        the rules of `evotrainer sql`: a write, a second statement or a setting is refused."""
        with tools.client(ctx) as db:
            table = db.sql(query, timeout_ms=timeout_ms)
        return {"columns": list(table.columns), "rows": plain(table.rows)}

    @server.tool(annotations=READ)
    @tool_errors
    def harness(ref: str, ctx: Context) -> dict[str, Any]:
        """The harness (reward spec, filters, GRPO settings, diagnostics, evaluation protocol,
        promotion gate) that EXPERIMENT/BRANCH[@SEQ] runs under."""
        with tools.client(ctx) as db:
            return plain(db.harness(ref))

    @server.tool(annotations=READ)
    @tool_errors
    def harness_diff(a: str, b: str, ctx: Context) -> dict[str, Any]:
        """The fields whose values differ between two branches' harnesses."""
        with tools.client(ctx) as db:
            d = db.harness_diff(a, b)
        return {"a": d.a, "b": d.b, "changes": [{"field": f, "a": x, "b": y} for f, x, y in d.changes]}

    @server.tool(annotations=WRITE)
    @tool_errors
    def diagnose(ref: str, ctx: Context, evidence: str | None = None, record: bool = True) -> dict[str, Any]:
        """Three-layer diagnosis (score, signal, behaviour) of the branch's latest rollout
        evidence under its harness, with the conditions the rule engine names; recorded as
        DiagnosisRecorded unless record is false."""
        with tools.client(ctx) as db:
            d = db.diagnose(ref, evidence, record=record)
        return {"branch": d.branch, "evidence": d.evidence, "rollouts": d.rollouts, "conditions": list(d.conditions),
                "blocking": d.blocking, "recorded_seq": d.recorded_seq,
                "findings": plain(d.findings.records())}  # fmt: skip

    @server.tool(annotations=WRITE)
    @tool_errors
    def propose(
        ref: str, field: str, value: Any, hypothesis: str, ctx: Context, criterion: str | None = None,
        rollback: str | None = None,
    ) -> dict[str, Any]:
        """Record a single-factor intervention on the branch's harness: set `field` (a dotted
        path, e.g. grpo.learning_rate) to `value`, with a hypothesis ('if X changes, Y improves
        because Z'), a success criterion (METRIC OP NUMBER [and ...]) and a rollback plan."""
        with tools.client(ctx) as db:
            return plain(db.propose(ref, {field: value}, hypothesis, criterion=criterion, rollback=rollback,
                                    proposer=f"mcp:{client_name(ctx)}"))

    @server.tool(annotations=WRITE)
    @tool_errors
    def backtest(
        ref: str, intervention_id: str, ctx: Context, evidence: str | None = None, domain: str | None = None,
        record: bool = True,
    ) -> dict[str, Any]:
        """Replay an intervention proposed on the branch over its stored rollouts, before any
        training, and judge it against its criterion (BacktestCompleted unless record is false)."""
        with tools.client(ctx) as db:
            return plain(db.backtest(ref, intervention_id, evidence, domain=domain, record=record))

    @server.tool(annotations=WRITE)
    @tool_errors
    def fork(source: str, new_branch: str, ctx: Context, intervention: str | None = None,
             reason: str = "") -> dict[str, Any]:  # fmt: skip
        """Start NEW_BRANCH from SOURCE (EXPERIMENT/BRANCH[@SEQ]); with `intervention` (proposed
        and, where a backtest can judge it, backtested on SOURCE), under its harness."""
        with tools.client(ctx) as db:
            return plain(db.fork(source, new_branch, reason, intervention=intervention))

    @server.tool(annotations=WRITE)
    @tool_errors
    def train(
        ref: str, ctx: Context, steps: int | None = None, seed: int | None = None, learning_rate: float | None = None,
        group_size: int | None = None, prompts_per_step: int | None = None, policy: str = "latest",
        domain: str | None = None,
    ) -> dict[str, Any]:
        """GRPO on the branch's newest policy under its harness (a `train` task, run here
        without a broker); the options override single settings for this run."""
        with tools.client(ctx) as db:
            run = db.train(ref, domain=domain, policy=policy, steps=steps, seed=seed, learning_rate=learning_rate,
                           group_size=group_size, prompts_per_step=prompts_per_step)  # fmt: skip
        return _task(run)

    @server.tool(annotations=WRITE)
    @tool_errors
    def evaluate(
        ref: str, ctx: Context, k: int | None = None, tasks: int | None = None, temperature: float | None = None,
        seed: int | None = None, policy: str = "latest", domain: str | None = None,
    ) -> dict[str, Any]:
        """Avg@k of the branch's newest policy on the held-out split, under its harness's
        evaluation protocol unless overridden (an `evaluate` task, run here without a broker)."""
        with tools.client(ctx) as db:
            return _task(db.evaluate(ref, domain=domain, policy=policy, k=k, tasks=tasks, temperature=temperature,
                                     seed=seed))  # fmt: skip

    @server.tool(annotations=WRITE)
    @tool_errors
    def promote(ref: str, ctx: Context, record: bool = True) -> dict[str, Any]:
        """The promotion gate on a candidate branch: promoted only if it beats the best so far
        by the gate's margin with no blocking diagnostic (PromotionDecided unless record is false)."""
        with tools.client(ctx) as db:
            p = db.promote(ref, record=record)
        return {"candidate": p.candidate, "promoted": p.promoted, "reason": p.reason, "recorded_at": p.recorded_at,
                "skill": p.skill}  # fmt: skip

    @server.tool(annotations=READ)
    @tool_errors
    def audit(ctx: Context, ref: str | None = None, artifacts: bool = False) -> dict[str, Any]:
        """Verify the hash chains and signed anchors of a branch and its ancestors (every
        branch without `ref`); `artifacts` re-hashes every artifact the events reference."""
        with tools.client(ctx) as db:
            return plain(db.audit(ref, artifacts=artifacts).to_json())

    @server.tool(annotations=READ)
    @tool_errors
    def replay(ref: str, ctx: Context) -> dict[str, Any]:
        """Re-execute the branch's recorded tasks and compare outputs hash for hash, stopping
        at the first that differs."""
        with tools.client(ctx) as db:
            r = db.replay(ref)
        return {"branch": r.branch, "identical": r.identical, "tasks": plain(r.tasks.records())}

    @server.tool(annotations=READ)
    @tool_errors
    def skills_list(ctx: Context, domain: str | None = None) -> list[dict[str, Any]]:
        """The skill library: each skill's trigger, change, outcomes, effect and domains."""
        with tools.client(ctx) as db:
            return plain(db.skills(domain).records())

    @server.tool(annotations=READ)
    @tool_errors
    def skills_show(skill_id: str, ctx: Context) -> dict[str, Any]:
        """One skill in METHOD.md's format, with the change that validated it and its provenance."""
        with tools.client(ctx) as db:
            return plain(db.skill(skill_id))

    @server.tool(annotations=WRITE)
    @tool_errors
    def skills_propose(ref: str, ctx: Context) -> list[dict[str, Any]]:
        """Let every validated skill whose trigger fires on the branch's last diagnosis propose
        its own change (proposer skill:ID)."""
        with tools.client(ctx) as db:
            return plain(db.propose_from_skills(ref))

    @server.tool(annotations=READ)
    @tool_errors
    def pending(ctx: Context, experiment: str | None = None) -> list[dict[str, Any]]:
        """The requests the loop waits on at its human gates (every experiment's, or one's),
        oldest first: request id, what waits for a decision and why, the change on the table
        and the evidence shown."""
        with tools.client(ctx) as db:
            return plain(db.pending(experiment).records())

    @server.tool(annotations=WRITE)
    @tool_errors
    def approve(request_id: str, ctx: Context, note: str | None = None) -> dict[str, Any]:
        """Approve what a gate's request puts forward (a proposal, an intervention, a
        promotion); running the experiment again resumes from it. One answer per request."""
        with tools.client(ctx) as db:
            return plain(db.approve(request_id, note))

    @server.tool(annotations=WRITE)
    @tool_errors
    def revise(request_id: str, field: str, value: Any, ctx: Context, note: str | None = None) -> dict[str, Any]:
        """Answer a gate's request with one change of your own to run instead: set `field`
        (a dotted path under rewards., filters. or grpo.) to `value`; `note` says why and
        becomes the hypothesis. A promotion is approved or aborted, never revised."""
        with tools.client(ctx) as db:
            return plain(db.revise(request_id, field, value, note))

    @server.tool(annotations=WRITE)
    @tool_errors
    def abort(request_id: str, ctx: Context, note: str | None = None) -> dict[str, Any]:
        """Decline what a gate's request puts forward: the change is not tried, the promotion
        not made (recorded as the gate's rejection, with who vetoed it and `note`)."""
        with tools.client(ctx) as db:
            return plain(db.abort(request_id, note))


def _task(run: Any) -> dict[str, Any]:
    return {"kind": run.kind, "task_id": run.task_id, "branch": run.branch, "ran_here": run.ran_here,
            "failure": run.failure, "events": [event_json(e) for e in run.events.rows]}  # fmt: skip
