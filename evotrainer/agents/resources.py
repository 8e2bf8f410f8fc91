"""The MCP server's resources: what an agent reads as context rather than calls.

    evotrainer://experiments                         every experiment
    evotrainer://lineage/{experiment}                an experiment's branch tree
    evotrainer://harness/{experiment}/{branch}       the harness a branch runs under
    evotrainer://method/thresholds                   the default harness: analyzers' thresholds, gate
    evotrainer://skills                              the skill library
"""

from mcp.server.fastmcp import FastMCP

from evotrainer.agents.server import Tools, dumps, tool_errors


def register_resources(server: FastMCP, tools: Tools) -> None:
    @server.resource("evotrainer://experiments", mime_type="application/json")
    @tool_errors
    def experiments() -> str:
        """Every experiment with its domain and description."""
        with tools.client(None) as db:
            return dumps(db.experiments().records())

    @server.resource("evotrainer://lineage/{experiment}", mime_type="text/plain")
    @tool_errors
    def lineage(experiment: str) -> str:
        """An experiment's branch tree, as `evotrainer lineage` draws it."""
        with tools.client(None) as db:
            return str(db.lineage(experiment))

    @server.resource("evotrainer://harness/{experiment}/{branch}", mime_type="application/json")
    @tool_errors
    def harness(experiment: str, branch: str) -> str:
        """The harness EXPERIMENT/BRANCH runs under."""
        with tools.client(None) as db:
            return dumps(db.harness(f"{experiment}/{branch}"))

    @server.resource("evotrainer://method/thresholds", mime_type="application/json")
    def thresholds() -> str:
        """The method's defaults (METHOD.md): each analyzer's warning and critical thresholds,
        the evaluation protocol and the promotion gate of a new harness."""
        from evotrainer.harness.spec import HarnessSpec

        spec = HarnessSpec().to_json()
        return dumps({name: spec[name] for name in ("diagnostics", "evaluation", "promotion")})

    @server.resource("evotrainer://skills", mime_type="application/json")
    @tool_errors
    def skills() -> str:
        """The skill library, best record first."""
        with tools.client(None) as db:
            return dumps(db.skills().records())
