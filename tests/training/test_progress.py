"""What training shows: plain step lines off a terminal, and none of the libraries' chatter."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from evotrainer.training.progress import duration, step_line, step_logger


def test_a_step_line_says_where_the_run_is_and_how_long_it_has_left() -> None:
    logs = {"reward": 0.3124, "frac_reward_zero_std": 0.35, "loss": 0.0123}
    assert step_line(4, 20, logs, elapsed_s=8.0) == "train step 4/20 reward 0.312 dead groups 35% loss 0.0123 eta 32s"
    assert step_line(20, 20, {"reward": 0.5}, elapsed_s=40.0) == "train step 20/20 reward 0.500"  # done: no eta
    assert [duration(s) for s in (0.4, 59, 184, 3725)] == ["0s", "59s", "3m04s", "1h02m"]


def test_the_step_logger_writes_a_tenth_of_the_steps_and_the_last(caplog: pytest.LogCaptureFixture) -> None:
    callback = step_logger(25)
    with caplog.at_level(logging.INFO, logger="evotrainer.training"):
        for step in range(1, 26):
            callback.on_log(None, SimpleNamespace(global_step=step), None, logs={"reward": 0.5, "loss": 0.1})
        callback.on_log(None, SimpleNamespace(global_step=25), None, logs={"train_runtime": 3.0})  # the summary
    steps = [r.getMessage().split()[2] for r in caplog.records]
    assert steps == [f"{s}/25" for s in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25)]


QUIET = """
import logging, warnings
from evotrainer.training.progress import log, quiet_libraries, show_progress_lines

path = quiet_libraries()
quiet_libraries()  # twice is the same as once
show_progress_lines()
warnings.warn("a deprecation nobody asked to see", FutureWarning)
from transformers.utils import logging as transformers_logging
transformers_logging.get_logger("transformers.modeling_utils").warning("transformers chatter")
list(transformers_logging.tqdm(range(3), desc="Loading weights"))
logging.getLogger("trl").warning("trl chatter")
log.info("train step 1/1 reward 0.500")
print(path)
"""


@pytest.mark.slow
def test_quiet_libraries_sends_warnings_logs_and_bars_to_a_file(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    env = {**os.environ, "EVOTRAINER_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", QUIET], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "train step 1/1 reward 0.500\n"  # ours only
    path = Path(done.stdout.strip())
    assert path == tmp_path / "logs" / "libraries.log"
    logged = path.read_text()
    for line in ("a deprecation nobody asked to see", "transformers chatter", "trl chatter"):
        assert logged.count(line) == 1, logged
