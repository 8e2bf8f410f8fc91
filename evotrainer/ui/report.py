"""`evotrainer report EXPERIMENT --out DIR`: the dashboard's experiment and branch pages as
static files, openable from disk without a server.

    write_report(store, "digits", Path("report"))   # report/index.html, report/branch-*.html

The same templates and SVG as the live pages, with links between the report's own files;
read inside the same read-only transaction the dashboard uses.
"""

from __future__ import annotations

from pathlib import Path

from evotrainer.errors import UsageError
from evotrainer.lineage.readonly import read_only
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from evotrainer.ui import reads
from evotrainer.ui.render import Pages, ReportLinks
from evotrainer.ui.svg import curve_svg
from evotrainer.ui.tables import lineage_parts


def write_report(store: EventStore, experiment: str, out: Path) -> list[Path]:
    """Write index.html (the lineage graph and table) and one page per branch into `out`;
    returns the files written."""
    from evotrainer.lineage.projections import Projector

    pages = Pages(ReportLinks())
    Projector(store).catch_up()
    rendered: dict[str, str] = {}
    with read_only(store.conn):
        found = reads.lineage(store, experiment)
        common = {"position": "", "live": False, "poll_ms": 0}
        graph, table = lineage_parts(found, pages.links)
        rendered["index.html"] = pages.render("lineage.html", lineage=found, graph=graph, table=table, **common)
        for ref in found.dag.topological_order():
            b = reads.branch(store, BranchRef.parse(ref, allow_seq=False))
            curves = [curve_svg(title, points) for title, points in b.curves]
            name = pages.links.branch(ref)
            assert name is not None
            rendered[name] = pages.render("branch.html", b=b, curves=curves, **common)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, html in rendered.items():
            (out / name).write_text(html, encoding="utf-8")
            written.append(out / name)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc.strerror}") from None
    return written
