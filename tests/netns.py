"""Several hosts on one machine: Linux network namespaces on a bridge of the test's own.

A worker on another host reaches PostgreSQL, Redis and the provider over a network that can
fail on its own: its link can go down while the others stay up. Network namespaces give each
"host" its own interfaces and routes on one machine. Each host has one veth pair to a bridge
in the root namespace, on a /24 chosen at random among those no address or route here uses;
the bridge's address is where the test's servers answer. A host has no route beyond that
subnet, so its processes reach nothing but what the test put there. Building it needs root
(CAP_NET_ADMIN) and iproute2; `namespaces_unavailable()` says why it cannot be built.

The session's PostgreSQL and a stack's Redis listen on loopback (or a Unix socket); a `Relay`
carries a host's connections to them byte for byte from the bridge address, so cutting a
host's link cuts its connections exactly as a real network would: no FIN, no RST, silence.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cache

from pytest_httpserver import HTTPServer
from sqlalchemy.engine import make_url
from werkzeug import Request, Response

from tests.provider_server import FakeProviderServer

DEFAULT_PORTS = {"postgresql": 5432, "redis": 6379}


def ip(*args: str) -> str:
    """Run `ip ARGS`; its output. A failure raises with what `ip` said."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


@cache
def namespaces_unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can; asked once per session."""
    probe = f"tidings-probe-{secrets.token_hex(3)}"
    try:
        ip("netns", "add", probe)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        return f"cannot create a network namespace (needs root and iproute2): {error}"
    ip("netns", "del", probe)
    return None


def free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no address or route on this machine overlaps."""
    used = [
        ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
        for link in json.loads(ip("-j", "-4", "addr"))
        for a in link.get("addr_info", [])
    ]
    used += [ipaddress.ip_network(r["dst"]) for r in json.loads(ip("-j", "-4", "route")) if r["dst"] != "default"]
    for _ in range(100):
        candidate = ipaddress.ip_network(f"10.{random.randint(200, 254)}.{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(network) for network in used):
            return candidate
    raise RuntimeError(f"no free 10.x.y.0/24 among 100 tried; in use: {used}")


@dataclass(frozen=True)
class Host:
    """One namespace: its name, its address on the subnet, and its link's end on the bridge."""

    name: str
    address: str
    link: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host (`ip netns exec` keeps the environment and the process id)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Take the host's link down at the bridge: every connection of the host goes silent."""
        ip("link", "set", self.link, "down")


class Network:
    """A bridge with `count` hosts on a subnet of its own; `close()` removes all of it."""

    def __init__(self, count: int):
        tag = secrets.token_hex(2)
        self.subnet = free_subnet()
        addresses = list(self.subnet.hosts())
        self.address = str(addresses[0])
        self.bridge = f"tdbr{tag}"
        self.hosts = [Host(f"tidings-{tag}-h{i}", str(addresses[10 + i]), f"tdv{tag}h{i}") for i in range(1, count + 1)]
        self.relays: list[Relay] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for host in self.hosts:
            ip("netns", "add", host.name)
            ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.name)
            ip("link", "set", host.link, "master", self.bridge, "up")
            ip("-n", host.name, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", "eth0")
            ip("-n", host.name, "link", "set", "eth0", "up")
            ip("-n", host.name, "link", "set", "lo", "up")

    def expose(self, url: str) -> str:
        """`url` (PostgreSQL or Redis, on loopback or a Unix socket) as the hosts reach it: through
        a relay on the bridge address."""
        parsed = make_url(url)
        port = parsed.port or DEFAULT_PORTS[parsed.get_backend_name()]
        socket_dir = parsed.query.get("host")
        target: str | tuple[str, int] = (
            f"{socket_dir}/.s.PGSQL.{port}" if socket_dir else (parsed.host or "127.0.0.1", port)
        )
        relay = Relay(self.address, target)
        self.relays.append(relay)
        exposed = parsed.set(host=self.address, port=relay.port).difference_update_query(["host"])
        return exposed.render_as_string(hide_password=False)

    def close(self) -> None:
        """Remove everything built, whatever state it is in; what is already gone is skipped."""
        for relay in self.relays:
            relay.close()
        present = set(ip("netns", "list").split())
        links = {link["ifname"] for link in json.loads(ip("-j", "link"))}
        for host in self.hosts:
            if host.name in present:
                for pid in ip("netns", "pids", host.name).split():
                    with suppress(ProcessLookupError):  # only processes this test started run there
                        os.kill(int(pid), signal.SIGKILL)
            # By name, before the namespace: a namespace outlives its name while its sockets still
            # retransmit to a host that was cut off, and its veth pair would linger with it.
            if host.link in links:
                ip("link", "del", host.link)
            if host.name in present:
                ip("netns", "del", host.name)
        if self.bridge in links:
            ip("link", "del", self.bridge)


class Relay:
    """Connections to `address`:<free port> carried to `target` (a TCP address or a Unix socket)."""

    def __init__(self, address: str, target: str | tuple[str, int]):
        self.target = target
        self.listener = socket.create_server((address, 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            family = socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET
            upstream = socket.socket(family, socket.SOCK_STREAM)
            self.sockets += [client, upstream]
            try:
                upstream.connect(self.target)
            except OSError:  # the server is down: the client sees its connection end, as it would
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        """Shut every socket down before closing it: a close alone would not wake the threads
        blocked on them, and the port would go on listening."""
        for sock in [self.listener, *self.sockets]:
            with suppress(OSError):  # not connected, or already shut
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy one direction until it ends, then end it on the other side too."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:  # the other direction or close() ended it first
        return


class HostProvider(FakeProviderServer):
    """The fake provider on the bridge address, noting which host sent each message of each request.

    `sources[message_id]` lists the sender's address for every request that carried the
    message, in the order they came.
    """

    def __init__(self, address: str, latency: float = 0.0, deduplicate: bool = False):
        super().__init__(latency=latency, deduplicate=deduplicate)
        self.server = HTTPServer(host=address, port=0, threaded=True)
        self.sources: dict[str, list[str]] = defaultdict(list)
        self._sources_lock = threading.Lock()

    def _handle(self, request: Request) -> Response:
        with self._sources_lock:
            for message in request.get_json()["messages"]:
                self.sources[message["id"]].append(request.remote_addr or "?")
        return super()._handle(request)

    def by_host(self, ids: Sequence[str]) -> Counter:
        """How many sends of the messages `ids` came from each address."""
        with self._sources_lock:
            return Counter(source for i in ids for source in self.sources.get(i, []))
