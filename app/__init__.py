"""Tidings: the HTTP API, its settings, models and services, and the command line."""
