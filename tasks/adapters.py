"""The provider adapters of this worker process, built once from its settings."""

from __future__ import annotations

from functools import cache

from providers import registry
from providers.base import Provider
from tasks.celery_app import settings


@cache
def provider_instance(name: str) -> Provider:
    """One adapter per provider and process, so its HTTP connections are reused."""
    return registry.build(name, settings().environ)
