"""The Redis transport's one change: a channel outliving its connection fails as a lost connection."""

from __future__ import annotations

import pytest
from kombu import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from app.delivery.redis_transport import TRANSPORT


@pytest.mark.parametrize("after", ["collect", "collect and close"])
def test_an_ack_on_a_channel_of_a_collected_connection_is_a_connection_error(server_urls, after):
    """What Celery does on a lost broker (collect, then close) and a late ack after it: stock kombu
    raises AttributeError there ('NoneType' object has no attribute …), which ends the worker."""
    connection = Connection(server_urls[1], transport=TRANSPORT)
    channel = connection.default_channel
    connection.collect()
    if after == "collect and close":
        connection.close()
    with pytest.raises(RedisConnectionError):
        channel.qos.ack("a-delivery-tag")
