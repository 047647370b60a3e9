"""gunicorn, started from our own command so settings are checked before it forks."""

from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication

from app.config import Settings


class _Gunicorn(BaseApplication):
    def __init__(self, settings: Settings, options: dict[str, Any]):
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            self.cfg.set(name, value)

    def load(self):
        from app.api import create_app

        return create_app(self.settings)


def serve(settings: Settings, workers: int) -> None:
    options = {
        "bind": f"{settings.host}:{settings.port}",
        "workers": workers,
        "worker_class": "gthread",
        # An open event stream holds a thread; app.streams leaves four for ordinary requests.
        "threads": settings.api_threads,
        "graceful_timeout": 10,
        "timeout": 30,
    }
    _Gunicorn(settings, options).run()
