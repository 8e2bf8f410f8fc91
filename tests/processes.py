"""Ending a process a test started: ask it to stop, and kill it if it does not in time."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def end_process(proc: subprocess.Popen[Any], *, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Send `sig` to a process still running, wait up to `timeout` s, then SIGKILL it."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
