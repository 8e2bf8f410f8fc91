"""GRPO training through TRL's GRPOTrainer, recording rollout evidence for every completion.

`train_grpo(request)` resolves the policy to a stored checkpoint, trains it under the
request's GRPOSettings on the domain's training split, and stores the new checkpoint and
the evidence (evidence.py) as artifacts. TRL does the optimisation; the subclass below
only observes each generation batch (and, when asked, drops dead groups from the loss).

    python - <<'EOF'
    from evotrainer.training import GRPOSettings, TrainingRequest, train_grpo
    print(train_grpo(TrainingRequest("math", "tiny", GRPOSettings(max_steps=5))).training_payload())
    EOF
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from evotrainer.artifacts import ArtifactStore, open_store
from evotrainer.evidence import RolloutRecord, is_dead_group, summarize, to_jsonl
from evotrainer.training.grpo_config import GRPOSettings, InvalidTrainingConfigError, TrainingRequest
from evotrainer.training.results import TrainingResult

if TYPE_CHECKING:
    from evotrainer.domains.base import Domain, Task


def completion_text(completion: Any) -> str:
    """TRL passes plain strings, or for chat prompts a list of messages; the domain wants text."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


class DomainScorer:
    """Scores a batch once per completion and serves every reward component from that.

    TRL calls one reward function per component; scoring each completion once per call
    would multiply the domain's work (a sandboxed test run for code) by the component count.
    """

    def __init__(self, domain: Domain, tasks: dict[str, Task]) -> None:
        self.domain = domain
        self.tasks = tasks
        self._key: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self.last_texts: list[str] = []
        self.last_task_ids: list[str] = []
        self.last_scores: list[dict[str, float]] = []

    def score_batch(self, task_ids: Sequence[str], completions: Sequence[Any]) -> list[dict[str, float]]:
        texts = [completion_text(c) for c in completions]
        key = (tuple(task_ids), tuple(texts))
        if key != self._key:
            self._key = key
            self.last_texts, self.last_task_ids = texts, list(task_ids)
            self.last_scores = [self.domain.score(self.tasks[t], x) for t, x in zip(task_ids, texts, strict=True)]
        return self.last_scores

    def reward_func(self, component: str) -> Callable[..., list[float]]:
        def reward(completions: Sequence[Any], task_id: Sequence[str], **_: Any) -> list[float]:
            return [float(s.get(component, 0.0)) for s in self.score_batch(task_id, completions)]

        reward.__name__ = component  # TRL names the logged metric after the function
        return reward


def build_grpo_config(
    settings: GRPOSettings, output_dir: str, *, progress_bar: bool, reward_weights: list[float]
) -> Any:
    """The TRL GRPOConfig for our settings (shared with bench/train.py's bare baseline)."""
    from trl import GRPOConfig

    from evotrainer.training.environment import device

    dev = device()
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        gradient_accumulation_steps=1,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        top_p=settings.top_p,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        beta=settings.beta,
        loss_type=settings.loss_type,
        scale_rewards=settings.scale_rewards,
        epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high,
        mask_truncated_completions=settings.mask_truncated_completions,
        reward_weights=reward_weights,
        max_steps=settings.max_steps,
        seed=settings.seed,
        data_seed=settings.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=dev == "cpu",
        bf16=False,
        dataloader_num_workers=0,
        disable_tqdm=not progress_bar,
        use_vllm=settings.use_vllm,
        vllm_mode="colocate",
        log_completions=False,
    )


