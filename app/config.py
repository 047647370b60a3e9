"""Settings, read once from the environment.

Everything a process needs to know about its surroundings lives in one frozen object, so a
missing or malformed value fails at start-up with one line instead of deep inside a request.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from app.enums import Channel
from providers import registry
from providers.inbound import registry as inbound
from providers.webhook import Network, networks


class ConfigError(Exception):
    """A setting is missing or malformed; the message names it and is shown as is."""


DELIVERING_CHANNELS = (Channel.EMAIL, Channel.SMS, Channel.PUSH, Channel.WEBHOOK)

# The longest wait that rides on a Celery countdown; longer ones are parked in PostgreSQL.
# Every countdown must stay below the broker's visibility timeout, or Redis re-delivers it.
MAX_COUNTDOWN = 15 * 60
# Beyond this a waiting send would be late by any measure; the default is a few milliseconds.
MAX_PREPARE_LINGER_MS = 10_000
# The largest request body a route takes (bulk routes, sends with files), so the least a budget of them may be.
LARGE_BODY_MIB = 16
DEFAULT_DAILY_QUOTAS = {Channel.EMAIL: 250_000}
# Bytes of words and files a project's sends may store a day: its live keys', and its test keys'
# (which reach no provider, so need only what a rehearsal does).
DEFAULT_DAILY_STORAGE_BYTES = 10 * 2**30
DEFAULT_TEST_DAILY_STORAGE_BYTES = 20 * 2**20
# Requests a minute a project's test keys may make unless the project sets its own limit:
# Stripe's test mode allows 25 a second. A test key needs no more to try everything, and a
# new user's key can no longer keep both cores of a small box busy with previews and batches.
DEFAULT_TEST_RATE_LIMIT_PER_MINUTE = 1500


@dataclass(frozen=True)
class BreakerPolicy:
    """When a provider's circuit opens, and for how long (app/delivery/breaker.py).

    It opens after `failures` batches in a row failed transiently, or when at least
    `error_rate` of the messages sent in the last `window` seconds did (once there were
    `min_volume` of them); after `cooldown` seconds one probe batch may try it again.
    """

    failures: int = 5
    error_rate: float = 0.5
    min_volume: int = 20
    window: float = 60.0
    cooldown: float = 30.0


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    broker_url: str
    admin_key: str
    secret_key: str
    # Each channel's providers in failover order: the first whose circuit is closed is used.
    chains: Mapping[Channel, tuple[str, ...]]
    # METRICS_TOKEN: when set, /metrics answers only `Authorization: Bearer <it>`; unset, it
    # answers only this machine, and only while the API listens on loopback alone (`loopback_only`).
    metrics_token: str | None = None
    max_attempts: Mapping[Channel, int] = field(default_factory=dict)
    # Messages per second each provider may take, shared by every worker; None: no limit.
    rates: Mapping[str, float | None] = field(default_factory=dict)
    retry_delay_scale: float = 1.0
    claim_timeout: int = 600
    # Seconds between a worker process's heartbeats, and the silence after which the sweeper
    # takes it for dead and settles its claims (app/delivery/heartbeats.py).
    worker_heartbeat: float = 1.0
    worker_dead_after: float = 10.0
    stalled_after: int = 60
    sweep_interval: float = 10.0
    # How long a cold shutdown (a second SIGTERM, SIGQUIT) lets running tasks finish first.
    worker_soft_shutdown: float = 30.0
    host: str = "127.0.0.1"
    port: int = 8000
    flower_port: int = 5555
    # user:password[,user:password]; Flower reads it from FLOWER_BASIC_AUTH itself.
    flower_basic_auth: str | None = None
    var_dir: Path = Path("var")
    visibility_timeout: int = 3600
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    # TIDINGS_PUBLIC_URL as set (None: the request's own URL): what the Twilio signature covers.
    external_url: str | None = None
    # Where browsers and mail clients reach this API: tracking, click and unsubscribe links.
    public_url: str = "http://127.0.0.1:8000"
    # Outbound webhooks: networks plain http and private addresses may reach, and the timeout.
    webhook_allowed_networks: tuple[Network, ...] = ()
    webhook_timeout: float = 10.0
    # Seconds between keep-alive comments on an idle event stream; a stream's key is checked as often.
    stream_heartbeat: float = 15.0
    api_threads: int = 32
    # MiB of request bodies over 1 MiB an API process reads at once (app/api/body_budget.py).
    large_body_budget_mib: int = 32
    # Of an API process's streams (api_threads - 4), what one project, and one inbox token, may hold.
    streams_per_project: int = 8
    streams_per_inbox_token: int = 2
    # Seconds an accepted single send may wait for others to share its prepare task
    # (app/delivery/coalescer.py); a send after a quiet spell does not wait at all.
    prepare_linger: float = 0.05
    # Messages a project may have accepted per channel and day, unless its settings say
    # otherwise (app/access/quota.py); a channel left out has no quota.
    daily_quotas: Mapping[Channel, int] = field(default_factory=dict)
    # Messages a minute a project's sends may carry, unless its settings say otherwise; None: no limit.
    messages_per_min: int | None = None
    # Bytes of words and files a project's sends with live keys, and with test keys, may store
    # per day unless its settings say otherwise (settings.daily_storage_bytes); None: no bound.
    daily_storage_bytes: int | None = DEFAULT_DAILY_STORAGE_BYTES
    test_daily_storage_bytes: int | None = DEFAULT_TEST_DAILY_STORAGE_BYTES
    # Transactional messages a minute a project's sends may carry, unless its settings say
    # otherwise; those above it are served as bulk (app/services/intake.py). None: no limit.
    transactional_per_min: int | None = None
    # Requests a minute a project's test keys may make, unless the project has its own
    # rate_limit_per_min (which then applies to every key); None: no limit.
    test_rate_limit_per_min: int | None = DEFAULT_TEST_RATE_LIMIT_PER_MINUTE
    # The console's session cookie: sent over HTTPS only (CONSOLE_SECURE_COOKIE; default: when
    # TIDINGS_PUBLIC_URL is https), and how long a sign-in lasts.
    console_secure_cookie: bool = False
    console_session_hours: int = 8
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def loopback_only(self) -> bool:
        """Whether the API listens on this machine's loopback alone (TIDINGS_HOST)."""
        return is_loopback(self.host)

    @property
    def providers(self) -> dict[Channel, str]:
        """The primary provider of each channel."""
        return {channel: chain[0] for channel, chain in self.chains.items()}

    @property
    def chained_providers(self) -> set[str]:
        """Every provider of every channel's chain: traffic may move to any of them."""
        return {provider for chain in self.chains.values() for provider in chain}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        redis_url = _url(env, "REDIS_URL", ("redis", "rediss", "unix"))
        chains = {channel: _chain(env, channel) for channel in DELIVERING_CHANNELS}
        _check_receivers(env)
        default_attempts = _int(env, "MAX_ATTEMPTS", 5, minimum=1)
        heartbeat, dead_after = _worker_liveness(env)
        return cls(
            database_url=_database_url(env),
            redis_url=redis_url,
            broker_url=_url(env, "CELERY_BROKER_URL", ("redis", "rediss", "amqp", "amqps"), redis_url),
            admin_key=_secret(env, "TIDINGS_ADMIN_KEY"),
            secret_key=_secret(env, "TIDINGS_SECRET_KEY"),
            chains=chains,
            metrics_token=_secret(env, "METRICS_TOKEN") if env.get("METRICS_TOKEN", "").strip() else None,
            max_attempts={
                channel: _int(env, f"{channel.upper()}_MAX_ATTEMPTS", default_attempts, minimum=1)
                for channel in DELIVERING_CHANNELS
            },
            rates=_rates(env, chains),
            retry_delay_scale=_float(env, "RETRY_DELAY_SCALE", 1.0, minimum=0.001),
            claim_timeout=_int(env, "CLAIM_TIMEOUT_SECONDS", 600, minimum=1),
            stalled_after=_int(env, "STALLED_AFTER_SECONDS", 60, minimum=1),
            worker_heartbeat=heartbeat,
            worker_dead_after=dead_after,
            sweep_interval=_float(env, "SWEEP_INTERVAL_SECONDS", 10.0, minimum=0.1),
            worker_soft_shutdown=_float(env, "WORKER_SOFT_SHUTDOWN_SECONDS", 30.0, minimum=0.0),
            host=env.get("TIDINGS_HOST", "127.0.0.1"),
            port=_int(env, "TIDINGS_PORT", 8000, minimum=1, maximum=65535),
            flower_port=_int(env, "FLOWER_PORT", 5555, minimum=1, maximum=65535),
            flower_basic_auth=_basic_auth(env, "FLOWER_BASIC_AUTH"),
            var_dir=Path(env.get("TIDINGS_VAR_DIR", "var")),
            visibility_timeout=_int(env, "CELERY_VISIBILITY_TIMEOUT", 3600, minimum=MAX_COUNTDOWN + 60),
            breaker=BreakerPolicy(
                failures=_int(env, "BREAKER_FAILURES", 5, minimum=1),
                error_rate=_float(env, "BREAKER_ERROR_RATE", 0.5, minimum=0.01, maximum=1.0),
                min_volume=_int(env, "BREAKER_MIN_VOLUME", 20, minimum=1),
                window=_float(env, "BREAKER_WINDOW_SECONDS", 60.0, minimum=1.0),
                cooldown=_float(env, "BREAKER_COOLDOWN_SECONDS", 30.0, minimum=0.1),
            ),
            external_url=_optional_url(env, "TIDINGS_PUBLIC_URL", ("http", "https")),
            public_url=_public_url(env),
            webhook_allowed_networks=_networks(env),
            webhook_timeout=_float(env, "WEBHOOK_TIMEOUT", 10.0, minimum=0.1),
            stream_heartbeat=_float(env, "STREAM_HEARTBEAT_SECONDS", 15.0, minimum=0.05),
            api_threads=_int(env, "TIDINGS_API_THREADS", 32, minimum=2),
            large_body_budget_mib=_int(env, "LARGE_BODY_BUDGET_MIB", 32, minimum=LARGE_BODY_MIB),
            streams_per_project=_int(env, "STREAMS_PER_PROJECT", 8, minimum=1),
            streams_per_inbox_token=_int(env, "STREAMS_PER_INBOX_TOKEN", 2, minimum=1),
            prepare_linger=_int(env, "PREPARE_LINGER_MS", 50, minimum=0, maximum=MAX_PREPARE_LINGER_MS) / 1000,
            daily_quotas=_daily_quotas(env),
            messages_per_min=_optional_int(env, "RATE_LIMIT_MESSAGES_PER_MINUTE", None, minimum=1),
            daily_storage_bytes=_optional_int(env, "DAILY_STORAGE_BYTES", DEFAULT_DAILY_STORAGE_BYTES, minimum=0),
            test_daily_storage_bytes=_optional_int(
                env, "TEST_DAILY_STORAGE_BYTES", DEFAULT_TEST_DAILY_STORAGE_BYTES, minimum=0
            ),
            transactional_per_min=_optional_int(env, "TRANSACTIONAL_PER_MINUTE", None, minimum=1),
            test_rate_limit_per_min=_optional_int(
                env, "TEST_RATE_LIMIT_PER_MINUTE", DEFAULT_TEST_RATE_LIMIT_PER_MINUTE, minimum=1
            ),
            console_secure_cookie=_flag(env, "CONSOLE_SECURE_COOKIE", _public_url(env).startswith("https:")),
            console_session_hours=_int(env, "CONSOLE_SESSION_HOURS", 8, minimum=1, maximum=24 * 30),
            environ=env,
        )


