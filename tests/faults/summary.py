"""Every fault test's line in the run's summary, from whichever pytest-xdist worker ran it.

CI's log says what each fault met and how each message ended, passed or not. Under xdist
the tests run in worker processes, so each worker hands its lines to the controller at its
end, and the controller prints them all. (A plugin of tests/conftest.py: the controller
never loads tests/faults/conftest.py, as it collects no tests.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

FAULT_LINES: list[str] = []


def report_fault(fault: str, at_injection: Mapping[str, object], outcomes: Mapping[str, object]) -> str:
    """The one line per fault test the closing note quotes; kept for the run's summary, and returned."""
    line = f"FAULT {fault}: at injection {dict(at_injection)}; outcomes {dict(outcomes)}"
    FAULT_LINES.append(line)
    return line


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fault_lines"] = FAULT_LINES


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    FAULT_LINES.extend(getattr(node, "workeroutput", {}).get("fault_lines", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FAULT_LINES:
        terminalreporter.section("fault tests: state at injection, outcomes by the ledger")
        for line in FAULT_LINES:
            terminalreporter.write_line(line)
