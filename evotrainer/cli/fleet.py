"""`evotrainer worker`, `evotrainer dispatcher` and `evotrainer tasks`: running the fleet.

With EVOTRAINER_BROKER_URL set, the dispatcher hands requests to the broker and workers
consume them; without it, both run requested tasks in-process with the same task code.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import typer

from evotrainer.cli.render import print_json, print_table
from evotrainer.errors import UsageError

# Threads by default, even for one task at a time: nothing forks, so CUDA initialised by a
# task is never inherited by a child, and the broker connection keeps being read while a
# task runs (with the solo pool and RabbitMQ, messages that arrived during a task can sit
# unread in the client's buffer until some timer wakes the loop, about 10 s later).
POOLS = ("threads", "solo", "prefork")


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _run_in_process(cfg: Any, role: str) -> None:
    from evotrainer.fleet.inprocess import run_in_process
    from evotrainer.store import EventStore
    from evotrainer.training.progress import quiet_libraries

    logging.getLogger("evotrainer.fleet").info("no EVOTRAINER_BROKER_URL: the %s runs tasks in-process", role)
    quiet_libraries()
    stop = _stop_on_signals()
    with EventStore.connect() as store:
        run_in_process(store, cfg, stop=stop)


def worker_command(
    queues: str = typer.Option(",".join(("train", "rollout", "evaluate", "diagnose", "backtest", "control")),
                               "--queues", "-Q", help="Comma-separated fleet queues to consume."),
    concurrency: int = typer.Option(1, "--concurrency", "-c", min=1, help="Tasks run at once."),
    pool: str = typer.Option("threads", "--pool", help="threads (the default: safe with CUDA), solo, or "
                             "prefork (forks children at start-up; use only for code that never initialises CUDA "
                             "in the parent)."),
    hostname: str = typer.Option(None, "--hostname", help="Celery node name (default: evotrainer@HOST)."),
    loglevel: str = typer.Option("info", "--loglevel", help="Logging level."),
) -> None:
    """Run a worker: consume the fleet's queues and run the tasks (in-process without a broker)."""
    from evotrainer.fleet.config import QUEUES, FleetConfig

    _logging(loglevel)
    cfg = FleetConfig.from_env()
    wanted = [q.strip() for q in queues.split(",") if q.strip()]
    unknown = sorted(set(wanted) - set(QUEUES))
    if unknown or not wanted:
        raise UsageError(f"unknown queue(s) {', '.join(unknown) or '(none given)'}; the fleet's queues are "
                         f"{', '.join(QUEUES)}")
    if pool not in POOLS:
        raise UsageError(f"--pool must be one of {', '.join(POOLS)}, not {pool!r}")
    if pool == "solo" and concurrency != 1:
        raise UsageError("the solo pool runs one task at a time; use --pool threads for --concurrency > 1")
    if cfg.broker_url is None:
        _run_in_process(cfg, "worker")
        return
    from evotrainer.fleet.registry import load_plugins
    from workers.app import app

    load_plugins()  # fail at start-up, not on the first task, if a plugin is broken
    argv = [
        "worker", "--queues", ",".join(cfg.broker_queue(q) for q in wanted), "--pool", pool,
        "--concurrency", str(concurrency), "--loglevel", loglevel.upper(),
        # No gossip/mingle/heartbeat between workers: nothing here uses them, and they
        # slow start-up and add broker traffic.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]
    if hostname:
        argv += ["--hostname", hostname]
    app.worker_main(argv)


def dispatcher_command(
    loglevel: str = typer.Option("info", "--loglevel", help="Logging level."),
) -> None:
    """Hand requested tasks to the broker and requeue tasks whose worker vanished."""
    from evotrainer.fleet.config import FleetConfig

    _logging(loglevel)
    cfg = FleetConfig.from_env()
    if cfg.broker_url is None:
        _run_in_process(cfg, "dispatcher")
        return
    from evotrainer.fleet.outbox import Dispatcher
    from evotrainer.store import EventStore
    from workers.app import app
    from workers.publisher import CeleryPublisher

    stop = _stop_on_signals()
    store = EventStore.connect()
    dispatcher = Dispatcher(store, cfg, CeleryPublisher(app, cfg))
    logging.getLogger("evotrainer.fleet").info("dispatching to %s (queue prefix %r)", _safe(cfg.broker_url),
                                               cfg.queue_prefix)
    try:
        dispatcher.run(stop, reconnect=EventStore.connect)
    finally:
        dispatcher.store.close()


def _safe(url: str) -> str:
    """A broker URL without its password, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        creds, _, host = rest.rpartition("@")
        return f"{scheme}{sep}{creds.split(':')[0]}:***@{host}"
    return url


def tasks_command(
    experiment: str = typer.Option(None, "--experiment", help="Only this experiment's tasks."),
    state: list[str] = typer.Option(None, "--state", help="requested, queued, running, completed or failed "
                                    "(repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List requested, queued, running, completed and failed tasks with their worker and attempts."""
    from evotrainer.fleet.listing import STATES, list_tasks
    from evotrainer.store import EventStore

    bad = sorted(set(state or ()) - set(STATES))
    if bad:
        raise UsageError(f"unknown state(s) {', '.join(bad)}; states are {', '.join(STATES)}")
    with EventStore.connect() as store:
        rows = list_tasks(store, experiment, set(state or ()))
    if as_json:
        print_json([row.to_json() for row in rows])
        return
    print_table(
        ["task", "branch", "kind", "queue", "state", "attempts", "worker", "requested_at", "error"],
        [
            (r.task_id, f"{r.experiment}/{r.branch}", r.kind, r.queue, r.state, f"{r.attempts}/{r.max_attempts}",
             r.worker or "", r.requested_at.strftime("%Y-%m-%d %H:%M:%S"), _short(r.last_error))
            for r in rows
        ],
    )


def _short(text: str | None, width: int = 50) -> str:
    if not text:
        return ""
    line = text.splitlines()[0]
    return line if len(line) <= width else line[: width - 3] + "..."
