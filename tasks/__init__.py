"""Celery tasks: the delivery pipeline (prepare → deliver) and its beat work."""
