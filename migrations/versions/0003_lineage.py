"""Lineage: projection tables, lineage functions and views, the reader role's grants.

The SQL lives in lineage/ (projections.sql, functions.sql, views.sql, grants.sql) so it
can be read and reused (`replay --projections` builds projections.sql into a scratch
schema); this revision applies it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from pathlib import Path

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

LINEAGE = Path(__file__).resolve().parents[2] / "lineage"


def _sql(name: str) -> str:
    return (LINEAGE / name).read_text(encoding="utf-8")


def upgrade() -> None:
    op.execute(_sql("projections.sql").replace("{schema}", "projections"))
    op.execute(_sql("functions.sql"))
    op.execute(_sql("views.sql"))
    op.execute(_sql("grants.sql"))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS promotion_audit, experiments, branch_heads, lineage_edges")
    op.execute("DROP FUNCTION IF EXISTS branch_history(text), branch_ancestry(text)")
    op.execute("DROP SCHEMA IF EXISTS projections CASCADE")