_current: Settings | None = None


def use_settings(settings: Settings) -> Settings:
    """Make `settings` this process's own. Each entry point (API, worker, SMTP, CLI) calls it
    once, through the broker's configure, before any code asks for current_settings()."""
    global _current
    _current = settings
    return settings


def current_settings() -> Settings:
    """The settings this process runs with, read from the environment if no entry point chose them."""
    return _current if _current is not None else use_settings(Settings.from_env())


def is_loopback(host: str | None) -> bool:
    """Whether `host` (an address or `localhost`) is this machine's loopback: 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def _public_url(env: Mapping[str, str]) -> str:
    host, port = env.get("TIDINGS_HOST", "127.0.0.1"), env.get("TIDINGS_PORT", "8000")
    value = _url(env, "TIDINGS_PUBLIC_URL", ("http", "https"), f"http://{host}:{port}")
    return value.rstrip("/")


def _networks(env: Mapping[str, str]) -> tuple[Network, ...]:
    try:
        return tuple(networks(env.get("WEBHOOK_ALLOWED_NETWORKS", "")))
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is not set")
    return value


def _url(env: Mapping[str, str], name: str, schemes: tuple[str, ...], default: str | None = None) -> str:
    value = env.get(name, "").strip() or default
    if value is None:
        raise ConfigError(f"{name} is not set")
    scheme = urlsplit(value).scheme
    if scheme not in schemes:
        expected = ", ".join(f"{s}://" for s in schemes)
        raise ConfigError(f"{name} must start with one of {expected}; got {value!r}")
    return value


def _optional_url(env: Mapping[str, str], name: str, schemes: tuple[str, ...]) -> str | None:
    return _url(env, name, schemes).rstrip("/") if env.get(name, "").strip() else None


def database_url_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Only the database URL: what migrations need, without the rest of the settings."""
    return _database_url(os.environ if environ is None else environ)


