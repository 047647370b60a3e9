"""A worker told to stop (SIGTERM: Celery's warm shutdown) stops sending new provider batches.

Warm shutdown waits for running tasks, and a deliver task may hold 500 messages for a
provider that takes one per call. So between provider calls deliver asks `stopping()`:
once true, the batch's unsent messages go back to `ready` with their attempt refunded
and are re-published at once for another worker, and the task ends within one provider
call instead of the whole batch.

Celery tells only the worker's main process. With the threads pool (the default) that is
where tasks run; a prefork child (`--autoscale` needs prefork) learns it from a flag the
main process leaves in Redis under its host and pid, one EXISTS per provider call.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

import redis
from celery.signals import worker_init, worker_process_init, worker_shutting_down

from app.config import current_settings
from app.redis_client import redis_for

logger = logging.getLogger(__name__)

STOPPING = threading.Event()
_pool_child = False


# Longer than any shutdown takes; the flag outlives its worker only by this much.
FLAG_SECONDS = 600


def _flag(pid: int) -> str:
    return f"tidings:stopping:{socket.gethostname()}:{pid}"


@worker_init.connect
def _clear_stale_flag(**_: Any) -> None:
    """A restarted container often has the same host name and pid as the worker before it."""
    try:
        redis_for(current_settings().redis_url).delete(_flag(os.getpid()))
    except redis.RedisError as error:
        logger.warning("could not clear a stale stop flag: %s", error)


@worker_shutting_down.connect
def _stop_sending(**_: Any) -> None:
    STOPPING.set()
    try:
        redis_for(current_settings().redis_url).set(_flag(os.getpid()), "1", ex=FLAG_SECONDS)
    except redis.RedisError as error:
        logger.warning("could not tell pool children to stop sending: %s", error)


@worker_process_init.connect
def _note_pool_child(**_: Any) -> None:
    global _pool_child
    _pool_child = True


def stopping() -> bool:
    """True once this worker is shutting down."""
    if STOPPING.is_set():
        return True
    if not _pool_child:
        return False
    try:
        return bool(redis_for(current_settings().redis_url).exists(_flag(os.getppid())))
    except redis.RedisError:
        return False
