"""Server-Sent Events: one Redis pub/sub connection per API process, shared by its streams.

A stream subscribes before it reads the log, so nothing published in between is lost, and
drops live entries it has just replayed. Each open stream holds one server thread (the
API runs gunicorn's threaded workers), so a process takes at most `api_threads - 4`
streams and answers 503 beyond that, keeping threads for ordinary requests. Within that,
each stream names the quotas it counts against (its project, its inbox token), so one
tenant cannot take every slot of a process.

A stream outlives the request that authenticated it: once per heartbeat it asks whether
its caller may still listen, and ends when not.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import redis
from flask import Response

from app.observability import live

logger = logging.getLogger(__name__)

# How long the hub thread blocks on Redis before it looks for new subscriptions.
POLL_SECONDS = 0.2
# How often the hub renews the marks of the channels it listens to (app.observability.live).
MARK_EVERY_SECONDS = 30
SUBSCRIBE_TIMEOUT = 5.0
CLOSED = object()


class Busy(Exception):
    """This process serves as many streams as it may."""


# What holds stream slots, and which one of them: ("project", "acme"), ("inbox token", digest).
Quota = tuple[str, str]


class OverQuota(Exception):
    """The stream's project (or inbox token) holds as many of this process's streams as it may."""

    def __init__(self, quota: Quota):
        super().__init__(quota)
        self.quota = quota


class Listener:
    """One stream's mailbox on one channel, and the quotas its slot counts against."""

    def __init__(self, hub: Hub, channel: str, quotas: tuple[Quota, ...]):
        self.hub = hub
        self.channel = channel
        self.quotas = quotas
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.closed = False

    def get(self, timeout: float) -> Any:
        """The next message, None when `timeout` passed first; ends the stream if the hub lost Redis."""
        try:
            message = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if message is CLOSED:
            self.closed = True
        return message

    def close(self) -> None:
        self.hub.leave(self)


