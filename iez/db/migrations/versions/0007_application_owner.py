"""Who owns each application: the user whose requests created it.

``applications.owner`` holds a user name (as the API authenticated it: the
MUNGE credential's uid resolved through the password database, or the name a
per-user token maps to; the login name for ``iez run``/``iez learn``/``iez
trace --store`` writing the DB directly). The API serves an application's
requests, allocations, lookups and layout map only to its owner (and to the
``IEZ_API_TOKEN`` service credential). NULL: created before owners were
recorded, or by the service credential without an ``owner``; only the service
credential reads those.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

_NAME = sa.String(255).with_variant(mysql.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mysql",
                                    "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("applications") as batch:
        batch.add_column(sa.Column("owner", _NAME, nullable=True))
        batch.create_index("ix_applications_owner", ["owner"])


def downgrade() -> None:
    with op.batch_alter_table("applications") as batch:
        batch.drop_index("ix_applications_owner")
        batch.drop_column("owner")
