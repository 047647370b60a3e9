"""RabbitMQ as the broker: the same queues and lanes carry messages to `sent`.

Runs where a RabbitMQ answers on 127.0.0.1:5672 (CI machines have one); Redis still holds
pauses, paces and counters.
"""

from __future__ import annotations

import socket

import pytest

from tests.faults.stack import assert_ledger_agrees, insert_accepted, wait_until_terminal

BROKER = "amqp://guest:guest@127.0.0.1:5672//"


def rabbitmq_answers() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(not rabbitmq_answers(), reason="no RabbitMQ on 127.0.0.1:5672")
def test_messages_reach_sent_over_rabbitmq(make_stack, provider, engine, fault_project):
    stack = make_stack(CELERY_BROKER_URL=BROKER)
    bulk = insert_accepted(engine, fault_project, 300, priority="bulk")
    urgent = insert_accepted(engine, fault_project, 20, priority="transactional")
    stack.start_worker()
    stack.start_beat()
    stack.publish_prepare(bulk, priority="bulk")
    stack.publish_prepare(urgent, priority="transactional")
    seen = wait_until_terminal(engine, bulk + urgent, timeout=60)
    assert_ledger_agrees(seen, provider, idempotent=True)
    assert set(seen.values()) == {"sent"}