def _trainer_class() -> type:
    from trl import GRPOTrainer

    class EvidenceGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        """GRPOTrainer that keeps a RolloutRecord per completion and applies group filters."""

        def __init__(self, *args: Any, scorer: DomainScorer, settings: GRPOSettings, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.scorer = scorer
            self.settings = settings
            self.records: list[RolloutRecord] = []
            self._groups_seen = 0
            self._last_ids: tuple[list[list[int]], list[list[int]]] = ([], [])

        def _generate(self, prompts: list[Any]) -> Any:
            out = super()._generate(prompts)
            self._last_ids = (out[0], out[1])  # prompt and completion token ids, unpadded
            return out

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            import torch

            output = super()._generate_and_score_completions(inputs)
            s, scorer = self.settings, self.scorer
            g = s.num_generations
            prompt_ids, completion_ids = self._last_ids
            tokenizer: Any = self.processing_class
            eos = set(getattr(self, "eos_token_ids", None) or [tokenizer.eos_token_id])
            totals = [s.total_reward(sc, scorer.domain.reward_components) for sc in scorer.last_scores]
            advantages = output["advantages"].tolist()
            kept = [True] * len(totals)
            for start in range(0, len(totals), g):
                group = totals[start : start + g]
                # The same test the evidence summary, diagnostics and backtests use to call a group dead.
                if s.drop_zero_variance_groups and is_dead_group(group, s.min_group_std):
                    kept[start : start + g] = [False] * len(group)
            if not all(kept):
                # Excluding a group from the loss: its tokens leave the mask, and the token
                # count that normalises the loss shrinks accordingly (DAPO-style filtering).
                drop = torch.tensor([not k for k in kept], device=output["completion_mask"].device)
                output["completion_mask"] = output["completion_mask"].masked_fill(drop.unsqueeze(1), 0)
                mask = output["completion_mask"]
                if "tool_mask" in output:
                    mask = mask * output["tool_mask"]
                output["num_items_in_batch"] = mask.sum()
            step = self.state.global_step
            for i, (task_id, text) in enumerate(zip(scorer.last_task_ids, scorer.last_texts, strict=True)):
                ids = completion_ids[i]
                self.records.append(
                    RolloutRecord(
                        step=step,
                        group=self._groups_seen + i // g,
                        index=i % g,
                        prompt_id=task_id,
                        text=text,
                        prompt_tokens=len(prompt_ids[i]),
                        completion_tokens=len(ids),
                        truncated=not ids or ids[-1] not in eos,
                        rewards=dict(scorer.last_scores[i]),
                        reward=totals[i],
                        advantage=advantages[i],
                        kept=kept[i],
                    )
                )
            self._groups_seen += len(totals) // g
            return output

    return EvidenceGRPOTrainer


def _metrics_callback(sink: list[dict[str, float | None]]) -> Any:
    from transformers import TrainerCallback

    class StepMetrics(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            # The final summary log (train_runtime, ...) is wall-clock: not a per-step metric.
            # Timings differ between equal runs; they stay out so the payload replays exactly.
            if logs and "reward" in logs:
                # A metric TRL could not compute is None (with every group dropped as dead,
                # a step has no loss): recorded as null, not a crash of the whole run.
                kept = {k: None if v is None else float(v) for k, v in sorted(logs.items())
                        if "time" not in k and "per_second" not in k}  # fmt: skip
                sink.append({"step": state.global_step, **kept})

    return StepMetrics()


def _trainer_parts(domain: Domain, tasks: dict[str, Task], settings: GRPOSettings) -> tuple[type, Any, dict[str, Any]]:
    """(trainer class, scorer, extra trainer arguments): single-turn completions scored by the
    domain, or, for a turn-based domain, whole episodes played by a rollout function
    (multiturn.py)."""
    from evotrainer.domains.turns import TurnBased

    if not isinstance(domain, TurnBased):
        return _trainer_class(), DomainScorer(domain, tasks), {}
    from evotrainer.training.multiturn import EpisodeScorer, episode_trainer_class

    scorer = EpisodeScorer(domain, tasks, settings)
    return episode_trainer_class(_trainer_class()), scorer, {"rollout_func": scorer.rollout}


def training_tasks(domain: Domain, request: TrainingRequest, tokenizer: Any) -> list[Task]:
    """The training split after the data filters (difficulty levels, prompt length)."""
    s = request.settings
    tasks = domain.tasks("train", request.train_tasks, request.data_seed)
    if s.levels:
        tasks = [t for t in tasks if t.level in s.levels]
    tasks = [t for t in tasks if len(tokenizer(t.prompt)["input_ids"]) <= s.max_prompt_length]
    if not tasks:
        raise InvalidTrainingConfigError(
            "levels/max_prompt_length",
            f"the data filters left no training task of domain {domain.name!r}; "
            "widen `levels` or raise `max_prompt_length`",
        )
    return tasks


def check_reward_weights(domain: Domain, settings: GRPOSettings) -> None:
    unknown = sorted(set(settings.reward_weights) - set(domain.reward_components))
    if unknown:
        raise InvalidTrainingConfigError(
            "reward_weights",
            f"{unknown} are not reward components of domain {domain.name!r}; "
            f"use some of {list(domain.reward_components)}",
        )


def train_grpo(
    request: TrainingRequest, store: ArtifactStore | None = None, *, domain: Domain | None = None
) -> TrainingResult:
    """Run GRPO for `request`; store the checkpoint and the evidence; return their hashes."""
    from datasets import Dataset

    from evotrainer.training import environment
    from evotrainer.training.policies import load_policy, resolve_policy, save_checkpoint, uses_chat
    from evotrainer.training.progress import interactive, step_logger

    started, cpu_started = time.perf_counter(), time.process_time()
    on_gpu = environment.device().startswith("cuda")
    s = request.settings
    store = store or open_store()
    if domain is None:
        from evotrainer.domains import get_domain

        domain = get_domain(request.domain)
    check_reward_weights(domain, s)
    if s.use_vllm and not environment.vllm_available():
        raise InvalidTrainingConfigError(
            "use_vllm", "vLLM rollouts need the vllm package and a GPU; set use_vllm=False"
        )

    base = resolve_policy(
        request.policy, store, domain=domain, domain_spec=request.domain, data_seed=request.data_seed, threads=s.threads
    )
    environment.deterministic(s.seed, s.threads)
    model, tokenizer = load_policy(base.sha256, store, device=environment.device())
    tasks = training_tasks(domain, request, tokenizer)
    chat = uses_chat(tokenizer)
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t.prompt}] if chat else t.prompt, "task_id": t.task_id} for t in tasks]
    )
    trainer_class, scorer, rollout = _trainer_parts(domain, {t.task_id: t for t in tasks}, s)
    components = [c for c in domain.reward_components if s.weight(c) != 0]
    metrics: list[dict[str, float | None]] = []
    callbacks = [_metrics_callback(metrics)]
    callbacks.append(step_logger(s.max_steps, to_log=not interactive()))

    with tempfile.TemporaryDirectory(prefix="evotrainer-grpo-") as out_dir:
        args = build_grpo_config(
            s, out_dir, progress_bar=interactive(), reward_weights=[s.weight(c) for c in components]
        )
        trainer = trainer_class(
            model=model,
            reward_funcs=[scorer.reward_func(c) for c in components],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=callbacks,
            scorer=scorer,
            settings=s,
            **rollout,
        )
        from transformers.trainer_callback import PrinterCallback

        # Without a bar, HF prints every log dict to stdout; our plain step lines replace it.
        trainer.remove_callback(PrinterCallback)
        trainer.train()
        trained = trainer.accelerator.unwrap_model(trainer.model)
        records = trainer.records

    sha, size = save_checkpoint(trained, tokenizer, store)
    from evotrainer.training.policies import PolicyCheckpoint

    policy = PolicyCheckpoint(
        sha256=sha,
        kind="trained",
        parameters=sum(p.numel() for p in trained.parameters()),
        size_bytes=size,
        parent_sha256=base.sha256,
        source="grpo",
        created=True,
        details={"steps": s.max_steps, "domain": domain.name},
    )
    evidence_sha = store.put_bytes(to_jsonl(records))
    return TrainingResult(
        request=request.to_dict(),
        base_policy=base,
        policy=policy,
        evidence_sha256=evidence_sha,
        evidence_summary=summarize(records, s.min_group_std),
        step_metrics=metrics,
        environment=environment.fingerprint(),
        train_tasks_used=len(tasks),
        wall_seconds=time.perf_counter() - started,
        tokens=sum(r.prompt_tokens + r.completion_tokens for r in records),
        cpu_seconds=time.process_time() - cpu_started,
        gpu_seconds=time.perf_counter() - started if on_gpu else 0.0,
    )
