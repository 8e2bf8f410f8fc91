"""Progress of training and evaluation: a bar on a terminal, plain log lines otherwise.

Workers write to files and log collectors, where a redrawn bar is noise; a person at a
terminal wants the bar. `interactive()` decides, and the two reporters below follow it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

log = logging.getLogger("evotrainer.training")
T = TypeVar("T")


def interactive() -> bool:
    return sys.stderr.isatty()


def progress(items: Iterable[T], total: int, desc: str, every: int = 10) -> Iterator[T]:
    """Iterate with a tqdm bar on a terminal, else a log line every `every` items and at the end."""
    if interactive():
        from tqdm.auto import tqdm

        yield from tqdm(items, total=total, desc=desc, leave=False)
        return
    for i, item in enumerate(items, start=1):
        yield item
        if i % every == 0 or i == total:
            log.info("%s: %d/%d", desc, i, total)


def step_logger(total_steps: int) -> Any:
    """A TrainerCallback printing one plain line per logged step (used when no bar is shown)."""
    from transformers import TrainerCallback

    class PlainStepLog(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if not logs or "reward" not in logs:
                return
            log.info(
                "train step %d/%d reward=%.4f loss=%.4f",
                state.global_step,
                total_steps,
                logs.get("reward", float("nan")),
                logs.get("loss", float("nan")),
            )

    return PlainStepLog()