def _database_url(env: Mapping[str, str]) -> str:
    value = _url(env, "DATABASE_URL", ("postgresql", "postgres", "postgresql+psycopg2"))
    scheme, rest = value.split("://", 1)
    return f"postgresql+psycopg2://{rest}" if scheme != "postgresql+psycopg2" else value


def _secret(env: Mapping[str, str], name: str) -> str:
    value = _require(env, name)
    if len(value) < 16:
        raise ConfigError(f"{name} must be at least 16 characters long")
    return value


def _basic_auth(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    for pair in value.split(","):
        user, _, password = pair.partition(":")
        if not user or len(password) < 8:
            raise ConfigError(f"{name} must be user:password pairs, comma-separated, passwords of 8 characters or more")
    return value


def _int(env: Mapping[str, str], name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number; got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise ConfigError(f"{name} must be {bounds}; got {value}")
    return value


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in ("1", "true", "yes", "0", "false", "no"):
        raise ConfigError(f"{name} must be true or false; got {raw!r}")
    return raw in ("1", "true", "yes")


def _optional_int(env: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    """A whole number, or `none` for no limit at all."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "none":
        return None
    return _int(env, name, minimum, minimum)


def _daily_quotas(env: Mapping[str, str]) -> dict[Channel, int]:
    """`EMAIL_DAILY_QUOTA=250000`: each channel's default quota; `none` (and, but for email, unset) is none.

    Email's default is GOV.UK Notify's, so a runaway loop cannot spend a month's provider
    budget overnight; the other channels differ too much in cost to guess one.
    """
    quotas = {
        channel: _optional_int(env, f"{channel.upper()}_DAILY_QUOTA", DEFAULT_DAILY_QUOTAS.get(channel), minimum=0)
        for channel in Channel
    }
    return {channel: quota for channel, quota in quotas.items() if quota is not None}


def _float(env: Mapping[str, str], name: str, default: float, minimum: float, maximum: float | None = None) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number; got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}; got {value}")
    return value


def _worker_liveness(env: Mapping[str, str]) -> tuple[float, float]:
    """Seconds between heartbeats, and the silence that means a worker died: several beats
    long, so one slow beat never passes a live worker's claims to the sweeper."""
    heartbeat = _float(env, "WORKER_HEARTBEAT_SECONDS", 1.0, minimum=0.05)
    dead_after = _float(env, "WORKER_DEAD_AFTER_SECONDS", 10.0, minimum=3 * heartbeat)
    return heartbeat, dead_after


def _rates(env: Mapping[str, str], chains: Mapping[Channel, tuple[str, ...]]) -> dict[str, float | None]:
    """Each provider's pace: `<PROVIDER>_RATE_PER_SEC`, else `<CHANNEL>_RATE_PER_SEC` of its channel."""
    rates: dict[str, float | None] = {}
    for channel, chain in chains.items():
        for provider in chain:
            for name in (f"{provider.upper()}_RATE_PER_SEC", f"{channel.upper()}_RATE_PER_SEC"):
                if env.get(name, "").strip():
                    rates.setdefault(provider, _float(env, name, 0.0, minimum=0.01))
                    break
    return rates


def _chain(env: Mapping[str, str], channel: Channel) -> tuple[str, ...]:
    """`EMAIL_PROVIDER=postmark,ses`: the channel's providers in failover order, each built once
    here so a missing setting stops start-up rather than the first send."""
    name = f"{channel.upper()}_PROVIDER"
    raw = env.get(name, "log").strip() or "log"
    chain = tuple(value.strip() for value in raw.split(","))
    if "" in chain or len(set(chain)) != len(chain):
        raise ConfigError(f"{name} must list providers separated by commas, each once; got {raw!r}")
    fitting = [p for p in registry.names() if channel.value in registry.PROVIDERS[p].channels and registry.chainable(p)]
    for value in chain:
        if value not in fitting:
            raise ConfigError(f"{name} must be one of {', '.join(fitting)}; got {value!r}")
        try:
            registry.build(value, env)
        except ValueError as error:
            raise ConfigError(f"{name}={value}: {error}") from None
    return chain


def _check_receivers(env: Mapping[str, str]) -> None:
    """A malformed status webhook setting (a secret without whsec_, a key that is no key)
    stops start-up, rather than every webhook of that provider being refused later."""
    for name in inbound.RECEIVERS:
        try:
            inbound.build(name, env)
        except ValueError as error:
            raise ConfigError(f"{name} status webhooks: {error}") from None
