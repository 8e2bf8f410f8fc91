"""A tiny agent trainer: it drives `evotrainer mcp` through the official MCP client over
stdio, as Claude Code or Codex would, with a fixed policy instead of a model.

    python examples/mcp_agent.py demo/main          # the branch must have trained once

It lists the experiments, reads the lineage, diagnoses the branch's latest rollouts and
proposes one single-field change answering what the diagnosis found: drop dead groups
when the signal is insufficient, else double the step size. The server runs with this
process's environment (EVOTRAINER_DATABASE_URL, EVOTRAINER_HOME), and everything it writes
is recorded with actor mcp:example-agent.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation


class ToolFailed(Exception):
    """A tool answered with an error (one line: what was wrong; nothing was written)."""


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    result = await session.call_tool(tool, arguments)
    if result.isError:
        raise ToolFailed(f"{tool}: {result.content[0].text}")  # type: ignore[union-attr]
    content = result.structuredContent or {}
    return content["result"] if set(content) == {"result"} else content


def next_change(conditions: list[str], harness: dict[str, Any]) -> tuple[str, Any, str]:
    """The agent's whole policy: one field, its new value, and why."""
    dropping = harness["spec"]["filters"]["drop_zero_variance_groups"]
    if any(c.startswith("insufficient_signal") for c in conditions) and not dropping:
        return ("filters.drop_zero_variance_groups", True, "if dead groups are dropped, every step learns from "
                "groups with signal, because a group of equal rewards gives GRPO no gradient")  # fmt: skip
    rate = harness["spec"]["grpo"]["learning_rate"]
    return ("grpo.learning_rate", rate * 2, "if the step size doubles, Avg@k rises, because a short run barely "
            "moves the policy")  # fmt: skip


async def main(ref: str) -> int:
    # The SDK starts a server with a bare environment unless given one: pass ours on.
    server = StdioServerParameters(command=sys.executable, args=["-m", "evotrainer", "mcp"], env=dict(os.environ))
    async with stdio_client(server) as (read, write), ClientSession(
        read, write, client_info=Implementation(name="example-agent", version="0.1")
    ) as session:
        await session.initialize()
        try:
            await steps(session, ref)
        except ToolFailed as failed:  # caught here: out of the session it is wrapped in task groups
            print(f"mcp_agent: {failed}", file=sys.stderr)
            return 1
    return 0


async def steps(session: ClientSession, ref: str) -> None:
    """List, read the lineage, diagnose, propose."""
    experiments = await call(session, "list_experiments")
    print("experiments:", ", ".join(e["experiment"] for e in experiments))
    lineage = await call(session, "lineage", experiment=ref.split("/")[0])
    print(lineage["tree"])
    diagnosis = await call(session, "diagnose", ref=ref)
    print(f"diagnosis of {ref} (seq {diagnosis['recorded_seq']}): conditions "
          f"{diagnosis['conditions'] or 'none'}")  # fmt: skip
    for finding in diagnosis["findings"]:
        if finding["severity"] != "info":
            print(f"  {finding['severity']}: {finding['metric']} = {finding['value']}")
    harness = await call(session, "harness", ref=ref)
    field, value, hypothesis = next_change(diagnosis["conditions"], harness)
    proposal = await call(session, "propose", ref=ref, field=field, value=value, hypothesis=hypothesis)
    print(f"proposed {proposal['intervention_id']}: {field} {json.dumps(proposal['old_value'])} -> "
          f"{json.dumps(proposal['new_value'])} (criterion {proposal['success_criterion']})")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) != 2 or "/" not in sys.argv[1]:
        raise SystemExit("usage: python examples/mcp_agent.py EXPERIMENT/BRANCH")
    sys.exit(asyncio.run(main(sys.argv[1])))
