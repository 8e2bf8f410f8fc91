"""Ending processes a test started: ask them to stop, and kill those that do not in time."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any


def end_process(proc: subprocess.Popen[Any], *, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Send `sig` to a process still running, wait up to `timeout` s, then SIGKILL it."""
    end_processes([proc], sig=sig, timeout=timeout)


def end_processes(procs: Sequence[subprocess.Popen[Any]], *, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """`end_process` for several at once: all are signalled before any is waited for, so
    their shutdowns (a Celery worker's takes seconds) overlap instead of adding up."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(sig)
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
