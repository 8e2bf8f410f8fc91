"""The lineage page's branch table, built as one string: with thousands of branches a
template's per-cell calls cost more than the SQL behind the page (bench/ui.py)."""

from __future__ import annotations

from evotrainer.ui.reads import Lineage
from evotrainer.ui.render import Links
from evotrainer.ui.svg import escape


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _linked(href: str | None, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>' if href else escape(text)


def branch_table(found: Lineage, links: Links) -> str:
    out = ['<table id="branches"><tr><th>branch</th><th>parent</th><th>status</th><th>head</th><th>latest avg</th>'
           "<th>best avg</th><th>fork</th></tr>"]  # fmt: skip
    for ref in found.dag.topological_order():
        s = found.info.get(ref)
        reason, iv = found.edges.get(ref, ("", None))
        fork = _linked(links.intervention(found.experiment, iv) if iv else None, reason)
        out.append(
            f'<tr data-ref="{escape(ref)}"><td>{_linked(links.branch(ref), ref)}</td>'
            f"<td>{escape(found.dag.nodes[ref].parent or '')}</td>"
            f'<td class="status">{escape(s.status) if s else ""}</td><td class="num">{s.head_seq if s else ""}</td>'
            f'<td class="num score">{_score(s.last_score if s else None)}</td>'
            f'<td class="num">{_score(s.best_score if s else None)}</td><td>{fork}</td></tr>'
        )
    out.append("</table>")
    return "".join(out)
