"""Multi-turn GRPO: TRL's `rollout_func` plays each prompt's episode in the domain's environment.

For a turn-based domain (domains/turns.py, e.g. `swe:tiny`) a GRPO completion is a whole
episode: the policy writes an action, the domain's session runs it (tools, tests in the
sandbox) and the observation joins the transcript, until the episode ends. TRL trains on
the policy's own tokens only (`env_mask` is 0 on observation tokens); every reward
component is the grade of the final state; each completion's evidence record carries the
episode's tool calls, as the diagnostics read them. Evaluation plays the same episodes
without gradients (`played_samples`).

train_grpo and evaluate call in here when the domain is turn-based:

    python - <<'EOF'
    from evotrainer.training import GRPOSettings, TrainingRequest, train_grpo
    settings = GRPOSettings(max_steps=2, max_completion_length=160)
    print(train_grpo(TrainingRequest("swe:tiny", "tiny", settings)).evidence_summary)
    EOF
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from evotrainer.domains.turns import TurnBased, TurnSession

if TYPE_CHECKING:
    from evotrainer.domains.base import Domain, Episode, Task
    from evotrainer.training.grpo_config import GRPOSettings


@dataclass
class Played:
    """One finished episode and the tokens GRPO trains on."""

    task_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    """The policy's turns and the observations between them, in order."""
    env_mask: list[int]
    """1 on the policy's tokens, 0 on what the environment wrote."""
    episode: Episode
    finished: bool
    """The session ended the episode (the policy submitted, or used its turns); False when
    the token budget or the model's context ran out first."""

    @property
    def policy_tokens(self) -> int:
        return sum(self.env_mask)


# Per tokenizer (a scan of a large vocabulary is worth doing once per policy load, not per
# step), forgotten with it: a worker loads a tokenizer for every task.
_STOPS: weakref.WeakKeyDictionary[Any, dict[str, frozenset[int]]] = weakref.WeakKeyDictionary()


def _stop_ids(tokenizer: Any, turn_end: str) -> frozenset[int]:
    """Tokens that end a turn: the end-of-text token and every token whose text holds `turn_end`."""
    known = _STOPS.setdefault(tokenizer, {})
    if turn_end not in known:
        vocab = tokenizer.get_vocab()
        ids = {i for token, i in vocab.items() if turn_end in tokenizer.convert_tokens_to_string([token])}
        known[turn_end] = frozenset(ids | {tokenizer.eos_token_id})
    return known[turn_end]


def _prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    from evotrainer.training.evaluation import _prompt_ids as ids_of
    from evotrainer.training.policies import uses_chat

    return ids_of(tokenizer, prompt, uses_chat(tokenizer))


def _sample_turns(
    model: Any, tokenizer: Any, contexts: list[list[int]], *, temperature: float, max_new_tokens: int,
    stop: frozenset[int],
) -> list[list[int]]:
    """One turn for each context (a left-padded batch), each cut after its first stop token."""
    from evotrainer.training.evaluation import generate_left_padded

    rows = generate_left_padded(model, tokenizer, contexts, temperature=temperature, max_new_tokens=max_new_tokens,
                                stop=stop)  # fmt: skip
    turns = []
    for row in rows:
        end = next((i for i, t in enumerate(row) if t in stop), None)
        turns.append(row if end is None else row[: end + 1])
    return turns


def play(
    model: Any, tokenizer: Any, domain: TurnBased, tasks: Sequence[Task], *, temperature: float, max_tokens: int
) -> list[Played]:
    """Play one episode per task, all turns of a round sampled as one batch.

    An episode ends when its session says so, or when its transcript (policy and
    environment tokens after the prompt) would pass `max_tokens` or the model's context.
    """
    sessions: list[TurnSession] = [domain.open_episode(t) for t in tasks]
    prompts = [_prompt_ids(tokenizer, t.prompt) for t in tasks]
    completions: list[list[int]] = [[] for _ in tasks]
    masks: list[list[int]] = [[] for _ in tasks]
    context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
    stop = _stop_ids(tokenizer, domain.turn_end)
    line_end = list(tokenizer(domain.turn_end, add_special_tokens=False)["input_ids"])
    cut_short = [False] * len(tasks)
    active = [i for i in range(len(tasks)) if not sessions[i].done]
    while active:
        budget = [min(domain.max_turn_tokens, max_tokens - len(completions[i]),
                      context - len(prompts[i]) - len(completions[i])) for i in active]  # fmt: skip
        for i, room in zip(list(active), budget, strict=True):
            if room <= 0:
                cut_short[i] = True
                active.remove(i)
        if not active:
            break
        turns = _sample_turns(model, tokenizer, [prompts[i] + completions[i] for i in active], temperature=temperature,
                              max_new_tokens=min(b for b in budget if b > 0), stop=stop)  # fmt: skip
        still = []
        for i, turn in zip(active, turns, strict=True):
            completions[i] += turn
            masks[i] += [1] * len(turn)
            after = sessions[i].act(tokenizer.decode(turn, skip_special_tokens=True))
            if sessions[i].done:
                continue
            # A turn cut at the token limit has no line end: the environment writes it.
            written = ([] if turn and turn[-1] in stop else line_end) + list(
                tokenizer(after, add_special_tokens=False)["input_ids"]
            )
            completions[i] += written
            masks[i] += [0] * len(written)
            still.append(i)
        active = still
    return [
        Played(t.task_id, prompts[i], completions[i], masks[i], sessions[i].finish(), not cut_short[i])
        for i, t in enumerate(tasks)
    ]


