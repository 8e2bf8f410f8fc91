"""The lineage page's picture and branch table, each built as one string: with thousands
of branches a template's per-cell calls cost more than the SQL behind the page
(bench/ui.py)."""

from __future__ import annotations

from evotrainer.ui.reads import Lineage
from evotrainer.ui.render import Links
from evotrainer.ui.svg import Edge, all_plain, escape, lineage_svg


def _score(value: float | None) -> str:
    return "&#8211;" if value is None else f"{value:.3f}"  # an en dash: see svg.ELLIPSIS


def lineage_parts(found: Lineage, links: Links) -> tuple[str, str]:
    """The experiment's graph as SVG (edges labelled with the fork's reason, linking to the
    intervention it runs) and its branch table; the two share each branch's and each
    fork's link, made once."""
    edges = {ref: Edge(reason, links.intervention(found.experiment, iv) if iv else None)
             for ref, (reason, iv) in found.edges.items()}  # fmt: skip
    branch_links = {ref: links.branch(ref) for ref in found.dag.nodes}
    graph = lineage_svg(found.dag, found.info, edges, branch_links.__getitem__)
    return graph, branch_table(found, edges, branch_links)


def branch_table(found: Lineage, edges: dict[str, Edge], branch_links: dict[str, str | None]) -> str:
    """One row per branch, parents first; the fork column shows `edges`' labels and links,
    the branch column links to `branch_links[ref]`."""
    out = ['<table id="branches"><tr><th>branch</th><th>parent</th><th>status</th><th>head</th><th>latest avg</th>'
           "<th>best avg</th><th>fork</th></tr>"]  # fmt: skip
    order = found.dag.topological_order()
    nodes = found.dag.nodes
    # As in svg.lineage_svg: one search per kind of text decides whether each piece needs
    # escaping on its own (refs are parents too; links hold refs and intervention ids).
    refs_plain = all_plain(order)
    links_plain = all_plain(link for link in (*branch_links.values(), *(e.href for e in edges.values())) if link)
    reasons_plain = all_plain(edge.label for edge in edges.values())
    statuses = {s.status: escape(s.status) for s in found.info.values()}
    for ref in order:
        s = found.info.get(ref)
        edge = edges.get(ref)
        reason = edge.label if edge else ""
        fork = _linked(edge.href if edge else None, reason if reasons_plain else escape(reason), links_plain)
        parent = nodes[ref].parent or ""
        out.append(
            f'<tr data-ref="{ref if refs_plain else escape(ref)}">'
            f"<td>{_linked(branch_links[ref], ref if refs_plain else escape(ref), links_plain)}</td>"
            f"<td>{parent if refs_plain else escape(parent)}</td>"
            f'<td class="status">{statuses[s.status] if s else ""}</td><td class="num">{s.head_seq if s else ""}</td>'
            f'<td class="num score">{_score(s.last_score if s else None)}</td>'
            f'<td class="num">{_score(s.best_score if s else None)}</td><td>{fork}</td></tr>'
        )
    out.append("</table>")
    return "".join(out)


def _linked(href: str | None, shown: str, href_plain: bool) -> str:
    """`shown` (escaped already) as a link to `href` when there is one."""
    if not href:
        return shown
    return f'<a href="{href if href_plain else escape(href)}">{shown}</a>'
