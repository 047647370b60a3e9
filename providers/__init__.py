"""Provider adapters: each maps one provider's API and error codes to three outcomes.

Nothing above this package knows a provider's name; it imports nothing of ours but its own
base module, so an adapter can be read and tested on its own.
"""
