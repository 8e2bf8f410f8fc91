"""The `[proposer]` table of an experiment file: who proposes changes, and when a human decides.

    [proposer]
    kind = "llm"                          # rules | llm | human | agent
    fallback = ["rules"]                  # asked in order when the proposer gives nothing usable
    autonomy = "escalate-after-2"         # full | approve-interventions | approve-promotions | escalate-after-N
    base_url = "http://127.0.0.1:8080/v1" # any OpenAI-compatible chat endpoint (llm)
    model = "smollm2"
    api_key_env = "OPENAI_API_KEY"        # the key is read from this variable, never from the file
    timeout_s = 60
    max_retries = 3                       # transport retries (timeouts, 429, connection errors), with backoff

Without the table the built-in rule engine proposes and nothing waits for a human, as
before. Every mistake is refused when the file is read, before anything is written.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evotrainer.errors import UsageError
from evotrainer.events.proposer import ProposerKind

_ESCALATE = re.compile(r"escalate-after-([1-9][0-9]*)")
AUTONOMY_LEVELS = ("full", "approve-interventions", "approve-promotions", "escalate-after-N")


class ProposerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    kind: ProposerKind = Field(default="rules", description="who proposes: rules, llm, human or agent")
    fallback: tuple[ProposerKind, ...] = Field(
        default=(), description="kinds asked in order when the proposer gives nothing usable (default: rules)"
    )
    autonomy: str = Field(
        default="full", description="full, approve-interventions, approve-promotions or escalate-after-N"
    )
    base_url: str | None = Field(default=None, description="llm: the OpenAI-compatible endpoint, e.g. http://host/v1")
    model: str | None = Field(default=None, description="llm: the model name the endpoint serves")
    api_key_env: str | None = Field(default=None, description="llm: the environment variable holding the key")
    timeout_s: float = Field(default=60.0, gt=0, description="llm: seconds to wait for one reply")
    max_retries: int = Field(default=3, ge=0, le=10, description="llm: transport retries, with backoff")
    temperature: float = Field(default=0.0, ge=0, le=2, description="llm: sampling temperature")
    max_tokens: int = Field(default=512, ge=16, description="llm: longest reply")

    @model_validator(mode="before")
    @classmethod
    def _default_fallback(cls, data: object) -> object:
        """The rules stand behind any other proposer unless the file says otherwise; TOML
        arrays arrive as lists."""
        if isinstance(data, dict):
            data = dict(data)
            if "fallback" not in data:
                data["fallback"] = [] if data.get("kind", "rules") == "rules" else ["rules"]
            if isinstance(data["fallback"], list):
                data["fallback"] = tuple(data["fallback"])
        return data

    @field_validator("autonomy")
    @classmethod
    def _autonomy(cls, value: str) -> str:
        if value not in AUTONOMY_LEVELS[:3] and not _ESCALATE.fullmatch(value):
            raise ValueError(f"must be one of {', '.join(AUTONOMY_LEVELS)} (N a positive whole number), not {value!r}")
        return value

    @model_validator(mode="after")
    def _coherent(self) -> ProposerConfig:
        kinds = (self.kind, *self.fallback)
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"fallback {list(self.fallback)} repeats a kind (the proposer is {self.kind!r})")
        llm_fields = ("base_url", "model", "api_key_env")
        if "llm" in kinds:
            missing = [name for name in llm_fields[:2] if not getattr(self, name)]
            if missing:
                raise ValueError(f"an llm proposer needs {' and '.join(missing)} (e.g. base_url = "
                                 "\"http://127.0.0.1:8080/v1\", model = \"smollm2\")")  # fmt: skip
            if not self.base_url or not re.match(r"https?://", self.base_url):
                raise ValueError(f"base_url must start with http:// or https://, not {self.base_url!r}")
        else:
            given = [name for name in llm_fields if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only for an llm proposer (kind or fallback \"llm\")")
        return self

    @property
    def escalate_after(self) -> int | None:
        """N of `escalate-after-N`: rejections in a row after which a human decides."""
        matched = _ESCALATE.fullmatch(self.autonomy)
        return int(matched.group(1)) if matched else None

    def api_key(self) -> str:
        """The key from the variable the file names; a local server takes any key."""
        if self.api_key_env is None:
            return "not-needed"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UsageError(f"the [proposer] api_key_env names {self.api_key_env}, which is not set")
        return key
