"""Avg@k on the held-out split at a fixed seed (the Score layer of the diagnosis).

For each of the first `eval_tasks` eval problems, k completions are sampled at the given
temperature; Avg@k is the mean over problems of the share of correct samples (by the
domain's correctness component), pass@k the share of problems with one or more. The
per-problem results (every sample's text and reward components) are stored as a JSONL
artifact so diagnostics can point at the exact samples behind a score.

    python -c "from evotrainer.training import EvaluationRequest, evaluate; \
print(evaluate(EvaluationRequest('math', 'tiny', k=4)).evaluation_payload())"
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from evotrainer.artifacts import ArtifactStore, open_store
from evotrainer.training.grpo_config import EvaluationRequest
from evotrainer.training.results import EvaluationResult

if TYPE_CHECKING:
    from evotrainer.domains.base import Domain, Task


def _prompt_ids(tokenizer: Any, prompt: str, chat: bool) -> list[int]:
    if chat:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    # Same tokenization as TRL uses for plain-text prompts during training.
    return list(tokenizer(prompt)["input_ids"])


def generate_left_padded(
    model: Any, tokenizer: Any, prompts: list[list[int]], *, temperature: float, max_new_tokens: int,
    stop: frozenset[int] | None = None,
) -> list[list[int]]:
    """The new token ids generated after each prompt, the prompts batched left-padded;
    `stop` replaces the tokenizer's end-of-sequence as what ends a row (multi-turn play
    ends a turn at a newline too)."""
    import torch

    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    device = next(model.parameters()).device
    kwargs: dict[str, Any] = {"do_sample": temperature > 0, "max_new_tokens": max_new_tokens}
    if temperature > 0:
        kwargs.update(temperature=temperature, top_p=1.0, top_k=0)
    if stop is not None:
        kwargs["eos_token_id"] = sorted(stop)
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids.to(device), attention_mask=attention.to(device), pad_token_id=pad, **kwargs
        )
    rows: list[list[int]] = out[:, width:].tolist()
    return rows


def sample(
    model: Any, tokenizer: Any, prompts: list[list[int]], *, temperature: float, max_new_tokens: int
) -> list[tuple[list[int], bool]]:
    """Generate one completion per prompt (a left-padded batch): (new token ids, truncated)."""
    eos = tokenizer.eos_token_id
    results = []
    for row in generate_left_padded(model, tokenizer, prompts, temperature=temperature, max_new_tokens=max_new_tokens):
        if eos in row:
            results.append((row[: row.index(eos)], False))
        else:
            results.append((row, True))
    return results


def held_out_tasks(domain: Domain, request: EvaluationRequest) -> list[Task]:
    """The problems a request scores: the held-out split's first `eval_tasks`, or one half
    (alternate problems, so both halves mix every level alike) of its first 2 * eval_tasks."""
    if request.part == "all":
        return domain.tasks("eval", request.eval_tasks, request.data_seed)
    both = domain.tasks("eval", 2 * request.eval_tasks, request.data_seed)
    return both[0::2] if request.part == "selection" else both[1::2]


def holds_distinct(domain: Domain, eval_tasks: int, data_seed: int) -> bool:
    """Whether the held-out split has enough distinct problems for both halves at
    `eval_tasks` each (a generated level repeats problems once its space is exhausted; a
    fixed pool simply runs out)."""
    tasks = domain.tasks("eval", 2 * eval_tasks, data_seed)
    return len({t.prompt for t in tasks}) >= 2 * eval_tasks


def evaluate(
    request: EvaluationRequest, store: ArtifactStore | None = None, *, domain: Domain | None = None
) -> EvaluationResult:
    """Avg@k of `request.policy` on the domain's eval split; per-problem results stored."""
    from evotrainer.training import environment
    from evotrainer.training.policies import load_policy, resolve_policy, uses_chat
    from evotrainer.training.progress import progress

    started = time.perf_counter()
    store = store or open_store()
    if domain is None:
        from evotrainer.domains import get_domain

        domain = get_domain(request.domain)
    policy = resolve_policy(
        request.policy,
        store,
        domain=domain,
        domain_spec=request.domain,
        data_seed=request.data_seed,
        threads=request.threads,
    )
    environment.deterministic(request.seed, request.threads)
    model, tokenizer = load_policy(policy.sha256, store, device=environment.device())
    model.eval()
    chat = uses_chat(tokenizer)
    tasks = held_out_tasks(domain, request)
    # Every problem k times, in a fixed order: the batches (hence the samples) depend only
    # on the request, never on timing.
    jobs = [(t, _prompt_ids(tokenizer, t.prompt, chat)) for t in tasks for _ in range(request.k)]
    batches = [jobs[i : i + request.batch_size] for i in range(0, len(jobs), request.batch_size)]
    samples: list[dict[str, Any]] = []
    from evotrainer.domains.turns import TurnBased

    if isinstance(domain, TurnBased):
        from evotrainer.training.multiturn import played_samples

        # Whole episodes (multiturn.py); the completion budget is the transcript's.
        samples = played_samples(model, tokenizer, domain, [t for t, _ in jobs], temperature=request.temperature,
                                 max_tokens=request.max_completion_length, batch_size=request.batch_size)  # fmt: skip
        batches = []
    for batch in progress(batches, total=len(batches), desc="evaluate", every=max(1, len(batches) // 4)):
        outs = sample(
            model,
            tokenizer,
            [ids for _, ids in batch],
            temperature=request.temperature,
            max_new_tokens=request.max_completion_length,
        )
        for (task, _), (ids, truncated) in zip(batch, outs, strict=True):
            text = tokenizer.decode(ids, skip_special_tokens=True)
            rewards = domain.score(task, text)
            samples.append(
                {"text": text, "rewards": dict(sorted(rewards.items())), "truncated": truncated, "tokens": len(ids)}
            )

    correct_key = domain.correctness_component
    lines, avgs, passes = [], [], []
    component_totals: dict[str, float] = {}
    for i, task in enumerate(tasks):
        group = samples[i * request.k : (i + 1) * request.k]
        correct = [float(s["rewards"].get(correct_key, 0.0)) for s in group]
        avg = sum(correct) / len(correct)
        avgs.append(avg)
        passes.append(float(max(correct) > 0))
        for s in group:
            for name, value in s["rewards"].items():
                component_totals[name] = component_totals.get(name, 0.0) + float(value)
        record = {"task_id": task.task_id, "level": task.level, "avg": avg, "samples": group}
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    results_sha = store.put_bytes(("\n".join(lines) + "\n").encode())
    n_samples = len(samples)
    return EvaluationResult(
        request=request.to_dict(),
        policy_sha256=policy.sha256,
        avg_at_k=sum(avgs) / len(avgs),
        pass_at_k=sum(passes) / len(passes),
        k=request.k,
        problems=len(tasks),
        component_means={k: v / n_samples for k, v in sorted(component_totals.items())},
        results_sha256=results_sha,
        environment=environment.fingerprint(),
        wall_seconds=time.perf_counter() - started,
        extra={"truncation_rate": sum(s["truncated"] for s in samples) / n_samples},
        base_policy=policy,
    )
