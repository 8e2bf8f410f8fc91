"""The worker fleet's tables (outbox hand-offs, task leases). Placeholder until the fleet lands.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
