"""`evotrainer mcp`: the MCP server for agent trainers (evotrainer/agents/server.py).

    evotrainer mcp                         # stdio: register this command with the agent's client
    claude mcp add evotrainer -- evotrainer mcp
"""

from __future__ import annotations

import typer

from evotrainer.errors import UsageError


def mcp_command(
    transport: str = typer.Option("stdio", help="stdio (an agent's client starts the server) or streamable-http."),
    host: str = typer.Option("127.0.0.1", help="With streamable-http: the address to listen on."),
    port: int = typer.Option(8765, help="With streamable-http: the port (the endpoint is /mcp)."),
) -> None:
    """Serve evotrainer to agents over MCP (stdio, or streamable HTTP): tools for the
    lineage, SQL, diagnose, propose, backtest, fork, train, evaluate, promote, audit,
    replay and skills. What a tool writes is recorded with actor mcp:<client name>."""
    from evotrainer.agents.server import build_server, serve_stdio

    if transport not in ("stdio", "streamable-http"):
        raise UsageError(f"no transport {transport!r}: stdio or streamable-http")
    server = build_server(None, host, port)
    if transport == "stdio":
        serve_stdio(server)
    else:
        server.run("streamable-http")
