"""The fleet's mutable tables as SQLModel metadata, for `alembic check` (the schema itself
is created by migrations/versions/0002_fleet.py).

The events table refuses UPDATE, so the outbox's bookkeeping lives here: one `fleet_tasks`
row per TaskRequested event (the hand-off to the broker, then the current lease), and one
`fleet_attempts` row per time a worker started it. Both can be rebuilt from the event log
plus the broker's state, which is why they may change.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

TASK_STATES = ("pending", "published", "running", "completed", "failed")


class FleetTask(SQLModel, table=True):
    """One requested task: where its hand-off and its lease stand."""

    __tablename__ = "fleet_tasks"
    __table_args__ = (
        sa.UniqueConstraint("experiment", "branch", "task_id"),
        sa.CheckConstraint("state IN ('pending', 'published', 'running', 'completed', 'failed')",
                           name="state_known"),
        sa.CheckConstraint("(finished_at IS NULL) = (state IN ('pending', 'published', 'running'))",
                           name="finished_when_closed"),
        # The dispatcher's and reaper's scans only ever look at unfinished tasks. Not an
        # index on `state`: see migration 0007 (rows updated in place).
        # (Migration 0007 also sets the table's fillfactor; alembic does not compare it.)
        sa.Index("ix_fleet_tasks_open_requested_at", "requested_at", postgresql_where=sa.text("finished_at IS NULL")),
    )

    event_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, primary_key=True))
    experiment: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    branch: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    task_id: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    queue: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    max_attempts: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    state: str = Field(sa_column=sa.Column(sa.Text, nullable=False, server_default="pending"))
    attempts: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    worker: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    lease_expires_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    heartbeat_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    publish_count: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    requested_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    published_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    finished_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    last_error: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    progress: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    """The running task's newest progress line, written with its heartbeat."""


class FleetAttempt(SQLModel, table=True):
    """One start of a task by a worker, and how it ended."""

    __tablename__ = "fleet_attempts"

    event_id: uuid.UUID = Field(
        # No foreign key: see migration 0007.
        sa_column=sa.Column(sa.Uuid, primary_key=True)
    )
    attempt: int = Field(sa_column=sa.Column(sa.Integer, primary_key=True))
    worker: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    started_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    ended_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    outcome: str = Field(sa_column=sa.Column(sa.Text, nullable=False, server_default="running"))
    """running, completed, failed, retry (transient error) or lost (lease expired)."""
    error: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
