"""Alembic migrations of the interaction DB, shipped inside the package so an installed ``iez db upgrade`` finds them."""
