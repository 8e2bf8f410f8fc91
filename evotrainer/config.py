"""Where evotrainer keeps its data, read from the environment.

EVOTRAINER_HOME (default ~/.evotrainer) holds the embedded Postgres and the artifacts;
EVOTRAINER_DATABASE_URL, EVOTRAINER_BROKER_URL and EVOTRAINER_ARTIFACTS override the parts.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The directory evotrainer owns; nothing outside it is ever modified."""
    return Path(os.environ.get("EVOTRAINER_HOME") or Path.home() / ".evotrainer").expanduser()


def database_url_override() -> str | None:
    """The Postgres URL the user configured, or None to use the embedded server."""
    return os.environ.get("EVOTRAINER_DATABASE_URL") or None


def broker_url() -> str | None:
    """redis:// or amqp:// URL of the Celery broker; None runs tasks in-process."""
    return os.environ.get("EVOTRAINER_BROKER_URL") or None


def artifacts_location() -> str:
    """A directory or fsspec URL for content-addressed artifacts."""
    return os.environ.get("EVOTRAINER_ARTIFACTS") or str(home() / "artifacts")
