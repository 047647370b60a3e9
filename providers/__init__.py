"""Provider adapters: each maps one provider's API and error codes to our outcomes
(sent, permanent, transient, rate limited, configuration) and follow-ups (suppress,
invalid token); see `providers.base`.

Nothing above this package knows a provider's name; it imports nothing of ours but its own
base module, so an adapter can be read and tested on its own.
"""
