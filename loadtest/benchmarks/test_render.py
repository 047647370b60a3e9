"""Template render, as the worker renders: compiled template cached, one render per message."""

from __future__ import annotations

from samples import TEMPLATE, person

from app.content.rendering import compiled_cache, render_version


def test_render_email(benchmark):
    """Subject, text and html of the order confirmation for one recipient."""
    data = person(1).data
    render_version(TEMPLATE, ["en"], data)  # compiles once, as a worker's first message does
    cached = len(compiled_cache)
    locale, rendered = benchmark(render_version, TEMPLATE, ["en"], data)
    assert (locale, len(compiled_cache)) == ("en", cached)  # every round hit the cache
    assert rendered["subject"] == "Your order A-10001 is confirmed, Ada Lovelace 1"
