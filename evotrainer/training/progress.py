"""Progress of training and evaluation: a bar on a terminal, plain log lines otherwise.

Workers write to files and log collectors, where a redrawn bar is noise; a person at a
terminal wants the bar. `interactive()` decides, and the two reporters below follow it.
The libraries' own chatter (warnings, loading and download bars) is neither: the CLI and
the workers send it to a file with `quiet_libraries()`, and the CLI shows our plain lines
with `show_progress_lines()`.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from evotrainer.fleet.progress import report

log = logging.getLogger("evotrainer.training")
T = TypeVar("T")

LIBRARY_LOGGERS = ("py.warnings", "transformers", "trl", "accelerate", "datasets", "huggingface_hub")
"""Loggers whose records go to the library log (`py.warnings` holds Python's warnings)."""
_library_handlers: dict[Path, logging.Handler] = {}
_screen_handler: logging.Handler | None = None


def interactive() -> bool:
    return sys.stderr.isatty()


def progress(items: Iterable[T], total: int, desc: str, every: int = 10) -> Iterator[T]:
    """Iterate with a tqdm bar on a terminal, else a log line every `every` items and at the end."""
    if interactive():
        from tqdm.auto import tqdm

        for i, item in enumerate(tqdm(items, total=total, desc=desc, leave=False), start=1):
            yield item
            report(f"{desc}: {i}/{total}")
        return
    for i, item in enumerate(items, start=1):
        yield item
        if i % every == 0 or i == total:
            log.info("%s: %d/%d", desc, i, total)
            report(f"{desc}: {i}/{total}")


def step_line(step: int, total: int, logs: Mapping[str, float], elapsed_s: float) -> str:
    """`train step 4/20 reward 0.312 dead groups 35% loss 0.0123 eta 12s`, from TRL's logs."""
    parts = [f"train step {step}/{total}", f"reward {logs.get('reward', float('nan')):.3f}"]
    if logs.get("frac_reward_zero_std") is not None:
        parts.append(f"dead groups {logs['frac_reward_zero_std']:.0%}")
    if logs.get("loss") is not None:
        parts.append(f"loss {logs['loss']:.4g}")
    if 0 < step < total:
        parts.append(f"eta {duration(elapsed_s / step * (total - step))}")
    return " ".join(parts)


def duration(seconds: float) -> str:
    """12s, 3m04s, 1h02m."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def step_logger(total_steps: int, every: int | None = None, to_log: bool = True) -> Any:
    """A TrainerCallback writing one `step_line` every `every` steps (a tenth of the run by
    default) and at the last step, to the log (for when no bar is shown) unless `to_log` is
    False, and every step's line to the running fleet task's progress (fleet/progress.py)."""
    from transformers import TrainerCallback

    every = every or max(1, total_steps // 10)

    class PlainStepLog(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.started = time.monotonic()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.started = time.monotonic()  # after the model and data are loaded

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            step = state.global_step
            if not logs or "reward" not in logs:
                return
            line = step_line(step, total_steps, logs, time.monotonic() - self.started)
            report(line)
            if to_log and (step % every == 0 or step == total_steps):
                log.info("%s", line)

    return PlainStepLog()


def show_progress_lines() -> None:
    """Print `evotrainer.training`'s INFO lines (the plain progress lines) on stderr: for
    the CLI, where nothing else shows them. Safe to call twice."""
    global _screen_handler
    if _screen_handler is None:
        _screen_handler = logging.StreamHandler(sys.stderr)
        _screen_handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(_screen_handler)
    if not log.isEnabledFor(logging.INFO):
        log.setLevel(logging.INFO)


def library_log() -> Path:
    """Where `quiet_libraries()` sends the libraries' warnings and logs."""
    from evotrainer import config

    return config.home() / "logs" / "libraries.log"


def quiet_libraries() -> Path:
    """Keep the libraries' chatter off the user's screen: Python warnings, the logs of
    transformers, TRL, accelerate, datasets and huggingface_hub, and their loading and
    download bars. Records go to `library_log()`; bars are switched off. Our own progress
    (the training bar, the plain lines) is untouched. Safe to call twice; returns the log."""
    path = library_log()
    handler = _library_handlers.get(path)
    if handler is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, delay=True, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        _library_handlers[path] = handler
    # The libraries install their own stderr handlers when they are imported (transformers
    # on first use): let them do it now, so that the loop below can take those out.
    if _installed("transformers"):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_default_handler()
        transformers_logging.disable_progress_bar()  # "Loading weights", "Writing model shards"
    if _installed("huggingface_hub"):
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if _installed("datasets"):
        import datasets

        datasets.disable_progress_bars()
    logging.captureWarnings(True)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if _on_screen(h)]:
            logger.removeHandler(old)
        if handler not in logger.handlers:
            logger.addHandler(handler)
        logger.propagate = False  # not to a root handler on stderr either
    return path


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _on_screen(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