def played_samples(
    model: Any, tokenizer: Any, domain: TurnBased, tasks: Sequence[Task], *, temperature: float, max_tokens: int,
    batch_size: int,
) -> list[dict[str, Any]]:
    """Evaluation samples (as evaluate() stores them) of one episode per task, in order."""
    samples = []
    for start in range(0, len(tasks), batch_size):
        for p in play(model, tokenizer, domain, tasks[start : start + batch_size], temperature=temperature,
                      max_tokens=max_tokens):  # fmt: skip
            samples.append({"text": p.episode.completion, "rewards": dict(sorted(p.episode.rewards.items())),
                            "truncated": not p.finished, "tokens": p.policy_tokens,
                            "turns": len(p.episode.tool_calls)})  # fmt: skip
    return samples


def tool_call_dicts(episode: Episode) -> tuple[dict[str, Any], ...]:
    """The episode's tool calls as the evidence stores them (the domain's ToolCall as JSON)."""
    return tuple(
        {"turn": c.turn, "tool": c.tool, "arguments": dict(c.arguments), "ok": c.ok, "observation": c.observation,
         "changed": list(c.changed), "tampered": list(c.tampered)}  # fmt: skip
        for c in episode.tool_calls
    )


class EpisodeScorer:
    """What the evidence trainer reads of a batch (DomainScorer's fields), filled by the rollout:
    each completion's rewards are its episode's grade."""

    def __init__(self, domain: Domain, tasks: dict[str, Task], settings: GRPOSettings) -> None:
        assert isinstance(domain, TurnBased)
        self.domain = domain
        self.turns: TurnBased = domain
        self.tasks = tasks
        self.settings = settings
        self.last_texts: list[str] = []
        self.last_task_ids: list[str] = []
        self.last_scores: list[dict[str, float]] = []
        self.last_played: list[Played] = []

    def rollout(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """TRL's rollout_func: one episode per prompt of the batch (TRL repeats each prompt
        num_generations times already); the task ids come from the batch's rows."""
        task_ids = trainer.batch_task_ids
        assert len(task_ids) == len(prompts), "rollout_func got a batch other than the trainer's rows"
        model = trainer.accelerator.unwrap_model(trainer.model)
        s = self.settings
        tasks = [self.tasks[t] for t in task_ids]
        played = play(model, trainer.processing_class, self.turns, tasks, temperature=s.temperature,
                      max_tokens=s.max_completion_length)  # fmt: skip
        self.last_played = played
        self.last_task_ids = list(task_ids)
        self.last_texts = [p.episode.completion for p in played]
        self.last_scores = [dict(p.episode.rewards) for p in played]
        return {"prompt_ids": [p.prompt_ids for p in played], "completion_ids": [p.completion_ids for p in played],
                "logprobs": None, "env_mask": [p.env_mask for p in played]}  # fmt: skip

    def reward_func(self, component: str) -> Any:
        def reward(completions: Sequence[Any], **_: Any) -> list[float]:
            assert len(completions) == len(self.last_scores)
            return [float(s.get(component, 0.0)) for s in self.last_scores]

        reward.__name__ = component  # TRL names the logged metric after the function
        return reward


def episode_trainer_class(evidence_trainer: type) -> type:
    """The evidence trainer (grpo_trainer.py) for episodes: it hands the batch's task ids to
    the rollout and completes each record with its episode's tool calls, the policy's token
    count and whether the episode was cut short."""

    class EpisodeGRPOTrainer(evidence_trainer):  # type: ignore[misc, valid-type]
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            self.batch_task_ids = [row["task_id"] for row in inputs]
            before = len(self.records)
            output = super()._generate_and_score_completions(inputs)
            played = self.scorer.last_played
            batch = self.records[before:]
            assert len(batch) == len(played)
            self.records[before:] = [
                replace(r, tool_calls=tool_call_dicts(p.episode), completion_tokens=p.policy_tokens,
                        truncated=not p.finished)  # fmt: skip
                for r, p in zip(batch, played, strict=True)
            ]
            return output

    return EpisodeGRPOTrainer
