"""Pictures as inline SVG text: the lineage drawn left to right, and curves per step.

Built as strings on the server, so a page (or a report opened from disk) needs no
script or library to show them. Every piece of text placed in the SVG is escaped here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape as _html_escape
from typing import NamedTuple

from evotrainer.lineage.dag import LineageDAG
from evotrainer.lineage.tree import BranchSummary

NODE_W, NODE_H = 190, 44
COLUMN, ROW = 420, 62
MARGIN = 16
_GAP = COLUMN - NODE_W  # between a parent's box and its child's, one column to the right
_LABEL_WIDTH, _NAME_WIDTH = 34, 26  # characters shown, the ellipsis included
# The ellipsis as a character reference: one character beyond Latin-1 would make Python
# hold the whole picture, and the page around it, two bytes a character, and every join,
# copy and the response's UTF-8 encoding of a page of thousands of branches cost twice.
ELLIPSIS = "&#8230;"
_OUTLINE, _INCUMBENT = ' stroke="#667" stroke-width="1"', ' stroke="#b8860b" stroke-width="3"'
_SPECIAL = re.compile(r"[&<>\"']")


def escape(text: str) -> str:
    """html.escape, skipped for the common text that has nothing to escape (thousands of
    branch names on a large lineage page)."""
    return _html_escape(text) if _SPECIAL.search(text) else text


def all_plain(texts: Iterable[str]) -> bool:
    """Whether escape() would leave every one of `texts` as it is: one search over them
    all, where a page of thousands of branches would otherwise escape each name, ref and
    link one call at a time."""
    return _SPECIAL.search("".join(texts)) is None


STATUS_FILL = {"incumbent": "#ffd95a", "promoted": "#b9f0b9", "rejected": "#f7c1cc", "running": "#dfe7f5",
               "start": "#e4e4e4", "waiting": "#ffb366"}  # fmt: skip


# Drawn once per picture instead of on each of thousands of elements (the outline and
# fill per status stay attributes: a picture saved on its own keeps its colours).
_LINEAGE_STYLE = ("<style>svg.lineage .edge{fill:none;stroke:#889;stroke-width:1.5}"
                  "svg.lineage .edge-label{fill:#445}svg.lineage .name{font-weight:bold}</style>")


class Edge(NamedTuple):
    """What a fork changed: the label drawn on the edge into the child, and where it links
    (a tuple: cheaper to make, one per branch of a large page)."""

    label: str
    href: str | None = None


def layout(dag: LineageDAG) -> dict[str, tuple[int, int]]:
    """(column, row) per branch: the column is the fork depth, and rows follow the tree's
    depth-first order, so a parent sits on the row of its first child and siblings below
    it; no two branches share a row, so no edge ever crosses a box."""
    place: dict[str, tuple[int, int]] = {}
    row = 0
    for ref in dag.topological_order():
        parent = dag.node(ref).parent
        column = 0 if parent is None else place[parent][0] + 1
        if parent is not None and dag.node(parent).children[0] == ref:
            place[ref] = (column, place[parent][1])  # the first child continues its parent's row
            continue
        place[ref] = (column, row)
        row += 1
    return place


def _score(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def lineage_svg(
    dag: LineageDAG, info: Mapping[str, BranchSummary], edges: Mapping[str, Edge], href: Callable[[str], str | None]
) -> str:
    """The lineage DAG: one box per branch (its name, status, latest and best score),
    coloured by status, the incumbent outlined; one edge per fork, labelled with what the
    fork changed. Boxes link to `href(ref)`.

    A large experiment's page draws thousands of branches, so each element carries as
    few computed figures as it can: a box is a group moved to its corner, its parts placed
    within it, and an edge is a curve relative to where it starts (a child is always one
    column right of its parent). Text is escaped one call at a time only where a search
    over all text of its kind found something to escape (names, links and statuses
    nearly never hold any)."""
    place = layout(dag)
    columns = max((c for c, _ in place.values()), default=0) + 1
    rows = max((r for _, r in place.values()), default=0) + 1
    width, height = columns * COLUMN + 2 * MARGIN, rows * ROW + 2 * MARGIN
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" width="{width}" height="{height}"'
           f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">{_LINEAGE_STYLE}']  # fmt: skip
    nodes = dag.nodes
    hrefs_plain = all_plain(edge.href for edge in edges.values() if edge.href)
    labels_plain = all_plain(edge.label for edge in edges.values())  # the "@seq " before each is plain
    refs_plain = all_plain(place)
    links = {ref: href(ref) for ref in place}
    links_plain = all_plain(link for link in links.values() if link)
    statuses = {status: escape(status) for status in {s.status for s in info.values()} | {"unknown"}}
    # One pass, each branch's edge in and then its box: edges run in the gaps between
    # columns, so no later edge is drawn over an earlier box.
    for ref, (column, row) in place.items():
        node = nodes[ref]
        x, y = MARGIN + column * COLUMN, MARGIN + row * ROW
        if node.parent is not None:
            parent_row = place[node.parent][1]
            start_y, drop = MARGIN + parent_row * ROW + NODE_H // 2, (row - parent_row) * ROW
            edge = edges.get(ref)
            text = f"@{node.fork_seq} {edge.label}" if edge and edge.label else f"@{node.fork_seq}"
            title, shown = (text if labels_plain else escape(text)), _clip(text, _LABEL_WIDTH, labels_plain)
            label = f'<text class="edge-label" x="{x - _GAP + 4}" y="{start_y + drop - 4}">{shown}</text>'
            if edge and edge.href:
                label = f'<a href="{edge.href if hrefs_plain else escape(edge.href)}">{label}</a>'
            out.append(f'<path class="edge" d="M{x - _GAP},{start_y}c{_GAP // 2},0 {_GAP // 2},{drop} {_GAP},{drop}"/>'
                       f"<g><title>{title}</title>{label}</g>")
        s = info.get(ref)
        status = statuses[s.status if s else "unknown"]
        name = _clip(ref.partition("/")[2], _NAME_WIDTH, refs_plain)
        safe_ref = ref if refs_plain else escape(ref)
        last = _score(s.last_score) if s else ""
        score = f" avg {last} best {_score(s.best_score)}" if s and s.last_score is not None else ""
        box = (f'<rect width="{NODE_W}" height="{NODE_H}" rx="6" fill="{STATUS_FILL.get(status, "#fff")}"'
               f'{_INCUMBENT if s and s.incumbent else _OUTLINE}/><text x="8" y="17" class="name">{name}</text>'
               f'<text x="8" y="34">{status}{score}</text>')  # fmt: skip
        link = links[ref]
        if link:
            box = f'<a href="{link if links_plain else escape(link)}">{box}</a>'
        out.append(f'<g class="node" data-ref="{safe_ref}" data-status="{status}" data-score="{last}"'
                   f' transform="translate({x},{y})"><title>{safe_ref}: {status}</title>{box}</g>')
    out.append("</svg>")
    return "".join(out)


def _clip(text: str, width: int, plain: bool) -> str:
    """`text` escaped (unless `plain`: known to need none), cut to `width` characters,
    the last an ellipsis, when it is longer."""
    cut = len(text) > width
    shown = text[: width - 1] if cut else text
    shown = shown if plain else escape(shown)
    return shown + ELLIPSIS if cut else shown


def curve_svg(title: str, points: Sequence[tuple[float, float]], width: int = 420, height: int = 160) -> str:
    """A line chart of (step, value) points with its axes' ranges written at the corners;
    each point carries its figures in a tooltip and data attributes."""
    finite = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="curve" width="{width}" height="{height}"'
            f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
            f'<text x="4" y="12" font-weight="bold">{escape(title)}</text>')  # fmt: skip
    if not finite:
        return head + f'<text x="4" y="{height // 2}" fill="#667">no data</text></svg>'
    left, right, top, bottom = 44, width - 10, 20, height - 20
    xs, ys = [x for x, _ in finite], [y for _, y in finite]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def at(x: float, y: float) -> tuple[float, float]:
        return (left + (x - x0) / (x1 - x0) * (right - left), bottom - (y - y0) / (y1 - y0) * (bottom - top))

    placed = [at(x, y) for x, y in finite]
    path = " ".join(f"{'M' if i == 0 else 'L'}{px:.1f},{py:.1f}" for i, (px, py) in enumerate(placed))
    dots = "".join(
        f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" data-step="{x:g}" data-value="{y:.6g}">'
        f"<title>step {x:g}: {y:.4g}</title></circle>"
        for (x, y), (px, py) in zip(finite, placed, strict=True)
    )
    axes = (f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#aab"/>'
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#aab"/>'
            f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{y1:.3g}</text>'
            f'<text x="{left - 4}" y="{bottom}" text-anchor="end">{y0:.3g}</text>'
            f'<text x="{left}" y="{height - 6}">step {x0:g}</text>'
            f'<text x="{right}" y="{height - 6}" text-anchor="end">{x1:g}</text>')  # fmt: skip
    return head + axes + f'<path d="{path}" fill="none" stroke="#3366aa" stroke-width="1.5"/>' + dots + "</svg>"
