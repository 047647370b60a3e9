"""The provider adapters of this worker process.

The deployment's adapter per provider is built once from the settings. A project that
brought its own account gets an adapter of its own, built from its sealed settings and
kept until they change: the claim says when they last changed (`account_version`), so a
cached adapter is reused while that matches and rebuilt, with one query for every stale
project of a batch, when it does not.

Every adapter is told where its provider's status webhooks reach us for its account
(`adapter_env`), so a provider that takes a callback URL per message (Twilio) reports each
message, our id in the URL, to the URL that verifies that account's signature.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import ClassVar, Self

from app.config import Settings, current_settings
from app.db import session_scope
from app.delivery import store
from app.vault import SealBroken, unseal
from providers import registry
from providers.base import STATUS_CALLBACK_URL, ConfigurationError, Outbound, Provider, SendResult

# Projects' adapters kept per process; the oldest go first beyond this many.
MAX_OWN_ACCOUNTS = 1024


@cache
def provider_instance(name: str) -> Provider:
    """One adapter per provider and process, so its HTTP connections are reused."""
    config = current_settings()
    return registry.build(name, adapter_env(config, name, config.environ))


def adapter_env(
    config: Settings, provider: str, env: Mapping[str, str], project_id: str | None = None
) -> dict[str, str]:
    """The settings an adapter is built from, with the URL of the status webhooks of its
    account: `/v1/inbound/{provider}`, or `/{provider}/{project}` for a project's own.

    Only when TIDINGS_PUBLIC_URL is set: a URL the provider cannot reach would replace a
    status callback the operator configured at the provider.
    """
    env = {name: value for name, value in env.items() if name != STATUS_CALLBACK_URL}
    if config.external_url:
        own = f"/{project_id}" if project_id else ""
        env[STATUS_CALLBACK_URL] = f"{config.external_url}/v1/inbound/{provider}{own}"
    return env


@dataclass(frozen=True)
class Account:
    """Whose account a group of claimed messages goes out through.

    `scope` names what a pause applies to: the provider for the deployment's account, the
    provider and project for a project's own (and for every project of a provider whose
    endpoints are its tenants'), so one tenant's revoked key, exhausted quota or simulated
    rate limit never pauses everyone else.
    """

    scope: str
    adapter: Provider

    @property
    def own(self) -> bool:
        return "@" in self.scope


def own_scope(provider: str, project_id: str) -> str:
    return f"{provider}@{project_id}"


class UnusableAccount:
    """Stands in for a project's account whose settings cannot be used (a changed secret
    key, a setting the deployment no longer accepts): every send is a configuration error,
    which pauses that account alone until someone fixes it."""

    name: ClassVar[str] = "unusable"
    channels: ClassVar[frozenset[str]] = frozenset()
    max_batch: ClassVar[int] = 500
    idempotent: bool = False
    account_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, problem: str):
        self.problem = problem

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Never built from settings, as it stands for settings that could not be used."""
        raise ValueError("an unusable account is made from its problem, not from settings")

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        raise ConfigurationError(self.problem)


_own: dict[tuple[str, str], tuple[datetime, Provider]] = {}
_lock = threading.Lock()


def accounts_for(
    config: Settings, provider: str, claimed: Sequence[store.Claimed]
) -> list[tuple[Account, list[store.Claimed]]]:
    """Group a claimed batch by account: the deployment's, and each project's own where it has one.

    A provider whose every message goes to an endpoint its tenant chose (the simulator, the
    webhook channel) is the deployment's account in each project's own scope: what one
    project's recipients answer (the simulator's `rate-limited`) pauses that project alone.
    """
    per_project = registry.endpoint_per_message(provider)
    groups: dict[str | None, list[store.Claimed]] = defaultdict(list)  # by project; None: the deployment's scope
    versions: dict[str, datetime] = {}
    for row in claimed:
        if row.account_version is not None:
            versions[row.project_id] = row.account_version
        groups[row.project_id if row.account_version is not None or per_project else None].append(row)
    adapters = own_adapters(config, provider, versions)
    return [
        (Account(provider, provider_instance(provider)), rows)
        if project is None
        else (Account(own_scope(provider, project), adapters.get(project) or provider_instance(provider)), rows)
        for project, rows in groups.items()
    ]


def own_adapters(config: Settings, provider: str, versions: dict[str, datetime]) -> dict[str, Provider]:
    """Each project's adapter for `provider`, rebuilt where its settings changed since it was cached."""
    with _lock:
        cached = {p: _own.get((provider, p)) for p in versions}
    current = {p: entry for p, entry in cached.items() if entry is not None and entry[0] == versions[p]}
    stale = [p for p in cached if p not in current]
    if stale:
        with session_scope(config.database_url) as session:
            rows = store.project_accounts(session, provider, stale)
        built = {
            row.project_id: (row.updated_at, build_own(config, provider, row.project_id, row.sealed)) for row in rows
        }
        # Removed since the claim: the project's messages go out as the deployment's.
        built.update({p: (versions[p], provider_instance(provider)) for p in stale if p not in built})
        with _lock:
            _own.update({(provider, p): entry for p, entry in built.items()})
            while len(_own) > MAX_OWN_ACCOUNTS:
                del _own[next(iter(_own))]
        current.update(built)
    return {p: entry[1] for p, entry in current.items()}


def own_env(config: Settings, provider: str, sealed: str) -> dict[str, str]:
    """The settings a project's own account is built from: the deployment's, its account
    settings replaced by the project's. SealBroken when this secret key cannot read them."""
    return registry.with_account(config.environ, provider, unseal(config.secret_key, sealed))


def build_own(config: Settings, provider: str, project_id: str, sealed: str) -> Provider:
    try:
        return registry.build(provider, adapter_env(config, provider, own_env(config, provider, sealed), project_id))
    except (SealBroken, ValueError) as error:
        return UnusableAccount(f"the project's own {provider} account cannot be used: {error}")


def clear() -> None:
    """Forget every adapter (tests change settings between cases)."""
    provider_instance.cache_clear()
    with _lock:
        _own.clear()
