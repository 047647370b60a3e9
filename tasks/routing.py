"""Which provider a channel's messages go to, given each provider's circuit breaker.

Pure functions over the chains (configuration) and the circuits (app/delivery/breaker.py), so the
rules read in one place: prepare sends new messages to the first provider of the chain whose
circuit is not open (a half-open one gets them so that its probe has something to send);
deliver hands messages an open circuit refuses to the first *closed* one, so two recovering
providers never pass the same messages back and forth. Before any of that, a simulated
recipient goes to the simulator and a test key's message to `log`: neither ever reaches
a provider of a chain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.delivery.breaker import CLOSED, Circuit
from app.enums import Channel, CircuitState
from providers import simulator


def choose(chains: Mapping[Channel, Sequence[str]], circuits: Mapping[str, Circuit]) -> dict[Channel, str]:
    """Each channel's provider for new messages; the primary when every circuit is open, so
    messages go out (and are retried) as they would without breakers."""
    return {
        channel: next(
            (p for p in chain if circuits.get(p, CLOSED).state is not CircuitState.OPEN),
            chain[0],
        )
        for channel, chain in chains.items()
    }


def provider_for(channel: Channel, address: str, test: bool, routes: Mapping[Channel, str]) -> str:
    """A message's provider: the simulator for its recipients whatever the key (so a live
    key rehearses too), `log` for a test key's other messages, else its channel's route."""
    if simulator.simulates(channel, address):
        return simulator.NAME
    return "log" if test else routes[channel]


def fallible(chains: Mapping[Channel, Sequence[str]]) -> set[str]:
    """The providers whose circuits can change a route: those of chains with somewhere else to go."""
    return {provider for chain in chains.values() if len(chain) > 1 for provider in chain}


def handover_targets(
    chains: Mapping[Channel, Sequence[str]], provider: str, circuits: Mapping[str, Circuit]
) -> dict[Channel, str]:
    """For each channel `provider` serves, the closed provider its refused messages move to."""
    targets = {}
    for channel, chain in chains.items():
        if provider not in chain:
            continue
        target = next(
            (p for p in chain if p != provider and circuits.get(p, CLOSED).state is CircuitState.CLOSED), None
        )
        if target is not None:
            targets[channel] = target
    return targets
