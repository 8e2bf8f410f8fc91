"""Pages as HTML: the Jinja2 templates shipped in evotrainer/ui/templates, and where links go.

The same templates serve the live dashboard and the static report; only `Links` differs.
The server's links are its routes; the report's are files next to each other, and a page
the report does not include gets no link (its text is shown plain).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"
_PLAIN = re.compile(r"[A-Za-z0-9._-]+")  # what a URL path segment holds unquoted


class Links:
    """The dashboard's routes."""

    static = False

    def home(self) -> str | None:
        return "/"

    def experiment(self, experiment: str) -> str | None:
        return f"/e/{quote(experiment)}"

    def branch(self, ref: str) -> str | None:
        # Names are letters, digits, '.', '_' and '-' (refs.check_name): nothing to quote.
        experiment, _, name = ref.partition("/")
        return f"/e/{experiment}/b/{name}"

    def audit(self, ref: str) -> str | None:
        experiment, _, name = ref.partition("/")
        return f"/e/{quote(experiment)}/b/{quote(name)}/audit"

    def rollouts(self, ref: str, evidence: str, positions: list[int]) -> str | None:
        experiment, _, name = ref.partition("/")
        at = ",".join(str(i) for i in positions)
        return f"/e/{quote(experiment)}/b/{quote(name)}/rollouts/{quote(evidence)}?at={at}"

    def intervention(self, experiment: str, intervention_id: str) -> str | None:
        safe = intervention_id if _PLAIN.fullmatch(intervention_id) else quote(intervention_id, safe="")
        return f"/e/{experiment}/interventions/{safe}"

    def diff(self, a: str, b: str) -> str | None:
        return f"/harness/diff?{urlencode({'a': a, 'b': b})}"

    def skills(self) -> str | None:
        return "/skills"

    def compare(self) -> str | None:
        return "/compare"


class ReportLinks(Links):
    """A static report of one experiment: index.html and one page per branch."""

    static = True

    def home(self) -> str | None:
        return "index.html"

    def experiment(self, experiment: str) -> str | None:
        return "index.html"

    def branch(self, ref: str) -> str | None:
        return f"branch-{ref.partition('/')[2]}.html"

    def audit(self, ref: str) -> str | None:
        return None

    def rollouts(self, ref: str, evidence: str, positions: list[int]) -> str | None:
        return None

    def intervention(self, experiment: str, intervention_id: str) -> str | None:
        return None

    def diff(self, a: str, b: str) -> str | None:
        return None

    def skills(self) -> str | None:
        return None

    def compare(self) -> str | None:
        return None


def _score(value: Any) -> str:
    return "–" if value is None else f"{float(value):.3f}"


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )  # fmt: skip
    env.filters["score"] = _score
    env.filters["short"] = lambda text: (text or "")[:12]
    env.filters["compact"] = _compact
    return env


class Pages:
    """Renders a named template with the links of a dashboard or of a report."""

    def __init__(self, links: Links) -> None:
        self.links = links
        self.env = environment()

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(link=self.links, **context)
