"""Alembic environment and versions; `tidings db upgrade` runs them."""
