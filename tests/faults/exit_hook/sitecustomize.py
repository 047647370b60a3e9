"""A worker process that ends with os._exit() mid-batch, put on PYTHONPATH by a fault test.

With FAULT_EXIT_AFTER_CALLS=n, the process exits the moment the answer to its n-th
provider call arrives, before Tidings sees it: the provider has delivered, the claims are
`sending`, and nothing runs after (no finally, no atexit, no shutdown signal), as when a
native library aborts or a task calls os._exit(). The fault is injected in the HTTP
library every provider client uses, not in Tidings, which has no hook for it.
"""

from __future__ import annotations

import os
import threading

import requests

EXIT_CODE = 70  # EX_SOFTWARE
_after = int(os.environ.get("FAULT_EXIT_AFTER_CALLS", "0"))

if _after:
    _send = requests.Session.send
    _lock = threading.Lock()
    _calls = 0

    def _send_then_exit(self: requests.Session, request: requests.PreparedRequest, **options: object) -> object:
        global _calls
        response = _send(self, request, **options)
        if (request.url or "").endswith("/messages"):
            with _lock:
                _calls += 1
                if _calls >= _after:
                    os._exit(EXIT_CODE)
        return response

    requests.Session.send = _send_then_exit  # type: ignore[method-assign]
