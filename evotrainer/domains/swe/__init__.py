"""Repository-level software engineering: generated buggy repositories and a tool environment."""

from evotrainer.domains.swe.domain import SweDomain, SweDomainConfig
from evotrainer.domains.swe.env import SweConfig, SweEnvironment, parse_action
from evotrainer.domains.swe.repos import SweProblem, generate_problem, load_swebench_jsonl

__all__ = [
    "SweConfig",
    "SweDomain",
    "SweDomainConfig",
    "SweEnvironment",
    "SweProblem",
    "generate_problem",
    "load_swebench_jsonl",
    "parse_action",
]
