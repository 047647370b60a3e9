"""Server-Sent Events: one Redis pub/sub connection per API process, shared by its streams.

A stream subscribes before it reads the log, so nothing published in between is lost, and
drops live entries it has just replayed. Each open stream holds one server thread (the
API runs gunicorn's threaded workers), so a process takes at most `api_threads - 4`
streams and answers 503 beyond that, keeping threads for ordinary requests.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
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


class Listener:
    """One stream's mailbox on one channel."""

    def __init__(self, hub: Hub, channel: str):
        self.hub = hub
        self.channel = channel
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
        self._commands: queue.Queue[tuple[str, str, threading.Event | None]] = queue.Queue()
        self._thread: threading.Thread | None = None

    def listen(self, channel: str) -> Listener:
        """A listener on `channel`, once Redis confirmed the subscription."""
        listener = Listener(self, channel)
        with self._lock:
            if sum(len(group) for group in self._listeners.values()) >= self.max_listeners:
                raise Busy
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
            group.discard(listener)
            if group or listener.channel not in self._listeners:
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
    expires_at: float | None = None,
) -> Iterator[str]:
    """The body of a stream: `first` (what the client missed), then each live message
    rendered, with a heartbeat comment whenever the stream has been quiet for `heartbeat`
    seconds. Ends when the hub loses Redis or the token expires; the client reconnects."""
    try:
        yield RETRY
        yield from first
        while not listener.closed:
            if expires_at is not None and time.time() >= expires_at:
                return
            message = listener.get(heartbeat)
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
