"""What `evotrainer run` reads: an experiment as a TOML file.

    name = "digits"
    domain = "math:digit_add"      # a domain and variant (`evotrainer domains list`), or a
                                   # file: "math:file=gsm8k.jsonl" (relative to this file)
    policy = "tiny"                # the base policy: tiny, smollm2, hf:DIR or a sha256
    iterations = 3                 # candidate versions to train, at most, counted from the log
    budget_steps = 160             # GRPO steps over all candidates, rejected ones included
    train_tasks = 512              # training problems each run draws from

    [harness.grpo]                 # the starting harness: fields of the default spec to change
    max_steps = 20

    [harness.evaluation]
    k = 4

    [proposer]                     # who proposes, and when a human decides (proposer_config.py)
    kind = "rules"
    autonomy = "full"
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evotrainer.errors import UsageError
from evotrainer.evolve.proposer_config import ProposerConfig
from evotrainer.harness.spec import HarnessSpec
from evotrainer.refs import check_name


class ExperimentConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    domain: str = "math:digit_add"
    policy: str = "tiny"
    iterations: int = Field(default=3, ge=1, strict=True, description="candidate versions to train, at most")
    budget_steps: int | None = Field(
        default=None, ge=1, strict=True,
        description="GRPO steps the loop may spend over all candidates, rejected ones included (none: no limit)",
    )
    train_tasks: int = Field(default=64, ge=1, strict=True, description="training problems each run draws from")
    harness: dict[str, Any] = Field(default_factory=dict, description="fields of the default harness spec to change")
    task_timeout_s: float = Field(default=3600.0, gt=0, description="with a broker: how long to wait for a task")
    proposer: ProposerConfig = Field(default_factory=ProposerConfig, description="who proposes; when a human decides")

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_name("experiment", name)

    @classmethod
    def load(cls, path: str | Path) -> ExperimentConfig:
        """Read and validate a TOML file; UsageError names what is wrong."""
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path} is not valid TOML: {exc}") from None
        if isinstance(data.get("domain"), str):
            from evotrainer.domains import with_file_relative_to

            data["domain"] = with_file_relative_to(data["domain"], Path(path).resolve().parent)
        return cls.parse(data, str(path))

    @classmethod
    def parse(cls, data: dict[str, Any], source: str = "config") -> ExperimentConfig:
        """Validate the fields of an experiment (a TOML file's, or a dict given to the
        Python API); UsageError names what is wrong, and where (`source`)."""
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in exc.errors())
            raise UsageError(f"invalid experiment {source}: {problems}") from None
        config.starting_harness().to_grpo_settings()  # refuse a harness that cannot train before anything is written
        return config

    def starting_harness(self) -> HarnessSpec:
        """The default spec with this experiment's changes (validated)."""
        return HarnessSpec.parse(_merged(HarnessSpec().to_json(), self.harness))


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out