class Hub:
    """Fans Redis pub/sub messages out to the listeners of this process, by channel."""

    def __init__(self, redis_url: str, max_listeners: int):
        self.redis_url = redis_url
        self.max_listeners = max_listeners
        self._lock = threading.Lock()
        self._listeners: dict[str, set[Listener]] = {}
        self._held: Counter[Quota] = Counter()  # slots taken per quota
        self._commands: queue.Queue[tuple[str, str, threading.Event | None]] = queue.Queue()
        self._thread: threading.Thread | None = None

    def listen(self, channel: str, quotas: Mapping[Quota, int]) -> Listener:
        """A listener on `channel`, once Redis confirmed the subscription. `quotas` names
        each quota the slot counts against, with how many slots it may hold in this process."""
        listener = Listener(self, channel, tuple(quotas))
        with self._lock:
            if sum(len(group) for group in self._listeners.values()) >= self.max_listeners:
                raise Busy
            for quota, cap in quotas.items():
                if self._held[quota] >= cap:
                    raise OverQuota(quota)
            self._held.update(listener.quotas)
            self._listeners.setdefault(channel, set()).add(listener)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="tidings-live-hub", daemon=True)
                self._thread.start()
        ready = threading.Event()
        self._commands.put(("subscribe", channel, ready))
        if not ready.wait(SUBSCRIBE_TIMEOUT):
            self.leave(listener)
            raise redis.ConnectionError("the live hub could not subscribe in time")
        return listener

    def leave(self, listener: Listener) -> None:
        with self._lock:
            group = self._listeners.get(listener.channel, set())
            if listener not in group:
                return  # left already, or dropped with everyone
            group.discard(listener)
            for quota in listener.quotas:
                self._held[quota] -= 1
                if not self._held[quota]:
                    del self._held[quota]  # a quota no stream holds is forgotten
            if group:
                return
            del self._listeners[listener.channel]
        self._commands.put(("unsubscribe", listener.channel, None))

    def _run(self) -> None:
        while True:
            client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2, health_check_interval=30)
            try:
                self._serve(client, client.pubsub())
            except redis.RedisError as error:
                logger.warning("live hub lost Redis (%s); open streams end and clients resume", error)
                self._drop_everyone()
                time.sleep(1)
            finally:
                client.close()

    def _serve(self, client: redis.Redis, pubsub: redis.client.PubSub) -> None:
        waiting: dict[str, list[threading.Event]] = {}
        marked = time.monotonic()
        while True:
            self._apply_commands(client, pubsub, waiting)
            if time.monotonic() - marked > MARK_EVERY_SECONDS:
                with self._lock:
                    channels = list(self._listeners)
                self._mark(client, channels)
                marked = time.monotonic()
            message = pubsub.get_message(timeout=POLL_SECONDS)
            if message is None:
                continue
            channel = message["channel"].decode()
            if message["type"] == "subscribe":
                for ready in waiting.pop(channel, []):
                    ready.set()
            elif message["type"] == "message":
                self._dispatch(channel, json.loads(message["data"]))

    def _mark(self, client: redis.Redis, channels: list[str]) -> None:
        """Tell publishers these channels have listeners (app.observability.live publishes only to those)."""
        with client.pipeline(transaction=False) as pipe:
            for channel in channels:
                pipe.set(live.listening_key(channel), 1, ex=live.LISTENING_TTL_SECONDS)
            pipe.execute()

    def _apply_commands(
        self, client: redis.Redis, pubsub: redis.client.PubSub, waiting: dict[str, list[threading.Event]]
    ) -> None:
        while True:
            try:
                command, channel, ready = self._commands.get_nowait()
            except queue.Empty:
                return
            if command == "subscribe":
                # Marked before the subscription, which comes before the stream's log replay.
                self._mark(client, [channel])
                # Subscribing again is harmless, and its confirmation is the proof we wait for.
                waiting.setdefault(channel, []).append(ready)  # type: ignore[arg-type]
                pubsub.subscribe(channel)
            elif channel not in self._listeners:
                pubsub.unsubscribe(channel)

    def _dispatch(self, channel: str, message: Any) -> None:
        with self._lock:
            listeners = list(self._listeners.get(channel, ()))
        for listener in listeners:
            listener.inbox.put(message)

    def _drop_everyone(self) -> None:
        with self._lock:
            listeners = [listener for group in self._listeners.values() for listener in group]
            self._listeners.clear()
            self._held.clear()
        for listener in listeners:
            listener.inbox.put(CLOSED)


def sse(data: Any, event_id: str | None = None, event: str | None = None) -> str:
    """One Server-Sent Events message: optional `id:` and `event:`, then the JSON `data:`."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append(f"data: {json.dumps(data, separators=(',', ':'), default=_json_default)}")
    return "\n".join(lines) + "\n\n"


def _json_default(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


HEARTBEAT = ": heartbeat\n\n"
# Tells EventSource how long to wait before it reconnects (milliseconds).
RETRY = "retry: 2000\n\n"


def pump(
    listener: Listener,
    heartbeat: float,
    first: Iterable[str],
    render: Callable[[Any], Iterable[str]],
    allowed: Callable[[], bool],
) -> Iterator[str]:
    """The body of a stream: `first` (what the client missed), then each live message
    rendered. Every `heartbeat` seconds, busy or quiet, `allowed` says whether the caller
    may still listen, and a stream with nothing to send by then sends a heartbeat comment.
    Ends when it may not (a revoked key, an expired token), or when the hub loses Redis;
    the client reconnects, and is refused if it must be."""
    try:
        yield RETRY
        yield from first
        check_at = time.monotonic() + heartbeat
        while not listener.closed:
            message = listener.get(max(check_at - time.monotonic(), 0.0))
            if time.monotonic() >= check_at:
                if not allowed():
                    return
                check_at = time.monotonic() + heartbeat
            if message is None:
                yield HEARTBEAT
            elif message is not CLOSED:
                yield from render(message)
    finally:
        listener.close()


def response(body: Iterator[str]) -> Response:
    """The HTTP answer for a stream: no caching, and no buffering by a proxy on the way."""
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return Response(body, mimetype="text/event-stream", headers=headers)
