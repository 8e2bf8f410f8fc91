"""The event store: the single source of truth, in Postgres.

Public API: EventStore (append, read_branch, read_all, fork, create_experiment),
NewEvent, StoredEvent, GlobalPosition, Subscription, and `audit`.
"""

from evotrainer.store.eventstore import BranchInfo, EventStore
from evotrainer.store.records import GlobalPosition, NewEvent, StoredEvent

__all__ = ["BranchInfo", "EventStore", "GlobalPosition", "NewEvent", "StoredEvent"]
