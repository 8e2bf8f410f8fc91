"""The dashboard: a read-only Starlette app over the event store.

    evotrainer ui                       # http://127.0.0.1:8765/
    create_app(database_url)            # the ASGI app, for uvicorn or a test client

Every page reads inside `read_only()` (evotrainer/lineage/readonly.py): a READ ONLY
transaction under the reader role with a statement timeout, as `evotrainer sql` reads.
Like `evotrainer sql`, a request first brings the projections up to date (derived tables
only; the log, branches and anchors are never written), without waiting for other
writers' open transactions: what they commit shows on the next poll.

Only GET and HEAD are served; anything else is refused with 405 before routing. When a
token is set (required for a non-loopback bind), every request must carry it: as
`?token=`, as `Authorization: Bearer`, or in the cookie the first tokened request sets.
A missing experiment, branch or intervention, or a malformed one, is a 404 page; any
other failure is a 500 page that names no internals.
"""

from __future__ import annotations

import logging
import queue
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from evotrainer.errors import UsageError
from evotrainer.lineage.readonly import read_only
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, GlobalPosition
from evotrainer.ui import reads
from evotrainer.ui.render import Links, Pages
from evotrainer.ui.svg import curve_svg
from evotrainer.ui.tables import lineage_parts

log = logging.getLogger("evotrainer.ui")
READ_METHODS = frozenset({"GET", "HEAD"})
TOKEN_COOKIE = "evotrainer_token"
MAX_ROLLOUTS = 200


class StorePool:
    """A few store connections shared by the server's threads, one request at a time each."""

    def __init__(self, url: str | None, size: int = 4, timeout_ms: int = 10_000) -> None:
        self.url = url
        self.timeout_ms = timeout_ms
        self.idle: queue.LifoQueue[EventStore] = queue.LifoQueue(maxsize=size)

    @contextmanager
    def reading(self) -> Iterator[EventStore]:
        """A store whose projections were just caught up, inside a read-only transaction."""
        from evotrainer.lineage.projections import Projector

        try:
            store = self.idle.get_nowait()
        except queue.Empty:
            store = EventStore.connect(self.url, actor="evotrainer-ui")
        healthy = False
        try:
            Projector(store).catch_up(timeout_s=0.0)
            with read_only(store.conn, self.timeout_ms):
                yield store
            healthy = True
        finally:
            if healthy and not self.idle.full():
                self.idle.put_nowait(store)
            else:
                store.close()

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get_nowait().close()


def position_of(store: EventStore) -> str:
    """The store's global position (its newest committed event), as /api/position says it."""
    return _text(store.last_position())


def projected_position(store: EventStore) -> str:
    """How far the projections a page was built from had got. A live page fetches itself
    again while this differs from /api/position: also when the projections lag behind the
    log (another writer's transaction still open), until they have caught up."""
    from evotrainer.lineage.projections import Projector

    return _text(Projector(store).position())


def _text(at: GlobalPosition) -> str:
    return f"{at.transaction_id}:{at.position}"


