"""Alembic revisions (Alembic skips this file)."""
