"""kombu's Redis transport, except that a channel whose connection is gone fails as a lost connection.

Why: when Redis dies under a worker, Celery (5.7) collects the broken kombu connection, which
detaches the transport from it (`transport.client = None`), and then closes the connection
again. That second close, or a task's late ack arriving after the loss, reaches a channel of
the old connection; the channel has already dropped its connection pool, so it builds a new
one from `transport.client.hostname` and raises AttributeError. Celery treats only the
transport's connection errors as recoverable, so the AttributeError ended the worker
("Unrecoverable error: AttributeError(\"'NoneType' object has no attribute 'hostname'\")")
instead of letting it reconnect. Raising redis' ConnectionError instead is what the channel
would raise had the pool still been there with Redis down: kombu and Celery already ignore
it on close and log it on ack, and the message, unacked, is Redis' (visibility timeout) and
the sweeper's to bring back.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

# What `broker_transport` names for redis:// URLs (app/delivery/broker.py).
TRANSPORT = "app.delivery.redis_transport:Transport"


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        """The pool's parameters, or a connection error once the channel's connection is closed."""
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("this channel's broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]  # kombu-stubs leave it out


class Transport(kombu_redis.Transport):
    Channel = Channel
