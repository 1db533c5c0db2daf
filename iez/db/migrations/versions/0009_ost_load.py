"""The MDS's live load per OST (issue 23): ``osts.load_bytes_s``.

Read+write bytes/s the OST served over the MDS's smoothing window (:mod:`iez.traffic`), as the MDS's
live view computed it from the agents' counters when it stored the OST's latest report. ``iez status``,
the REST API and the mover read it, so every reader shows the figure placement used; NULL until an MDS
of this version has stored a report (readers take it as unknown: 0).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("osts") as batch:
        batch.add_column(sa.Column("load_bytes_s", sa.Double(), nullable=True))  # DOUBLE: MariaDB FLOAT keeps 7 digits


def downgrade() -> None:
    with op.batch_alter_table("osts") as batch:
        batch.drop_column("load_bytes_s")
