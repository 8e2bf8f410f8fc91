"""The fleet's settings, typed and checked when built, read from the environment.

Every duration is in seconds. The one invariant that matters for long jobs: the broker's
visibility timeout (Redis re-delivers an unacknowledged message after it) must be longer
than the longest task, or a 4-hour training job would start again every hour. Our own
lease, renewed by a heartbeat, is what requeues a task whose worker vanished.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from evotrainer import config
from evotrainer.errors import UsageError

# The fleet's queues; a request's `queue` must be one of them (routing is by task kind:
# each registered kind names its queue, and request_task fills it in).
QUEUES = ("train", "rollout", "evaluate", "diagnose", "backtest", "control")


MAX_DEFAULT_HEARTBEAT_S = 2.0
"""The default heartbeat's ceiling: one UPDATE every 2 s per worker costs nothing next to a
task, and a killed worker's task runs again about 4 s later (two missed beats)."""


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number of seconds, not {raw!r}") from None


@dataclass(frozen=True)
class FleetConfig:
    """How the dispatcher, the workers and the in-process runner behave."""

    broker_url: str | None = None
    """redis:// or amqp:// (EVOTRAINER_BROKER_URL); None runs tasks in-process."""
    queue_prefix: str = ""
    """Prepended to every broker queue name (EVOTRAINER_QUEUE_PREFIX): fleets sharing one
    broker, or concurrent test runs, never take each other's messages."""
    max_task_s: float = 12 * 3600
    """The longest a task may run (EVOTRAINER_MAX_TASK_SECONDS)."""
    visibility_timeout_s: float = 0.0
    """Redis re-delivery timeout (EVOTRAINER_VISIBILITY_TIMEOUT); 0 means 2 x max_task_s."""
    lease_s: float = 60.0
    """A running task's lease (EVOTRAINER_LEASE_SECONDS); it is requeued this long after
    its worker's last heartbeat."""
    heartbeat_s: float = 0.0
    """How often a worker renews its leases; 0 means lease_s / 4, at most
    MAX_DEFAULT_HEARTBEAT_S: the reaper takes a task of a dead worker on this host back
    after two missed beats, so the beat sets how soon a killed worker's task runs again."""
    poll_s: float = 0.2
    """How often the dispatcher looks for new requests and expired leases when idle."""
    republish_after_s: float = 3600.0
    """A hand-off the broker accepted but no worker started is published again after this
    (doubling each time): covers a broker that lost a message, e.g. Redis restarted
    without persistence. Duplicates are harmless."""
    durable_close_after_s: float = 0.1
    """An attempt that ran at least this long (EVOTRAINER_DURABLE_CLOSE_SECONDS) records
    its outcome with a commit that waits for the disk; a shorter one's commit does not
    (see execute.py: a crash of the server can then undo it, which only runs the task
    again). 0: every outcome waits for the disk."""
    retry_backoff_s: float = 1.0
    """First wait before retrying after a transient error; doubles up to retry_backoff_max_s."""
    retry_backoff_max_s: float = 60.0
    max_transient_retries: int = 8
    worker_name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    def __post_init__(self) -> None:
        if self.visibility_timeout_s == 0:
            object.__setattr__(self, "visibility_timeout_s", 2 * self.max_task_s)
        if self.heartbeat_s == 0:
            object.__setattr__(self, "heartbeat_s", min(self.lease_s / 4, MAX_DEFAULT_HEARTBEAT_S))
        if self.visibility_timeout_s <= self.max_task_s:
            raise UsageError(
                f"the broker visibility timeout ({self.visibility_timeout_s:g}s) must exceed the longest "
                f"task ({self.max_task_s:g}s), or long tasks are delivered twice; raise "
                "EVOTRAINER_VISIBILITY_TIMEOUT or lower EVOTRAINER_MAX_TASK_SECONDS"
            )
        if not 0 < self.heartbeat_s < self.lease_s:
            raise UsageError(
                f"the heartbeat ({self.heartbeat_s:g}s) must be positive and shorter than the lease "
                f"({self.lease_s:g}s), or live tasks lose their lease; set EVOTRAINER_LEASE_SECONDS higher"
            )
        if not self.durable_close_after_s >= 0:  # (NaN too)
            raise UsageError(f"EVOTRAINER_DURABLE_CLOSE_SECONDS must be 0 or more, not {self.durable_close_after_s}")
        if self.broker_url is not None and not self.broker_url.startswith(("redis://", "rediss://", "amqp://",
                                                                           "amqps://", "pyamqp://")):
            raise UsageError(f"EVOTRAINER_BROKER_URL must be a redis:// or amqp:// URL, not {self.broker_url!r}")

    @classmethod
    def from_env(cls) -> FleetConfig:
        return cls(
            broker_url=config.broker_url(),
            queue_prefix=os.environ.get("EVOTRAINER_QUEUE_PREFIX", ""),
            max_task_s=_env_float("EVOTRAINER_MAX_TASK_SECONDS", cls.max_task_s),
            visibility_timeout_s=_env_float("EVOTRAINER_VISIBILITY_TIMEOUT", 0.0),
            lease_s=_env_float("EVOTRAINER_LEASE_SECONDS", cls.lease_s),
            heartbeat_s=_env_float("EVOTRAINER_HEARTBEAT_SECONDS", 0.0),
            poll_s=_env_float("EVOTRAINER_DISPATCH_POLL_SECONDS", cls.poll_s),
            republish_after_s=_env_float("EVOTRAINER_REPUBLISH_AFTER_SECONDS", cls.republish_after_s),
            retry_backoff_s=_env_float("EVOTRAINER_RETRY_BACKOFF_SECONDS", cls.retry_backoff_s),
            durable_close_after_s=_env_float("EVOTRAINER_DURABLE_CLOSE_SECONDS", cls.durable_close_after_s),
        )

    def broker_queue(self, queue: str) -> str:
        """The broker's name for one of the fleet's queues."""
        return f"{self.queue_prefix}{queue}"

    def backoff(self, retries: int) -> float:
        """Seconds to wait before transient retry number `retries` (0-based)."""
        return float(min(self.retry_backoff_max_s, self.retry_backoff_s * 2**retries))