class Guard:
    """Refuses writes (405) and, when a token is set, requests without it (401)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if request.method not in READ_METHODS:
            response: Response = _plain(405, "read-only: only GET and HEAD are served")
            response.headers["Allow"] = "GET, HEAD"
            await response(scope, receive, send)
            return
        if self.token is not None:
            given = _token_of(request)
            if given is None or not secrets.compare_digest(given, self.token):
                await _plain(401, "a token is required: open the URL `evotrainer ui` printed")(scope, receive, send)
                return
        # With a valid ?token= and no cookie yet, set the cookie, so that links need no token.
        cookie = self.token is not None and bool(request.query_params.get("token")) and \
            request.cookies.get(TOKEN_COOKIE) != self.token
        started = time.perf_counter()

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                # Server-Timing: the time the app took to build the response (bench/ui.py reads it).
                took = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
                headers = [*message.get("headers", []), (b"server-timing", took.encode())]
                if cookie:
                    value = f"{TOKEN_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _token_of(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE)


def _plain(status: int, text: str) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain")


def create_app(database_url: str | None = None, token: str | None = None, poll_ms: int = 2000,
               timeout_ms: int = 10_000) -> ASGIApp:  # fmt: skip
    """The dashboard over the store at `database_url` (the configured one when None)."""
    pool = StorePool(database_url, timeout_ms=timeout_ms)
    pages = Pages(Links())
    links = pages.links

    def page(template: str, build: Callable[[EventStore, Request], dict[str, Any]]) -> Callable[..., Response]:
        def endpoint(request: Request) -> Response:
            with pool.reading() as store:
                context = build(store, request)
                position = projected_position(store)
            return HTMLResponse(pages.render(template, position=position, live=True, poll_ms=poll_ms, **context))

        return endpoint

    def experiments(store: EventStore, request: Request) -> dict[str, Any]:
        return {"rows": reads.experiments(store)}

    def lineage(store: EventStore, request: Request) -> dict[str, Any]:
        found = reads.lineage(store, request.path_params["experiment"])
        graph, table = lineage_parts(found, links)
        return {"lineage": found, "graph": graph, "table": table}

    def branch(store: EventStore, request: Request) -> dict[str, Any]:
        found = reads.branch(store, _ref(request))
        return {"b": found, "curves": [curve_svg(title, points) for title, points in found.curves]}

    def audit(store: EventStore, request: Request) -> dict[str, Any]:
        return {"a": reads.audit(store, _ref(request))}

    def rollouts(store: EventStore, request: Request) -> dict[str, Any]:
        ref, evidence = _ref(request), request.path_params["evidence"]
        found = reads.rollouts(store, ref, evidence, _positions(request.query_params.get("at", "")))
        return {"ref": ref, "evidence": evidence, "rows": found}

    def intervention(store: EventStore, request: Request) -> dict[str, Any]:
        p = request.path_params
        return {"iv": reads.intervention(store, p["experiment"], p["intervention_id"])}

    def harness_diff(store: EventStore, request: Request) -> dict[str, Any]:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        left, right, changes = reads.harness_diff(store, BranchRef.parse(a), BranchRef.parse(b))
        return {"a": a, "b": b, "left": left, "right": right, "changes": changes}

    def skills(store: EventStore, request: Request) -> dict[str, Any]:
        return {"skills": reads.skills(store)}

    def comparisons(store: EventStore, request: Request) -> dict[str, Any]:
        return {"rows": reads.comparisons(store)}

    def position(request: Request) -> Response:
        with pool.reading() as store:
            return JSONResponse({"position": position_of(store)})

    def error_page(status: int, title: str, message: str) -> Response:
        html = pages.render("error.html", position="", live=False, poll_ms=poll_ms, status=status, title=title,
                            message=message)  # fmt: skip
        return HTMLResponse(html, status_code=status)

    async def not_found(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException) and exc.status_code != 404:
            return error_page(exc.status_code, "refused", str(exc.detail))
        message = str(exc) if isinstance(exc, UsageError) else f"no page at {request.url.path}"
        return error_page(404, "not found", message)

    async def failed(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error_page(500, "server error", "This page could not be built; the server's log says why.")

    routes = [
        Route("/", page("experiments.html", experiments)),
        Route("/e/{experiment}", page("lineage.html", lineage)),
        Route("/e/{experiment}/b/{branch}", page("branch.html", branch)),
        Route("/e/{experiment}/b/{branch}/audit", page("audit.html", audit)),
        Route("/e/{experiment}/b/{branch}/rollouts/{evidence}", page("rollouts.html", rollouts)),
        Route("/e/{experiment}/interventions/{intervention_id}", page("intervention.html", intervention)),
        Route("/harness/diff", page("diff.html", harness_diff)),
        Route("/skills", page("skills.html", skills)),
        Route("/compare", page("compare.html", comparisons)),
        Route("/api/position", position),
    ]
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        pool.close()

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: not_found, UsageError: not_found, Exception: failed},
        lifespan=lifespan,
    )  # fmt: skip
    return Guard(app, token)


def _ref(request: Request) -> BranchRef:
    p = request.path_params
    return BranchRef.parse(f"{p['experiment']}/{p['branch']}", allow_seq=False)


def _positions(text: str) -> list[int]:
    try:
        positions = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"bad rollout positions {text!r}: expected numbers separated by commas") from None
    return positions[:MAX_ROLLOUTS]
