"""The lineage picture and branch table as drawn: boxes that never overlap, each edge from
its parent's box to its child's, and every piece of text escaped, however few pieces of
its kind need it."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

from evotrainer.lineage.dag import LineageDAG
from evotrainer.lineage.tree import BranchSummary
from evotrainer.ui.reads import Lineage
from evotrainer.ui.render import Links
from evotrainer.ui.svg import NODE_H, NODE_W, Edge, lineage_svg
from evotrainer.ui.tables import lineage_parts

SVG = "{http://www.w3.org/2000/svg}"


def summary(ref: str, parent: str | None, status: str = "running", score: float | None = 0.5) -> BranchSummary:
    return BranchSummary(ref, parent, 1, 3, status, score, score)


def draw(edges_in: list[tuple[str, str | None]], edges: dict[str, Edge] | None = None,
         statuses: dict[str, str] | None = None) -> ET.Element:  # fmt: skip
    dag = LineageDAG((ref, parent, 1) for ref, parent in edges_in)
    info = {ref: summary(ref, parent, (statuses or {}).get(ref, "running")) for ref, parent in edges_in}
    text = lineage_svg(dag, info, edges or {}, lambda ref: f"/b/{ref}?x=1&y=2")
    return ET.fromstring(text)  # well-formed XML: nothing unescaped broke it


def boxes(svg: ET.Element) -> dict[str, tuple[int, int]]:
    """Each branch's box corner, from its group's translation."""
    out = {}
    for group in svg.iter(f"{SVG}g"):
        if group.get("class") == "node":
            x, y = re.fullmatch(r"translate\((\d+),(\d+)\)", group.get("transform", "")).groups()  # type: ignore[union-attr]
            out[group.get("data-ref")] = (int(x), int(y))
    return out


def test_boxes_never_overlap_and_every_edge_joins_parent_to_child() -> None:
    tree = [("e/main", None), ("e/a", "e/main"), ("e/b", "e/main"), ("e/c", "e/a"), ("e/d", "e/a"),
            ("e/e", "e/d"), ("e/f", "e/main")]  # fmt: skip
    svg = draw(tree)
    corners = boxes(svg)
    assert set(corners) == {ref for ref, _ in tree}
    placed = list(corners.values())
    for i, (x1, y1) in enumerate(placed):
        for x2, y2 in placed[i + 1 :]:
            assert abs(x1 - x2) >= NODE_W or abs(y1 - y2) >= NODE_H, "two boxes overlap"
    ends = set()
    for path in svg.iter(f"{SVG}path"):
        numbers = [int(n) for n in re.findall(r"-?\d+", path.get("d", ""))]
        assert re.fullmatch(r"M-?\d+,-?\d+c-?\d+,0 -?\d+,-?\d+ -?\d+,-?\d+", path.get("d", ""))
        start_x, start_y, *_, dx, dy = numbers
        ends.add(((start_x, start_y), (start_x + dx, start_y + dy)))
    want = set()
    for ref, parent in tree:
        if parent is not None:
            (px, py), (cx, cy) = corners[parent], corners[ref]
            want.add(((px + NODE_W, py + NODE_H // 2), (cx, cy + NODE_H // 2)))
    assert ends == want


def test_text_is_escaped_wherever_one_piece_of_its_kind_needs_it() -> None:
    hostile = '<script>alert("x")</script> & more'
    tree = [("e/main", None), ("e/a", "e/main"), ("e/<b>", "e/main")]
    edges = {"e/a": Edge("plain reason"), "e/<b>": Edge(hostile, '/iv?a=1&b="2"')}
    svg = draw(tree, edges, statuses={"e/a": 'odd"status'})
    assert set(boxes(svg)) == {"e/main", "e/a", "e/<b>"}
    titles = [t.text for t in svg.iter(f"{SVG}title")]
    assert f"@1 {hostile}" in titles and 'e/a: odd"status' in titles
    links = [a.get("href") for a in svg.iter(f"{SVG}a")]
    assert '/iv?a=1&b="2"' in links and "/b/e/<b>?x=1&y=2" in links
    statuses = {g.get("data-ref"): g.get("data-status") for g in svg.iter(f"{SVG}g") if g.get("class") == "node"}
    assert statuses["e/a"] == 'odd"status'


def test_the_branch_table_escapes_a_fork_reason_among_plain_ones() -> None:
    hostile = '<img src=x onerror="alert(1)"> & co'
    tree = [("e/main", None), ("e/a", "e/main"), ("e/b", "e/main")]
    dag = LineageDAG((ref, parent, 1) for ref, parent in tree)
    info = {ref: summary(ref, parent) for ref, parent in tree}
    found = Lineage("e", dag, info, "e/main", {"e/a": ("plain", None), "e/b": (hostile, "iv&1")}, [])
    graph, table = lineage_parts(found, Links())
    ET.fromstring(graph)
    assert "<img" not in table and html.escape(hostile) in table
    assert 'href="/e/e/interventions/iv%261"' in table and ">plain<" in table


def test_long_names_and_labels_are_cut_after_escaping_and_the_picture_stays_ascii() -> None:
    """A cut name or label ends in an ellipsis written as a character reference, and a cut
    hostile one is escaped before the reference is added. The picture and table of plain
    names hold no character beyond ASCII (one would make Python hold the whole page at
    two bytes a character)."""
    plain, hostile = "e/" + "long-branch-name-" * 3, "e/" + "<x>&" * 12
    tree = [("e/main", None), (plain, "e/main"), (hostile, "e/main")]
    dag = LineageDAG((ref, parent, 1) for ref, parent in tree)
    info = {ref: summary(ref, parent, score=None if ref == plain else 0.5) for ref, parent in tree}
    reasons = {plain: ("a fork reason far longer than the label's width", None), hostile: ("<b>" * 20, None)}
    graph, table = lineage_parts(Lineage("e", dag, info, "e/main", reasons, []), Links())
    svg = ET.fromstring(graph)
    names = {t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "name"}
    assert plain[2:27] + "\u2026" in names and "<x>&" * 6 + "<\u2026" in names
    labels = {t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "edge-label"}
    assert "@1 a fork reason far longer than \u2026" in labels and "@1 " + "<b>" * 10 + "\u2026" in labels
    plain_only = Lineage("e", LineageDAG([("e/main", None, 1), (plain, "e/main", 1)]),
                         {ref: info[ref] for ref in ("e/main", plain)}, "e/main", {plain: reasons[plain]}, [])
    assert all(part.isascii() for part in lineage_parts(plain_only, Links()))
    assert "&#8211;" in table  # a branch with no score yet
