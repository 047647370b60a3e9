"""Who this worker process is, and its heartbeat, so a claim names a process that can be seen to die.

The identity is the process that makes the provider call: with the threads pool the
worker's own process, with prefork the pool child (a child killed alone, out of memory or
by a hard time limit, takes only its own claims with it). Host and pid say where it ran;
a random part tells a restarted process from the one before it with the same pid. A
forked child gets an identity and a heartbeat of its own on first use.

The first use beats before returning, so no claim ever names a process that has not yet
beaten; a daemon thread then beats every WORKER_HEARTBEAT_SECONDS for the life of the process.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

import redis

from app.config import current_settings
from app.delivery import heartbeats
from app.redis_client import redis_for

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_identity: tuple[int, str] | None = None  # (pid, identity): a forked child must not keep its parent's


def current_worker() -> str:
    """This process's identity, beating already."""
    global _identity
    with _lock:
        if _identity is None or _identity[0] != os.getpid():
            worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
            heartbeats.beat(redis_for(current_settings().redis_url), worker)
            threading.Thread(target=_beat_forever, args=(worker,), name="tidings-heartbeat", daemon=True).start()
            _identity = (os.getpid(), worker)
        return _identity[1]


def _beat_forever(worker: str) -> None:
    """Beat until the process ends; a Redis that is away only makes the beats wait for it
    (said once when they stop, once when they resume)."""
    config = current_settings()
    stop = threading.Event()  # never set: the daemon thread ends with its process
    failing = False
    while not stop.wait(config.worker_heartbeat):
        try:
            heartbeats.beat(redis_for(config.redis_url), worker)
        except redis.RedisError as error:
            if not failing:
                logger.warning("heartbeats of %s not written until Redis answers: %s", worker, error)
            failing = True
            continue
        if failing:
            logger.warning("heartbeats of %s written again", worker)
        failing = False
