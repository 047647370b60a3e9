"""The simulated recipients, as `POST /v1/messages` describes them in the OpenAPI spec.

Kept beside the routes rather than in a docstring because a table's rows are longer than a
line of code may be; README.md ("Simulated recipients") says the same at more length, and
tests/tasks/test_simulated_recipients.py checks both list every address.
"""

from __future__ import annotations

DESCRIPTION = """\
**Simulated recipients.** With a test key or a live key, these addresses walk the whole pipeline \
(retries on the real ladder, suppressions, status webhooks, opens and clicks) and never reach a provider: \
the `simulator` provider answers them as a real one would. Email takes `+anything` before the `@`, push \
tokens `:anything` after the name and webhook URLs a path after it, for more addresses of a scenario; \
SMS numbers are NANP's fictional 555-0100..0199 block in any area code (`NXX`), the last digit free \
(`+12025550100`).

| scenario | email | SMS | push token | webhook URL | status | timeline after `accepted`, `ready` |
|---|---|---|---|---|---|---|
| delivered | `delivered@simulator.tidings.invalid` | `+1 NXX 555-010x` | `simulator:delivered` | \
`https://simulator.tidings.invalid/delivered` | `delivered` | sending, sent, delivered |
| temporary failure | `temporary-failure@simulator.tidings.invalid` | `+1 NXX 555-011x` | \
`simulator:temporary-failure` | `https://simulator.tidings.invalid/temporary-failure` | `dead` | \
retrying (each attempt but the last, on the retry ladder), sending, dead |
| permanent failure | `permanent-failure@simulator.tidings.invalid` | `+1 NXX 555-012x` | \
`simulator:permanent-failure` | `https://simulator.tidings.invalid/permanent-failure` | `failed` | \
sending, failed; the address is suppressed (`bounce`) |
| rate limited | `rate-limited@simulator.tidings.invalid` | `+1 NXX 555-013x` | `simulator:rate-limited` | \
`https://simulator.tidings.invalid/rate-limited` | `delivered` | a 429 pauses the simulator for 1 s and gives the \
attempt back; then sending, sent, delivered |
| bounced | `bounced@simulator.tidings.invalid` | | | | `bounced` | sending, sent, bounced; suppressed (`bounce`) |
| complained | `complained@simulator.tidings.invalid` | | | | `complained` | \
sending, sent, delivered, complained; suppressed (`complaint`) |
| opened | `opened@simulator.tidings.invalid` | | | | `delivered` | sending, sent, delivered, opened |
| clicked | `clicked@simulator.tidings.invalid` | | | | `delivered` | \
sending, sent, delivered, opened, clicked (`https://simulator.tidings.invalid/clicked`) |

For example, `{"channel": "email", "to": {"email": "permanent-failure+run-1@simulator.tidings.invalid"}, \
"content": {"subject": "Your order", "text": "It is on its way."}}` ends `failed` and suppresses the address. \
Status webhooks fire for every step after `sending`. Any other address of the namespace fails permanently \
with the reason, unsuppressed.
"""
