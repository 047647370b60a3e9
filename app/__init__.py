"""Tidings: the API, the services and the engine's shared code; at this root, what every package uses.

app/ never imports tasks/: it publishes work by task name (app/delivery/dispatch.py).
"""
