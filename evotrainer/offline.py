"""The libraries' switches that can change an output or reach the network, set the same way
in every process: the CLI, a worker and the in-process runner call `go_offline()` first.

    from evotrainer.offline import go_offline
    go_offline()

Hugging Face reads its offline and telemetry variables once, when `huggingface_hub` is
imported (huggingface_hub.constants); setting them later is ignored. So the variables are
set before any such import where a process starts, and, for a process that imported the
hub already (a test run, a notebook, a plugin), the hub's constants are set as well: either
way the hub is never asked for anything, and transformers writes nothing into a checkpoint
that depends on whether the caller's shell had HF_HUB_OFFLINE set.

The values are forced, not defaults: a host's own setting would otherwise decide them, and
the environment fingerprint records what they were (training.environment.fingerprint).
"""

from __future__ import annotations

import os
import sys

SWITCHES = {
    # No model hub: machines running evotrainer may have no internet, and a policy is a
    # local artifact (tiny, smollm2 from its package, a local directory).
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    # No telemetry from any library (a call would also block on a machine without network).
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "WANDB_MODE": "disabled",
    "VLLM_NO_USAGE_STATS": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    # The tokenizers' own thread pool would race with the worker's processes (fork).
    "TOKENIZERS_PARALLELISM": "false",
}
"""Environment variables and the values every evotrainer process runs with."""

RECORDED = (*SWITCHES, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ATEN_CPU_CAPABILITY",
            "CUBLAS_WORKSPACE_CONFIG", "MKL_CBWR", "PYTORCH_ENABLE_MPS_FALLBACK", "CUDA_VISIBLE_DEVICES")  # fmt: skip
"""Variables that can change an output, recorded in the environment fingerprint as found."""


def go_offline() -> None:
    """Set SWITCHES in this process, and in the Hugging Face modules it imported already."""
    os.environ.update(SWITCHES)
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
        hub.HF_HUB_DISABLE_TELEMETRY = True  # type: ignore[attr-defined]
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
        datasets_config.HF_DATASETS_OFFLINE = True  # type: ignore[attr-defined]


def switches() -> dict[str, str | None]:
    """The recorded variables as this process has them (None: unset)."""
    return {name: os.environ.get(name) for name in RECORDED}


def hub_offline() -> bool | None:
    """What the imported hub actually does (None: not imported): the variable alone can lie."""
    hub = sys.modules.get("huggingface_hub.constants")
    return None if hub is None else bool(hub.HF_HUB_OFFLINE)
