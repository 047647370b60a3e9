"""Settings, read once from the environment.

Everything a process needs to know about its surroundings lives in one frozen object, so a
missing or malformed value fails at start-up with one line instead of deep inside a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from app.enums import Channel
from providers import registry


class ConfigError(Exception):
    """A setting is missing or malformed; the message names it and is shown as is."""


DELIVERING_CHANNELS = (Channel.EMAIL, Channel.SMS, Channel.PUSH, Channel.WEBHOOK)

# The longest wait that rides on a Celery countdown; longer ones are parked in PostgreSQL.
# Every countdown must stay below the broker's visibility timeout, or Redis re-delivers it.
MAX_COUNTDOWN = 15 * 60


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    broker_url: str
    admin_key: str
    secret_key: str
    providers: Mapping[Channel, str]
    max_attempts: Mapping[Channel, int] = field(default_factory=dict)
    # Messages per second each provider may take, shared by every worker; None: no limit.
    rates: Mapping[str, float | None] = field(default_factory=dict)
    retry_delay_scale: float = 1.0
    claim_timeout: int = 600
    stalled_after: int = 60
    sweep_interval: float = 30.0
    host: str = "127.0.0.1"
    port: int = 8000
    flower_port: int = 5555
    # user:password[,user:password]; Flower reads it from FLOWER_BASIC_AUTH itself.
    flower_basic_auth: str | None = None
    var_dir: Path = Path("var")
    visibility_timeout: int = 3600
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        redis_url = _url(env, "REDIS_URL", ("redis", "rediss", "unix"))
        providers = {channel: _provider(env, channel) for channel in DELIVERING_CHANNELS}
        default_attempts = _int(env, "MAX_ATTEMPTS", 5, minimum=1)
        return cls(
            database_url=_database_url(env),
            redis_url=redis_url,
            broker_url=_url(env, "CELERY_BROKER_URL", ("redis", "rediss", "amqp", "amqps"), redis_url),
            admin_key=_secret(env, "TIDINGS_ADMIN_KEY"),
            secret_key=_secret(env, "TIDINGS_SECRET_KEY"),
            providers=providers,
            max_attempts={
                channel: _int(env, f"{channel.upper()}_MAX_ATTEMPTS", default_attempts, minimum=1)
                for channel in DELIVERING_CHANNELS
            },
            rates=_rates(env, providers),
            retry_delay_scale=_float(env, "RETRY_DELAY_SCALE", 1.0, minimum=0.001),
            claim_timeout=_int(env, "CLAIM_TIMEOUT_SECONDS", 600, minimum=1),
            stalled_after=_int(env, "STALLED_AFTER_SECONDS", 60, minimum=1),
            sweep_interval=_float(env, "SWEEP_INTERVAL_SECONDS", 30.0, minimum=0.1),
            host=env.get("TIDINGS_HOST", "127.0.0.1"),
            port=_int(env, "TIDINGS_PORT", 8000, minimum=1, maximum=65535),
            flower_port=_int(env, "FLOWER_PORT", 5555, minimum=1, maximum=65535),
            flower_basic_auth=_basic_auth(env, "FLOWER_BASIC_AUTH"),
            var_dir=Path(env.get("TIDINGS_VAR_DIR", "var")),
            visibility_timeout=_int(env, "CELERY_VISIBILITY_TIMEOUT", 3600, minimum=MAX_COUNTDOWN + 60),
            environ=env,
        )


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


def _float(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number; got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}; got {value}")
    return value


def _rates(env: Mapping[str, str], providers: Mapping[Channel, str]) -> dict[str, float | None]:
    """Each provider's pace: `<PROVIDER>_RATE_PER_SEC`, else `<CHANNEL>_RATE_PER_SEC` of its channel."""
    rates: dict[str, float | None] = {}
    for channel, provider in providers.items():
        for name in (f"{provider.upper()}_RATE_PER_SEC", f"{channel.upper()}_RATE_PER_SEC"):
            if env.get(name, "").strip():
                rates.setdefault(provider, _float(env, name, 0.0, minimum=0.01))
                break
    return rates


def _provider(env: Mapping[str, str], channel: Channel) -> str:
    name = f"{channel.upper()}_PROVIDER"
    value = env.get(name, "log").strip() or "log"
    fitting = [p for p in registry.names() if channel.value in registry.PROVIDERS[p].channels]
    if value not in fitting:
        raise ConfigError(f"{name} must be one of {', '.join(fitting)}; got {value!r}")
    try:
        registry.build(value, env)
    except ValueError as error:
        raise ConfigError(f"{name}={value}: {error}") from None
    return value
