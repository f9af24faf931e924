"""The QUE answer's JSON."""

from __future__ import annotations

import base64
import json

from router.server.core.commands import queue_info
from router.server.core.subscriptions import Sub
from store.interfaces import Message, QueueRecord


def record(sender_key: bytes | None = None) -> QueueRecord:
    return QueueRecord(b"r" * 24, b"s" * 24, b"k" * 44, b"x" * 32, sender_key, True)


def test_an_idle_queue_reports_sender_notifier_and_size_only():
    info = json.loads(queue_info(record(), 0, None, None, "noSub"))
    assert info == {"qiSnd": False, "qiNtf": False, "qiSize": 0}


def test_a_subscribed_queue_reports_its_delivered_message_and_head():
    sub = Sub(b"r" * 24)
    head = Message(b"m" * 24, 1_700_000_000, b"F", b"hi")
    info = json.loads(queue_info(record(b"k" * 44), 1, head, sub, "noSub", b"m" * 24))
    assert info["qiSnd"] is True and info["qiSize"] == 1
    assert info["qiSub"] == {
        "qSubThread": "noSub", "qDelivered": base64.b64encode(b"m" * 24).decode()
    }
    assert info["qiMsg"] == {
        "msgId": base64.b64encode(b"m" * 24).decode(),
        "msgTs": "2023-11-14T22:13:20Z",
        "msgType": "message",
    }


def test_a_quota_marker_at_the_head_is_reported_as_quota():
    head = Message(b"m" * 24, 0, b"", b"", quota=True)
    info = json.loads(queue_info(record(), 1, head, None, "noSub"))
    assert info["qiMsg"]["msgType"] == "quota"
