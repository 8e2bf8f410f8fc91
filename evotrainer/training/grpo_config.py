"""Typed, validated settings of a GRPO run, and the requests that train and evaluate.

Everything a training run depends on is here (the branch's harness version is mapped onto
`GRPOSettings`), so two equal requests give the same run. `__post_init__` rejects bad
combinations with a message that says how to fix them; nothing is read from `**kwargs`.

    from evotrainer.training.grpo_config import GRPOSettings, TrainingRequest
    req = TrainingRequest(domain="math", policy="tiny", settings=GRPOSettings(max_steps=20))
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal

from evotrainer.errors import UsageError

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]
ScaleRewards = Literal["group", "batch", "none"]
EvaluationPart = Literal["all", "selection", "test"]
_POLICY_RE = re.compile(r"^(tiny|smollm2|hf:.+|[0-9a-f]{64})$")


class InvalidTrainingConfigError(UsageError):
    """A training or evaluation setting is out of range or contradicts another one."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"invalid training setting {field_name}: {message}")
        self.field_name = field_name


def _require(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise InvalidTrainingConfigError(field_name, message)


@dataclass(frozen=True)
class GRPOSettings:
    """GRPO hyperparameters, reward weighting and filters (one harness version's training part)."""

    reward_weights: Mapping[str, float] = field(
        default_factory=lambda: {"correctness": 1.0},
        metadata={"help": "weight of each reward component the domain reports; unlisted components weigh 0"},
    )
    num_generations: int = field(default=8, metadata={"help": "group size: completions sampled per prompt"})
    prompts_per_step: int = field(default=4, metadata={"help": "prompt groups per optimizer step"})
    learning_rate: float = field(default=1e-3, metadata={"help": "AdamW learning rate"})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the starting policy (0: no reference)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of rollouts"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling of rollouts"})
    max_prompt_length: int = field(
        default=256, metadata={"help": "data filter: prompts longer than this many tokens are dropped"}
    )
    max_completion_length: int = field(default=16, metadata={"help": "completion token budget; longer is truncated"})
    loss_type: LossType = field(default="dapo", metadata={"help": "TRL loss aggregation: grpo, dr_grpo, dapo, bnpo"})
    scale_rewards: ScaleRewards = field(default="group", metadata={"help": "advantage scaling: group, batch or none"})
    epsilon: float = field(default=0.2, metadata={"help": "lower clip range of the policy ratio"})
    epsilon_high: float | None = field(default=None, metadata={"help": "upper clip range (clip-higher); None: epsilon"})
    mask_truncated_completions: bool = field(
        default=False, metadata={"help": "exclude truncated completions from the loss"}
    )
    drop_zero_variance_groups: bool = field(
        default=False, metadata={"help": "group filter: groups whose rewards all equal are left out of the loss"}
    )
    min_group_std: float = field(
        default=1e-3, metadata={"help": "a group whose reward std is below this counts as zero-variance (dead)"}
    )
    levels: tuple[str, ...] = field(
        default=(), metadata={"help": "data filter: keep only tasks of these difficulty levels (empty: all)"}
    )
    max_steps: int = field(default=20, metadata={"help": "optimizer steps"})
    seed: int = field(default=0, metadata={"help": "seed of sampling, data order and initialisation"})
    use_vllm: bool = field(default=False, metadata={"help": "generate rollouts with vLLM (needs a GPU and vllm)"})
    threads: int = field(
        default=1, metadata={"help": "torch CPU threads; fixed so CPU runs are bit-reproducible across machines"}
    )

    def __post_init__(self) -> None:
        weights = {str(k): float(v) for k, v in sorted(dict(self.reward_weights).items())}
        object.__setattr__(self, "reward_weights", MappingProxyType(weights))
        object.__setattr__(self, "levels", tuple(self.levels))
        _require(bool(weights), "reward_weights", "give a weight to at least one reward component")
        _require(all(math.isfinite(w) for w in weights.values()), "reward_weights", "weights must be finite numbers")
        _require(
            any(w != 0 for w in weights.values()),
            "reward_weights",
            "every weight is 0, so every reward is 0 and GRPO has no signal; give one component a non-zero weight",
        )
        _require(
            self.num_generations >= 2,
            "num_generations",
            f"is {self.num_generations}; GRPO compares completions within a group, so use 2 or more",
        )
        _require(self.prompts_per_step >= 1, "prompts_per_step", "use at least 1 prompt per step")
        _require(0 < self.learning_rate < 1, "learning_rate", f"{self.learning_rate} is outside (0, 1)")
        _require(self.beta >= 0, "beta", "the KL coefficient cannot be negative; use 0 to disable it")
        _require(self.temperature > 0, "temperature", "must be > 0 (GRPO needs sampled, varied completions)")
        _require(0 < self.top_p <= 1, "top_p", "must be in (0, 1]")
        _require(self.max_prompt_length >= 1, "max_prompt_length", "must be at least 1 token")
        _require(self.max_completion_length >= 1, "max_completion_length", "must be at least 1 token")
        _require(
            self.loss_type in ("grpo", "dr_grpo", "dapo", "bnpo"),
            "loss_type",
            f"{self.loss_type!r} is not one of grpo, dr_grpo, dapo, bnpo",
        )
        _require(
            self.scale_rewards in ("group", "batch", "none"),
            "scale_rewards",
            f"{self.scale_rewards!r} is not one of group, batch, none",
        )
        _require(0 < self.epsilon < 1, "epsilon", "clip range must be in (0, 1)")
        _require(
            self.epsilon_high is None or self.epsilon_high >= self.epsilon,
            "epsilon_high",
            f"clip-higher {self.epsilon_high} is below epsilon {self.epsilon}; set it >= epsilon or None",
        )
        _require(self.min_group_std >= 0, "min_group_std", "must be >= 0")
        _require(self.max_steps >= 1, "max_steps", "train for at least 1 step")
        _require(self.threads >= 1, "threads", "use at least 1 thread")
        _require(self.seed >= 0, "seed", "must be >= 0")
        _require(
            not (self.mask_truncated_completions and self.max_completion_length < 2),
            "mask_truncated_completions",
            "with max_completion_length < 2 nearly every completion is truncated and masked; "
            "raise max_completion_length or disable the mask",
        )

    def weight(self, component: str) -> float:
        return self.reward_weights.get(component, 0.0)

    def total_reward(self, scores: Mapping[str, float], components: Sequence[str]) -> float:
        """The scalar reward training gives a completion (what GRPO's advantages and the
        evidence's `reward` come from): each of the domain's components times its weight,
        summed in the domain's order, as TRL sums weighted reward functions."""
        return sum(self.weight(c) * scores.get(c, 0.0) for c in components)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the harness fields an event records)."""
        # Not dataclasses.asdict: it deep-copies, and a mappingproxy cannot be copied.
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["reward_weights"] = dict(self.reward_weights)
        data["levels"] = list(self.levels)
        return data


def _check_policy(policy: str) -> None:
    _require(
        bool(_POLICY_RE.match(policy)),
        "policy",
        f"{policy!r} is not a policy; use 'tiny', 'smollm2', 'hf:/path/to/model_dir' or a checkpoint sha256",
    )


@dataclass(frozen=True)
class TrainingRequest:
    """One GRPO run: which domain, from which policy, under which settings."""

    domain: str
    policy: str = field(metadata={"help": "'tiny', 'smollm2', 'hf:/path/to/dir' or a checkpoint sha256"})
    settings: GRPOSettings = field(default_factory=GRPOSettings)
    train_tasks: int = field(default=64, metadata={"help": "size of the training split used"})
    data_seed: int = field(default=0, metadata={"help": "seed of the domain's task generator"})

    def __post_init__(self) -> None:
        _check_policy(self.policy)
        _require(self.train_tasks >= 1, "train_tasks", "use at least 1 training task")

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "policy": self.policy,
            "settings": self.settings.to_dict(),
            "train_tasks": self.train_tasks,
            "data_seed": self.data_seed,
        }


@dataclass(frozen=True)
class EvaluationRequest:
    """Avg@k of a policy on the domain's held-out split, at a fixed seed."""

    domain: str
    policy: str
    k: int = field(default=8, metadata={"help": "samples per problem (Avg@k)"})
    eval_tasks: int = field(default=32, metadata={"help": "number of held-out problems"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (the authors used 1.0)"})
    max_completion_length: int = 16
    seed: int = 0
    data_seed: int = 0
    threads: int = 1
    batch_size: int = field(default=64, metadata={"help": "sequences generated at once"})
    part: EvaluationPart = field(
        default="all",
        metadata={"help": "all: the first eval_tasks held-out problems; selection / test: the even / odd ones of "
                  "the first 2*eval_tasks (the gate selects on one half, final reports use the other)"},
    )

    def __post_init__(self) -> None:
        _check_policy(self.policy)
        _require(self.part in ("all", "selection", "test"), "part", f"{self.part!r} is not all, selection or test")
        _require(self.k >= 1, "k", "sample at least 1 completion per problem")
        _require(self.eval_tasks >= 1, "eval_tasks", "evaluate at least 1 problem")
        _require(self.temperature >= 0, "temperature", "must be >= 0 (0 means greedy)")
        _require(
            not (self.temperature == 0 and self.k > 1),
            "k",
            "greedy decoding (temperature 0) gives k identical samples; use k=1 or a temperature > 0",
        )
        _require(self.max_completion_length >= 1, "max_completion_length", "must be at least 1 token")
        _require(self.batch_size >= 1, "batch_size", "must be at least 1")
        _require(self.threads >= 1, "threads", "use at least 1 thread")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
