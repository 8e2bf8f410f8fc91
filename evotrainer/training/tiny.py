"""The `tiny` policy: a character tokenizer and a ~1.3M-parameter Llama, built locally.

It needs no model hub and trains fast on CPU. A short deterministic SFT on the domain's
reference completions warm-starts it (GRPO needs a policy that sometimes succeeds, or
every group is dead); the result is cached in the artifact store under a ref keyed by
everything that shaped it, so it is built once per (domain, recipe, seed, environment).

    python -c "from evotrainer.training.tiny import build_tokenizer; print(build_tokenizer()('1+2='))"
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evotrainer.domains.base import Domain

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
CHARSET = string.printable  # digits, letters, punctuation, whitespace: every domain's text fits
TINY_RECIPE_VERSION = 5
"""Bump when the tokenizer, architecture or SFT loop changes, so cached warm starts are rebuilt."""


@dataclass(frozen=True)
class TinyRecipe:
    """Architecture and warm-start SFT of the tiny policy (part of its cache key)."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 4
    max_position_embeddings: int = 512
    sft_tasks: int = 256
    sft_steps: int = 225
    """Long enough that the policy knows the task's shape and some of its answers (starting
    pass rates well above 0 on the learnable levels), short of solving it: GRPO needs groups
    that sometimes succeed and room to climb. 60 steps left column sums at 2% and GRPO flat.
    At this rate where the warm start lands is chaotic, not monotone in the steps. Built as
    tiny_build.py builds it, column sums (Avg@32 on 100 held-out problems, then after one
    40-step GRPO chunk of examples/math-tiny.toml's recipe) started at 0.14 (0.17) after
    100 steps, 0.18 (0.24) after 125, 0.34 (0.45) after 150, 0.43 (0.61) after 175, 0.61
    after 200, 0.42 (0.73) after 225, 0.13 after 250, 0.77 (0.84) after 275, 0.85 after
    300 and 0.87 (0.91) after 350: 225 starts low and climbs furthest. Those are the Intel
    machine's; an AMD machine builds other policies (tiny_build.py), and its 225-step one
    starts at 0.576 and reaches 0.722 after one chunk."""
    sft_batch_size: int = 32
    sft_learning_rate: float = 3e-3
    seed: int = 0


def build_tokenizer() -> Any:
    """A character-level PreTrainedTokenizerFast: one token per character, fixed vocabulary."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in CHARSET:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Split every character into its own piece (newlines too), and glue them back on decode.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=512,
    )


def build_model(recipe: TinyRecipe, tokenizer: Any) -> Any:
    """A freshly initialised small Llama (seeded by the caller)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_attention_heads,
        max_position_embeddings=recipe.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def cache_key(domain: str, recipe: TinyRecipe, data_seed: int) -> str:
    """Everything that shapes the warm start, including package versions (kernels differ)."""
    from evotrainer.training.environment import fingerprint
    from evotrainer.training.tiny_build import WARM_START_CPU_CAPABILITY, WARM_START_MKL_PATH

    env = fingerprint()
    key = {
        "recipe_version": TINY_RECIPE_VERSION,
        "domain": domain,
        "recipe": asdict(recipe),
        "data_seed": data_seed,
        "packages": env["packages"],
        "device": env["device"],
        # Built on ATen's portable kernels whatever the machine's (tiny_build.py): the
        # other levels train other bytes (AVX512, AVX2 and DEFAULT: three warm starts).
        "cpu_capability": WARM_START_CPU_CAPABILITY,
        "mkl_path": WARM_START_MKL_PATH,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def warm_start(domain: Domain, recipe: TinyRecipe, data_seed: int, out_dir: Path) -> dict[str, Any]:
    """Build the tiny policy, SFT it on reference completions, save it to `out_dir`.

    Returns a description (parameters, final SFT loss). Deterministic: fixed seed, fixed
    batch order, single process; the caller pins threads.
    """
    import torch

    tokenizer = build_tokenizer()
    torch.manual_seed(recipe.seed)
    model = build_model(recipe, tokenizer)
    tasks = [t for t in domain.tasks("train", recipe.sft_tasks, data_seed) if t.reference]
    if not tasks:
        raise ValueError(f"domain {domain.name!r} gives no reference completions to warm-start the tiny policy")
    examples = []
    for task in tasks:
        prompt_ids = tokenizer(task.prompt)["input_ids"]
        completion_ids = tokenizer(task.reference)["input_ids"] + [tokenizer.eos_token_id]
        ids = (prompt_ids + completion_ids)[: recipe.max_position_embeddings]
        # Loss on the completion only: the policy must learn to answer, not to echo prompts.
        labels = ([-100] * len(prompt_ids) + completion_ids)[: recipe.max_position_embeddings]
        examples.append((ids, labels))
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.sft_learning_rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(recipe.seed)
    model.train()
    loss_value = float("nan")
    for step in range(recipe.sft_steps):
        idx = torch.randint(len(examples), (recipe.sft_batch_size,), generator=generator).tolist()
        batch = [examples[i] for i in idx]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(batch):  # right padding is fine for teacher forcing
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            attention[row, : len(ids)] = 1
        lr = recipe.sft_learning_rate * min(1.0, (step + 1) / 10)  # short warmup keeps it stable
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = float(loss.detach())
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"parameters": sum(p.numel() for p in model.parameters()), "sft_loss": loss_value, "sft_tasks": len(tasks)}
