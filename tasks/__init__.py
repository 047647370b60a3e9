"""The workers: Celery tasks of the pipeline (prepare → deliver) and beat, and the steps only they take."""
