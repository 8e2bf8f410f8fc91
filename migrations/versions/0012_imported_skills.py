"""projections.imported_skills: skills brought in from a skills file, queryable in SQL.

`evotrainer skills import` records SkillImported events, which the projections did not
hold; this adds their table (lineage/projections.sql has it for new databases) and fills
it with the SkillImported events the projector has already passed, which it would never
read again. Later ones it adds itself as it catches up.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from pathlib import Path

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PROJECTIONS_SQL = Path(__file__).resolve().parents[2] / "lineage" / "projections.sql"


def _create_table() -> str:
    """The table's statement as projections.sql has it, made idempotent: a database
    created after this revision got the table from revision 0003 already."""
    text = PROJECTIONS_SQL.read_text(encoding="utf-8").replace("{schema}", "projections")
    start = text.index("CREATE TABLE projections.imported_skills")
    statement = text[start : text.index(";", start) + 1]
    return statement.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)


def upgrade() -> None:
    op.execute(_create_table())
    op.execute("""
        INSERT INTO projections.imported_skills
        SELECT e.position, b.experiment, b.name, e.seq,
               e.payload->>'skill_id', e.payload->>'trigger', e.payload->>'intervention',
               e.payload->>'expected_outcome', e.payload->>'category',
               (e.payload->>'successes')::int, (e.payload->>'failures')::int,
               e.payload->'effect_sizes', e.payload->'validated_in', e.payload->'tried_in',
               e.payload->'change', e.payload->'source'
        FROM events e JOIN branches b USING (branch_id)
        WHERE e.type = 'SkillImported'
          AND e.position <= COALESCE((SELECT position FROM subscriptions WHERE name = 'projections'), 0)
        ON CONFLICT (position) DO NOTHING
    """)
    # The reader role's grants again (idempotent; skipped where this role may not grant).
    op.execute((PROJECTIONS_SQL.parent / "grants.sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS projections.imported_skills")
