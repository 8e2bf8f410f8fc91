"""Pictures as inline SVG text: the lineage drawn left to right, and curves per step.

Built as strings on the server, so a page (or a report opened from disk) needs no
script or library to show them. Every piece of text placed in the SVG is escaped here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape as _html_escape

from evotrainer.lineage.dag import LineageDAG
from evotrainer.lineage.tree import BranchSummary

NODE_W, NODE_H = 190, 44
COLUMN, ROW = 420, 62
MARGIN = 16
_SPECIAL = re.compile(r"[&<>\"']")


def escape(text: str) -> str:
    """html.escape, skipped for the common text that has nothing to escape (thousands of
    branch names on a large lineage page)."""
    return _html_escape(text) if _SPECIAL.search(text) else text


STATUS_FILL = {"incumbent": "#ffd95a", "promoted": "#b9f0b9", "rejected": "#f7c1cc", "running": "#dfe7f5",
               "start": "#e4e4e4", "waiting": "#ffb366"}  # fmt: skip


@dataclass(frozen=True)
class Edge:
    """What a fork changed: the label drawn on the edge into the child, and where it links."""

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
    fork changed. Boxes link to `href(ref)`."""
    place = layout(dag)
    columns = max((c for c, _ in place.values()), default=0) + 1
    rows = max((r for _, r in place.values()), default=0) + 1
    width, height = columns * COLUMN + 2 * MARGIN, rows * ROW + 2 * MARGIN
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" width="{width}" height="{height}"'
           f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">']  # fmt: skip

    def corner(ref: str) -> tuple[int, int]:
        c, r = place[ref]
        return MARGIN + c * COLUMN, MARGIN + r * ROW

    for ref in place:
        parent = dag.node(ref).parent
        if parent is None:
            continue
        (px, py), (cx, cy) = corner(parent), corner(ref)
        x1, y1, x2, y2 = px + NODE_W, py + NODE_H // 2, cx, cy + NODE_H // 2
        mid = (x1 + x2) // 2
        out.append(f'<path class="edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" fill="none"'
                   f' stroke="#889" stroke-width="1.5"/>')  # fmt: skip
        edge = edges.get(ref)
        fork = f"@{dag.node(ref).fork_seq}"
        text = f"{fork} {edge.label}" if edge and edge.label else fork
        label = f'<text class="edge-label" x="{x1 + 4}" y="{y2 - 4}" fill="#445">{escape(_clip(text, 34))}</text>'
        if edge and edge.href:
            label = f'<a href="{escape(edge.href)}">{label}</a>'
        out.append(f"<g><title>{escape(text)}</title>{label}</g>")
    for ref in place:
        x, y = corner(ref)
        s = info.get(ref)
        status = escape(s.status if s else "unknown")
        name, safe_ref = escape(_clip(ref.partition("/")[2], 26)), escape(ref)
        score = f" avg {_score(s.last_score)} best {_score(s.best_score)}" if s and s.last_score is not None else ""
        outline = ' stroke="#b8860b" stroke-width="3"' if s and s.incumbent else ' stroke="#667" stroke-width="1"'
        box = (f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6"'
               f' fill="{STATUS_FILL.get(status, "#fff")}"{outline}/>'
               f'<text x="{x + 8}" y="{y + 17}" font-weight="bold">{name}</text>'
               f'<text x="{x + 8}" y="{y + 34}">{status}{score}</text>')  # fmt: skip
        link = href(ref)
        node = (f'<g class="node" data-ref="{safe_ref}" data-status="{status}"'
                f' data-score="{_score(s.last_score if s else None)}"><title>{safe_ref}: {status}</title>')
        out.append(node + (f'<a href="{escape(link)}">{box}</a>' if link else box) + "</g>")
    out.append("</svg>")
    return "".join(out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


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
