"""How fast `tidings smtp` accepts mail, and what each message costs the server in CPU.

Starts `tidings smtp` as its own process (against DATABASE_URL / REDIS_URL, or embedded
servers when they are unset), creates a project with a test key, then has N concurrent
smtplib clients (8 by default) each log in once and send their share of a bounded number
of messages, one SMTP transaction each. It prints messages accepted per second, and the
server process's CPU time (user + system, all threads, from psutil) per message; then it
checks every message answered 250 is in PostgreSQL.

    python loadtest/smtp_bench.py --messages 2000 --clients 8 [--tls] [--recipients 1] [--attachment-kb 0]

No worker is needed: what is measured is the ingress, up to the commit and the published
prepare task. The project is deleted at the end (with its messages).
"""

from __future__ import annotations

import argparse
import os
import secrets
import smtplib
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from pathlib import Path

import psutil
from harness import servers, use_run_settings
from sqlalchemy import text

from app.config import database_url_from_env
from app.db import session_factory
from app.enums import KeyKind
from app.redis_client import redis_for
from app.runtime import migrate
from app.runtime.embedded import free_port
from app.services import projects

GO_RELAY_CPU_MICROSECONDS = 22  # the Go relay's CPU time per SMTP message, for comparison
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Result:
    messages: int
    seconds: float
    cpu_seconds: float
    stored: int

    @property
    def per_second(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_microseconds(self) -> float:
        return self.cpu_seconds / self.messages * 1e6


def message(recipients: list[str], attachment_kb: int) -> bytes:
    """A typical transactional email: text and html alternatives, optionally a file."""
    mail = EmailMessage()
    mail["From"] = "Billing <billing@app.example>"
    mail["To"] = ", ".join(recipients)
    mail["Subject"] = "Your receipt for order A-17"
    mail["Message-ID"] = f"<{secrets.token_hex(8)}@app.example>"
    mail.set_content("Hello Ada,\n\nthank you for your order A-17.\n\nThe Billing team\n" * 4)
    mail.add_alternative("<p>Hello Ada,</p><p>thank you for your order <b>A-17</b>.</p>" * 4, subtype="html")
    if attachment_kb:
        mail.add_attachment(os.urandom(attachment_kb * 1024), maintype="application", subtype="pdf", filename="r.pdf")
    return mail.as_bytes(policy=SMTP_POLICY)


@contextmanager
def smtp_server(env: dict[str, str], tls: ssl.SSLContext | None, cert_env: dict[str, str]) -> Iterator[tuple]:
    """`tidings smtp` in a process of its own on 127.0.0.1; (process, port)."""
    port = free_port()
    child_env = {
        **os.environ,
        **env,
        "TIDINGS_ADMIN_KEY": secrets.token_urlsafe(24),
        "TIDINGS_SECRET_KEY": secrets.token_urlsafe(24),
        "EMAIL_PROVIDER": os.environ.get("EMAIL_PROVIDER", "log"),
        "TIDINGS_SMTP_HOST": "127.0.0.1",
        "TIDINGS_SMTP_PORT": str(port),
        "TIDINGS_SMTP_TLS_PORT": str(free_port()),
        # Its test key sends faster than a test key may (TEST_RATE_LIMIT_PER_MINUTE): a benchmark, not a rehearsal.
        "TEST_RATE_LIMIT_PER_MINUTE": "none",
        **(cert_env if tls else {"TIDINGS_SMTP_PLAINTEXT_AUTH": "true"}),
    }
    process = subprocess.Popen([sys.executable, "-m", "app.runtime.cli", "smtp"], env=child_env)
    try:
        wait_until_listening(process, port)
        yield process, port
    finally:
        process.terminate()
        if process.wait(timeout=30) != 0:  # SIGTERM is its ordinary stop: anything else is a failure
            raise SystemExit(f"tidings smtp exited with status {process.returncode}")


def wait_until_listening(process: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            smtplib.SMTP("127.0.0.1", port, timeout=2).quit()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tidings smtp did not start on port {port}") from None
            time.sleep(0.1)


def connect(port: int, key: str, tls: ssl.SSLContext | None) -> smtplib.SMTP:
    client = smtplib.SMTP("127.0.0.1", port, timeout=30)
    if tls is not None:
        client.starttls(context=tls)
    client.login("bench", key)
    return client


def run_clients(port: int, key: str, tls: ssl.SSLContext | None, counts: list[int], raw: bytes, to: list[str]) -> None:
    """Each client logs in once and sends its count, one transaction per message; any refusal stops the run."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(counts))

    def client(count: int) -> None:
        try:
            with connect(port, key, tls) as smtp:
                start.wait()
                for _ in range(count):
                    refused = smtp.sendmail("billing@app.example", to, raw)
                    if refused:
                        raise RuntimeError(f"refused: {refused}")
        except BaseException as error:
            errors.append(error)
            start.abort()

    threads = [threading.Thread(target=client, args=(count,)) for count in counts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def bench(messages: int, clients: int, recipients: int, attachment_kb: int, use_tls: bool) -> Result:
    with servers() as env, ExitStack() as stack:
        use_run_settings(env)
        database_url = database_url_from_env(env)
        migrate.upgrade(database_url)
        db = session_factory(database_url)
        project_id = f"smtp-bench-{secrets.token_hex(4)}"
        # Its test key stores more than a test key's day (TEST_DAILY_STORAGE_BYTES): a benchmark, not a rehearsal.
        unbounded = {"daily_storage_bytes": {"test": None}}
        projects.create_project(
            db, {"id": project_id, "name": "SMTP bench", "channels": ["email"], "settings": unbounded}
        )
        stack.callback(projects.delete_project, db, redis_for(env["REDIS_URL"]), project_id)
        key = projects.create_key(db, project_id, "bench", KeyKind.TEST)["key"]
        tls, cert_env = throwaway_tls(stack) if use_tls else (None, {})
        process, port = stack.enter_context(smtp_server(env, tls, cert_env))
        to = [f"user{n}@example.com" for n in range(recipients)]
        raw = message(to, attachment_kb)
        run_clients(port, key, tls, [1] * clients, raw, to)  # warm-up: connections, pools, caches
        counts = [messages // clients + (1 if n < messages % clients else 0) for n in range(clients)]
        server = psutil.Process(process.pid)
        cpu_before = sum(server.cpu_times()[:2])
        started = time.perf_counter()
        run_clients(port, key, tls, counts, raw, to)
        seconds = time.perf_counter() - started
        cpu_seconds = sum(server.cpu_times()[:2]) - cpu_before
        with db() as session:
            stored = session.scalar(text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": project_id})
        return Result(messages, seconds, cpu_seconds, stored - clients * recipients)


def throwaway_tls(stack: ExitStack) -> tuple[ssl.SSLContext, dict[str, str]]:
    """A certificate from a throwaway CA (trustme, a dev dependency) and a client that trusts it."""
    import trustme

    ca = trustme.CA()
    directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="smtp-bench-tls-")))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return client, {"TIDINGS_SMTP_CERT": str(directory / "server.pem")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages to send in the measured run")
    parser.add_argument("--clients", type=int, default=8, help="concurrent smtplib clients")
    parser.add_argument("--recipients", type=int, default=1, help="RCPT TO per message")
    parser.add_argument("--attachment-kb", type=int, default=0, help="attach a file of this size")
    parser.add_argument("--tls", action="store_true", help="STARTTLS (default: plaintext on loopback)")
    args = parser.parse_args(argv)
    if not 1 <= args.clients <= args.messages <= 1_000_000:
        parser.error("need 1 <= clients <= messages <= 1,000,000")
    result = bench(args.messages, args.clients, args.recipients, args.attachment_kb, args.tls)
    transport = "STARTTLS" if args.tls else "plaintext"
    print(
        f"{result.messages} messages ({args.recipients} recipient(s) each, {transport}) "
        f"from {args.clients} smtplib clients in {result.seconds:.2f} s"
    )
    print(f"accepted: {result.per_second:.0f} messages/s")
    print(
        f"server CPU: {result.cpu_seconds:.2f} s user+system = {result.cpu_microseconds:.0f} µs per message "
        f"(the Go relay: {GO_RELAY_CPU_MICROSECONDS} µs)"
    )
    lost = result.messages * args.recipients - result.stored
    print(f"stored: {result.stored} rows for {result.messages * args.recipients} recipients, {lost} lost")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
