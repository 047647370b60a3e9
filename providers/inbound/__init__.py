"""Receivers for providers' status webhooks (delivered, bounced, complained, …).

Each module checks its provider's signature scheme and maps the provider's event names onto
one vocabulary (`base.Kind`, with an `unknown` fallback), keeping the raw payload; what the
events then do to messages and suppressions is decided above this package, which, like the
adapters, knows nothing of ours.
"""
