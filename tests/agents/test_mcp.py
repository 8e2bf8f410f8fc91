"""`evotrainer mcp` driven by the official MCP client over stdio, as an agent would: the
real server process on the test database, through a whole cycle (train, evaluate,
diagnose, propose, backtest, fork, train, evaluate, diagnose, promote), a human gate's
request approved by the agent, every write recorded as mcp:<client name>, and bad input
answered with a tool error that writes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, Implementation

from evotrainer.events import DecisionRequested
from evotrainer.evolve.gates import DecisionPending, decision_for, request_id
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"grpo": {"max_steps": 1, "num_generations": 4, "prompts_per_step": 2},
         "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip


def data(result: CallToolResult) -> Any:
    assert not result.isError, result.content[0].text  # type: ignore[union-attr]
    content = result.structuredContent
    assert content is not None
    return content["result"] if set(content) == {"result"} else content


def error(result: CallToolResult) -> str:
    assert result.isError
    text = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text and text.count("\n") == 0, text
    return text


def server(database_url: str, home: Path) -> StdioServerParameters:
    env = {**os.environ, "EVOTRAINER_DATABASE_URL": database_url, "EVOTRAINER_HOME": str(home),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    env.pop("EVOTRAINER_BROKER_URL", None)
    env.pop("EVOTRAINER_ARTIFACTS", None)
    return StdioServerParameters(command=str(ROOT / ".venv" / "bin" / "python"), args=["-m", "evotrainer", "mcp"],
                                 env=env, cwd=str(ROOT))  # fmt: skip


async def cycle(params: StdioServerParameters, store: EventStore, gate: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(
        read, write, client_info=Implementation(name="test-agent", version="1")
    ) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"list_experiments", "lineage", "sql", "diagnose", "propose", "backtest", "fork", "train",
                "evaluate", "promote", "audit", "replay", "harness", "harness_diff", "skills_list", "pending",
                "approve", "revise", "abort"} <= tools
        assert [e["experiment"] for e in data(await session.call_tool("list_experiments", {}))] == ["mcp"]

        # Bad input: one line back, nothing written.
        head = store.head(BranchRef("mcp", "main"))
        seen["no branch"] = error(await session.call_tool("train", {"ref": "mcp/nope"}))
        seen["bad field"] = error(await session.call_tool("propose", {
            "ref": "mcp/main", "field": "grpo.no_such", "value": 1, "hypothesis": "if X then Y because Z"}))
        seen["write in sql"] = error(await session.call_tool("sql", {"query": "DELETE FROM events"}))
        seen["missing argument"] = error(await session.call_tool("fork", {"source": "mcp/main"}))
        seen["no request"] = error(await session.call_tool("approve", {"request_id": "d-nope"}))
        assert store.head(BranchRef("mcp", "main")) == head

        # The human gate, answered by the agent.
        assert [w["request_id"] for w in data(await session.call_tool("pending", {}))] == [gate]
        seen["approved"] = data(await session.call_tool("approve", {"request_id": gate, "note": "the agent agrees"}))
        assert data(await session.call_tool("pending", {"experiment": "mcp"})) == []

        trained = data(await session.call_tool("train", {"ref": "mcp/main"}))
        assert trained["ran_here"] and trained["failure"] is None
        assert "TrainingCompleted" in [e["type"] for e in trained["events"]]
        data(await session.call_tool("evaluate", {"ref": "mcp/main"}))
        diagnosis = data(await session.call_tool("diagnose", {"ref": "mcp/main"}))
        assert diagnosis["recorded_seq"] is not None and diagnosis["findings"]

        proposal = data(await session.call_tool("propose", {
            "ref": "mcp/main", "field": "filters.drop_zero_variance_groups", "value": True,
            "hypothesis": "if dead groups are dropped, every step learns from signal, because equal rewards "
                          "give no gradient", "criterion": "effective_data_fraction >= 0"}))  # fmt: skip
        iid = proposal["intervention_id"]
        backtest = data(await session.call_tool("backtest", {"ref": "mcp/main", "intervention_id": iid}))
        assert backtest["passed"] and "effective_data_fraction" in backtest["figures"]
        forked = data(await session.call_tool("fork", {"source": "mcp/main", "new_branch": "drop-dead",
                                                        "intervention": iid}))  # fmt: skip
        assert forked["parent"] == "mcp/main"
        diff = data(await session.call_tool("harness_diff", {"a": "mcp/main", "b": "mcp/drop-dead"}))
        assert [c["field"] for c in diff["changes"]] == ["filters.drop_zero_variance_groups"]

        assert data(await session.call_tool("train", {"ref": "mcp/drop-dead"}))["failure"] is None
        data(await session.call_tool("evaluate", {"ref": "mcp/drop-dead"}))
        data(await session.call_tool("diagnose", {"ref": "mcp/drop-dead"}))
        seen["promotion"] = data(await session.call_tool("promote", {"ref": "mcp/drop-dead"}))

        seen["skills"] = data(await session.call_tool("skills_list", {}))
        seen["lineage"] = data(await session.call_tool("lineage", {"experiment": "mcp"}))
        seen["audit"] = data(await session.call_tool("audit", {}))
        seen["resource"] = (await session.read_resource("evotrainer://lineage/mcp")).contents[0].text  # type: ignore[union-attr]
        thresholds = (await session.read_resource("evotrainer://method/thresholds")).contents[0].text  # type: ignore[union-attr]
        seen["thresholds"] = json.loads(thresholds)
    return seen


@pytest.mark.slow
def test_an_agent_drives_a_whole_cycle_over_stdio(database_url: str, store: EventStore, tmp_path: Path) -> None:
    store.create_experiment("mcp", {"domain": "math", "config": {"domain": "math:digit_add"}})
    store.append(BranchRef("mcp", "main"), [versioned_event(HarnessSpec.parse(SMALL))])
    gate = DecisionRequested(request_id=request_id("mcp", "test"), subject="intervention", branch="mcp/main",
                             why="autonomy approve-interventions",
                             proposal={"field": "grpo.learning_rate", "value": 0.002})  # fmt: skip
    with pytest.raises(DecisionPending):
        decision_for(store, gate)  # as the loop asks: seq 3 on mcp/main

    params = server(database_url, tmp_path / "home")
    seen = asyncio.run(asyncio.wait_for(cycle(params, store, gate.request_id), timeout=240))

    assert "no branch mcp/nope" in seen["no branch"]
    assert "grpo.no_such" in seen["bad field"]
    assert "refused" in seen["write in sql"]
    assert "new_branch" in seen["missing argument"]
    assert "no decision request d-nope" in seen["no request"]
    approved = seen["approved"]
    assert (approved["decision"], approved["actor"], approved["note"]) == ("approved", "mcp:test-agent",
                                                                           "the agent agrees")  # fmt: skip
    assert approved["recorded_at"] == "mcp/main@4" and "grpo.learning_rate -> 0.002" in approved["request"]
    promotion = seen["promotion"]
    assert promotion["recorded_at"].startswith("mcp/main@") and isinstance(promotion["promoted"], bool)
    # The gate's first verdict on the candidate is one outcome of its skill, promoted or not.
    [skill] = seen["skills"]
    assert skill["skill_id"].endswith("/filters.drop_zero_variance_groups/enable")
    assert skill["successes"] + skill["failures"] == 1 and skill["successes"] == int(promotion["promoted"])
    assert "drop-dead @" in seen["lineage"]["tree"] and "by mcp:test-agent" in seen["lineage"]["tree"]
    assert seen["resource"] == seen["lineage"]["tree"]
    assert seen["audit"]["intact"] is True
    assert seen["thresholds"]["diagnostics"]["dead_group_ratio"]["warning"] == 0.3

    # Everything after the setup was written by the agent, under its client's name.
    written = [e for ref in ("main", "drop-dead") for e in store.read_branch(BranchRef("mcp", ref)) if e.seq > 3]
    assert written and {e.actor for e in written} == {"mcp:test-agent"}
    assert written[0].type == "DecisionRecorded" and written[0].payload["request_id"] == gate.request_id
    proposed = next(e for e in written if e.type == "InterventionProposed")
    assert proposed.payload["proposer"] == "mcp:test-agent"

    # The README's example agent, on the candidate: it diagnoses and proposes, as itself.
    agent = subprocess.run([params.command, str(ROOT / "examples" / "mcp_agent.py"), "mcp/drop-dead"],
                           env=params.env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert agent.returncode == 0, agent.stderr[-2000:]
    assert agent.stdout.startswith("experiments: mcp\n") and "proposed iv-" in agent.stdout
    last = store.read_branch(BranchRef("mcp", "drop-dead"))[-1]
    assert (last.type, last.actor, last.payload["proposer"]) == ("InterventionProposed", "mcp:example-agent",
                                                                 "mcp:example-agent")  # fmt: skip
