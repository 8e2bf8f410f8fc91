"""The Celery application of the worker fleet, configured for tasks that run for hours.

    celery -A workers.app worker ...        # or, better: evotrainer worker

One queue per kind of work (train, rollout, evaluate, diagnose, backtest, control),
each named with EVOTRAINER_QUEUE_PREFIX. Results are events, so there is no result
backend. The settings that keep long tasks from being lost or run twice are explained
where they are set.
"""

from __future__ import annotations

from typing import Any

from evotrainer.offline import go_offline

go_offline()  # before Celery and the tasks import anything of Hugging Face's (evotrainer.offline)

from celery import Celery, signals  # noqa: E402
from kombu import Exchange, Queue  # noqa: E402

from evotrainer.fleet.config import QUEUES, FleetConfig  # noqa: E402

TASK_NAME = "evotrainer.run_task"


def make_app(cfg: FleetConfig) -> Celery:
    app = Celery("evotrainer", broker=cfg.broker_url, include=["workers.tasks"])
    queue_args: dict[str, object] = {}
    transport: dict[str, object] = {"visibility_timeout": cfg.visibility_timeout_s}
    if cfg.broker_url and cfg.broker_url.startswith(("amqp", "pyamqp")):
        # RabbitMQ closes a channel whose delivery stays unacknowledged past its consumer
        # timeout (30 minutes by default), which would requeue every long task mid-run.
        queue_args["x-consumer-timeout"] = int(cfg.visibility_timeout_s * 1000)
        # Without publisher confirms a message the broker had not yet written could be
        # lost after publish returned; the outbox counts "returned" as "handed off".
        transport["confirm_publish"] = True
    app.conf.update(
        # Acknowledge after the task returns, so a worker killed mid-task leaves its
        # message with the broker instead of losing it...
        task_acks_late=True,
        # ...including when the pool child dies (OOM kill, segfault): requeue, don't ack.
        task_reject_on_worker_lost=True,
        # One message at a time per process: a long task must not sit on a second
        # message that another idle worker could have run.
        worker_prefetch_multiplier=1,
        # Redis re-delivers a message unacknowledged for this long: it must exceed the
        # longest task (a worker that vanished is handled sooner by our own leases).
        broker_transport_options=transport,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        task_queues=[
            Queue(cfg.broker_queue(q), Exchange(cfg.broker_queue(q), type="direct"), routing_key=cfg.broker_queue(q),
                  queue_arguments=queue_args or None)
            for q in QUEUES
        ],
        task_default_queue=cfg.broker_queue("control"),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # Task events and remote control are not used; they only add broker traffic.
        worker_send_task_events=False,
        worker_enable_remote_control=False,
    )
    return app


@signals.celeryd_after_setup.connect
def _quiet_libraries(**_: Any) -> None:
    """Once the worker's logging is set up: the training libraries' warnings and loading
    bars go to EVOTRAINER_HOME/logs/libraries.log, not into the worker's log."""
    from evotrainer.training.progress import quiet_libraries

    quiet_libraries()


def fleet_config() -> FleetConfig:
    return FleetConfig.from_env()


app = make_app(fleet_config())
