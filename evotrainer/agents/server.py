"""The MCP server: evotrainer's Python API as tools and resources for agent trainers
(Claude Code, Codex, a local agent), over the official `mcp` SDK.

    evotrainer mcp                                  # stdio: what an agent client launches
    evotrainer mcp --transport streamable-http --port 8765

Every tool is a thin layer over one `evotrainer.connect()` client method, so a tool
validates exactly as the matching CLI command does and writes the same events. What a
tool appends is recorded with actor `mcp:<client name>` (the name the agent's client
gave when it connected). Bad input (an unknown branch, a change of two fields, a write in
`sql`) is an EvotrainerError raised before anything is written; it comes back as a tool
error carrying the CLI's one-line message, never a traceback. Results are plain JSON.

Over stdio, standard output carries the protocol and nothing else: the training code and
the libraries it loads print progress, so the server keeps the real stdout for MCP alone
and points file descriptor 1 (and sys.stdout, during each call) at stderr.
"""

import contextlib
import dataclasses
import datetime
import decimal
import functools
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from evotrainer.client import Client, connect
from evotrainer.errors import EvotrainerError

INSTRUCTIONS = """\
evotrainer is an event-sourced record of GRPO training experiments. An experiment's
branches are EXPERIMENT/BRANCH (EXPERIMENT/main is where it starts). The loop per branch:
train -> evaluate -> diagnose -> propose ONE single-field harness change with a hypothesis
-> backtest it on stored rollouts -> fork a branch under it -> train -> evaluate ->
diagnose -> promote (the gate keeps it only if it beats the best so far). Read first
(list_experiments, lineage, harness, diagnose with record=false, sql); every write is
recorded with your client's name as its actor."""

READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)

F = TypeVar("F", bound=Callable[..., Any])


def plain(value: Any) -> Any:
    """A result as JSON values: dataclasses and named tuples as objects, times as ISO text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: plain(v) for name, v in zip(value._fields, value, strict=True)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def event_json(event: Any) -> dict[str, Any]:
    return plain(event.to_json())


def client_name(ctx: Context | None) -> str:
    """The name the agent's MCP client gave at initialization ('unknown' without one)."""
    params = ctx.session.client_params if ctx is not None else None
    name = params.clientInfo.name if params is not None else ""
    return name.strip() or "unknown"


class Tools:
    """The server's tools, each opening a client recorded as `mcp:<client name>`."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    @contextlib.contextmanager
    def client(self, ctx: Context | None) -> Iterator[Client]:
        # One connection per call: a failed call leaves no transaction behind for the next.
        with contextlib.redirect_stdout(sys.stderr), connect(self.url, actor=f"mcp:{client_name(ctx)}") as db:
            yield db


def tool_errors(fn: F) -> F:
    """Our errors become tool errors with the CLI's one-line message (nothing was written:
    every write validates first)."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EvotrainerError as exc:
            raise ToolError(str(exc)) from None

    return wrapped  # type: ignore[return-value]


class Server(FastMCP):
    """FastMCP whose tool errors are one line: the SDK reports arguments that do not
    validate with pydantic's multi-line text, which an agent reads worse than the CLI's."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            raise ToolError(one_line(name, exc)) from None


def one_line(tool: str, exc: ToolError) -> str:
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in cause.errors())
        return f"bad arguments for {tool}: {problems}"
    return " ".join(str(exc).split("\n")[0].split())


def build_server(url: str | None = None, host: str = "127.0.0.1", port: int = 8765) -> FastMCP:
    """The server with every tool and resource registered; `url` as for connect()."""
    from evotrainer.agents.resources import register_resources
    from evotrainer.agents.tools import register_tools

    server = Server("evotrainer", instructions=INSTRUCTIONS, host=host, port=port, log_level="WARNING")
    tools = Tools(url)
    register_tools(server, tools)
    register_resources(server, tools)
    return server


def serve_stdio(server: FastMCP) -> None:
    """Serve over stdin/stdout, keeping the real stdout for protocol messages only."""
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a subprocess's or a C library's output: to stderr
    # The SDK wraps sys.stdout.buffer when it starts: give it the protocol's copy.
    sys.stdout = open(protocol.fileno(), "w", encoding="utf-8", closefd=False)
    server.run("stdio")


def dumps(value: Any) -> str:
    return json.dumps(plain(value), indent=1)
