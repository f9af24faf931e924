"""The web client (JavaScript, in Node) and the Python client against one real router.

Each test starts the router on 127.0.0.1 and drives the web client through
web/tools/smp-driver.mjs, next to router.client in this process. The cases
are those of the Python client: messages both ways, displacement (END),
deletion (DELD, then AUTH), the queue quota, and ERR answers, which both
clients must see alike.
"""

from __future__ import annotations

import pytest
import trio
from web_helpers import (
    NodeDriver,
    RestartableRouter,
    node_driver,
    queue_fields,
    queue_from_fields,
)

from router.client import DeletedEvent, EndEvent, MessageEvent, SMPError, open_client
from router.protocol import crypto, versions
from router.protocol.codec import encode_command
from router.protocol.types import NO_IDS_HASH, SUBS
from router.server import RouterInfo

MAX_BODY = versions.max_message_length(19)  # both clients speak v19 (docs/protocol.md#limits)


async def start_router(nursery: trio.Nursery, **options: object) -> RouterInfo:
    router = RestartableRouter(nursery, store="memory", end_batch_interval=0.02, **options)
    return await router.start()


async def connect_js(driver: NodeDriver, info: RouterInfo, name: str = "js", **extra) -> dict:
    return await driver.call(
        "connect", client=name, url=info.url, keyHash=info.key_hash.hex(), **extra
    )


async def test_messages_both_ways(node: str, nursery: trio.Nursery) -> None:
    info = await start_router(nursery)
    async with node_driver(node) as js, open_client(info.address) as py:
        assert (await connect_js(js, info))["version"] == 19

        # Python -> JavaScript: the web client's queue, secured by the Python sender.
        js_queue = await js.call("create", client="js", queue="inbox")
        seed, key = crypto.new_ed25519()
        sender_id = bytes.fromhex(js_queue["senderId"])
        await py.secure_sender(sender_id, seed, key)
        texts = ["hello from Python", "ünïcødé ✓", "x" * MAX_BODY]
        for text in texts:
            await py.send(sender_id, text.encode(), sender_seed=seed)
        await js.call("subscribe", client="js", queue="inbox")
        for text in texts:
            event = await js.call("event", client="js")
            assert (event["type"], event["text"], event["quota"]) == ("message", text, False)
            await js.call("ack", client="js", queue="inbox", msgId=event["msgId"])
        # GET on a queue this connection subscribed is refused, as docs/protocol.md says.
        err = await js.error("get", client="js", queue="inbox")
        assert (err.name, err.type) == ("SMPError", "CMD PROHIBITED")

        # JavaScript -> Python: the Python client's queue, secured by the web client's sender.
        py_queue = await py.create_queue()
        signer = await js.call("newSigner")
        await js.call(
            "skey", client="js", senderId=py_queue.sender_id.hex(), seed=signer["seed"],
            key=signer["key"],
        )
        for text in texts:
            await js.call(
                "send", client="js", senderId=py_queue.sender_id.hex(), text=text,
                seed=signer["seed"],
            )
        await py.subscribe(py_queue)
        for text in texts:
            event = await py.next_event()
            assert isinstance(event, MessageEvent) and event.body == text.encode()
            await py.ack(py_queue, event.msg_id)

        # Unsigned SEND to a secured queue: AUTH in both clients.
        err = await js.error("send", client="js", senderId=py_queue.sender_id.hex(), text="x")
        assert (err.name, err.type) == ("SMPError", "AUTH")
        with pytest.raises(SMPError) as py_err:
            await py.send(py_queue.sender_id, b"x")
        assert str(py_err.value.error) == "AUTH"


async def test_get_and_a_python_queue_read_by_the_web_client(
    node: str, nursery: trio.Nursery
) -> None:
    info = await start_router(nursery)
    async with node_driver(node) as js, open_client(info.address) as py:
        await connect_js(js, info)
        q = await py.create_queue(snd_secure=False)
        await js.call("addQueue", client="js", queue="q", fields=queue_fields(q))
        await js.call("send", client="js", senderId=q.sender_id.hex(), hex=bytes(range(256)).hex())
        got = await js.call("get", client="js", queue="q")
        assert got["body"] == bytes(range(256)).hex()
        await js.call("ack", client="js", queue="q", msgId=got["msgId"])
        assert await py.get(q) is None


async def test_displacement_sends_end_to_the_earlier_subscriber(
    node: str, nursery: trio.Nursery
) -> None:
    info = await start_router(nursery)
    async with node_driver(node) as js, open_client(info.address) as py:
        await connect_js(js, info)
        fields = await js.call("create", client="js", queue="q", sndSecure=False)
        await js.call("subscribe", client="js", queue="q")
        queue = queue_from_fields(fields)

        # Python takes the subscription over: the web client gets END, as a Python one would.
        await py.subscribe(queue)
        end = await js.call("event", client="js")
        assert end == {"type": "end", "recipientId": fields["recipientId"]}
        await py.send(queue.sender_id, b"for the new subscriber")
        event = await py.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"for the new subscriber"
        assert await js.call("noEvent", client="js") is None

        # And back: the Python client gets END when the web client subscribes again.
        await js.call("subscribe", client="js", queue="q")
        assert isinstance(await py.next_event(), EndEvent)


@pytest.mark.parametrize("version", [10, 9])
async def test_delete_sends_deld_then_auth(node: str, nursery: trio.Nursery, version: int) -> None:
    info = await start_router(nursery)
    async with node_driver(node) as js, open_client(info.address) as py:
        assert (await connect_js(js, info, versions=[9, version]))["version"] == version
        fields = await js.call("create", client="js", queue="q", sndSecure=False)
        await js.call("subscribe", client="js", queue="q")
        queue = queue_from_fields(fields)

        await py.delete(queue)
        pushed = await js.call("event", client="js")
        # DELD at version 10, END at version 9 (docs/protocol.md, "Versions").
        assert pushed["type"] == ("deleted" if version == 10 else "end")

        err = await js.error("subscribe", client="js", queue="q")
        assert (err.name, err.type) == ("SMPError", "AUTH")
        err = await js.error("send", client="js", senderId=fields["senderId"], text="late")
        assert err.type == "AUTH"
        with pytest.raises(SMPError) as py_err:
            await py.subscribe(queue)
        assert str(py_err.value.error) == "AUTH"

        # The web client deleting a queue the Python client is subscribed to.
        q2 = await py.create_queue(snd_secure=False)
        await py.subscribe(q2)
        await js.call("addQueue", client="js", queue="q2", fields=queue_fields(q2))
        await js.call("delete", client="js", queue="q2")
        assert isinstance(await py.next_event(), DeletedEvent)


async def test_quota(node: str, nursery: trio.Nursery) -> None:
    info = await start_router(nursery, quota=3)
    async with node_driver(node) as js, open_client(info.address) as py:
        await connect_js(js, info)
        fields = await js.call("create", client="js", queue="q", sndSecure=False)
        sender_id = fields["senderId"]
        for i in range(3):
            await js.call("send", client="js", senderId=sender_id, text=f"m{i}")
        err = await js.error("send", client="js", senderId=sender_id, text="one too many")
        assert (err.name, err.type) == ("SMPError", "QUOTA")
        with pytest.raises(SMPError) as py_err:
            await py.send(bytes.fromhex(sender_id), b"from Python too")
        assert str(py_err.value.error) == "QUOTA"

        # The recipient gets the three messages, then the quota marker, and must ACK it.
        await js.call("subscribe", client="js", queue="q")
        seen = []
        for _ in range(4):
            event = await js.call("event", client="js")
            seen.append("QUOTA" if event["quota"] else event["text"])
            await js.call("ack", client="js", queue="q", msgId=event["msgId"])
        assert seen == ["m0", "m1", "m2", "QUOTA"]
        await js.call("send", client="js", senderId=sender_id, text="room again")
        assert (await js.call("event", client="js"))["text"] == "room again"


async def test_err_answers_are_those_of_the_python_client(node: str, nursery: trio.Nursery) -> None:
    info = await start_router(nursery)
    async with node_driver(node) as js, open_client(info.address) as py:
        await connect_js(js, info)
        fields = await js.call("create", client="js", queue="q", sndSecure=False)
        queue = queue_from_fields(fields)
        rid = fields["recipientId"]
        seed, _ = crypto.new_ed25519()
        cases = [
            # (entity, command bytes, signed with the queue's key?)
            ("", b"HELLO", False),  # CMD UNKNOWN
            (rid, b"SUB extra", True),  # CMD SYNTAX
            (rid, b"SUB", False),  # CMD NO_AUTH
            (rid, b"ACK " + bytes([24]) + bytes(24), True),  # NO_MSG
            (rid, b"OFF", "other"),  # AUTH: a key that is not the queue's
            (fields["senderId"], b"SEND F " + bytes(MAX_BODY + 1), False),  # LARGE_MSG
            ("", b"PING", True),  # CMD HAS_AUTH
        ]
        answers = []
        for entity, command, signed in cases:
            args = {"client": "js", "entityId": entity, "command": command.hex()}
            if signed == "other":
                args["seed"] = seed.hex()
            elif signed:
                args["signWith"] = "q"
            js_answer = await js.call("raw", **args)
            key = seed if signed == "other" else queue.rcv_auth_seed if signed else None
            py_answer = await py.command(bytes.fromhex(entity), command, key)
            answers.append((js_answer.get("error"), str(py_answer.error)))
        assert answers == [
            ("CMD UNKNOWN",) * 2, ("CMD SYNTAX",) * 2, ("CMD NO_AUTH",) * 2, ("NO_MSG",) * 2,
            ("AUTH",) * 2, ("LARGE_MSG",) * 2, ("CMD HAS_AUTH",) * 2,
        ]

        # The typed error of the high-level calls carries the same type.
        err = await js.error("ack", client="js", queue="q", msgId="00" * 24)
        assert (err.name, err.type) == ("SMPError", "NO_MSG")

        # A bad block: ERR BLOCK pushed with an empty corrId, the connection stays open.
        await js.call("rawBlock", client="js", hex=(b"\x00\x01\x00" + b"#" * 16381).hex())
        pushed = await js.call("event", client="js")
        assert pushed["type"] == "raw" and pushed["response"] == {"type": "ERR", "error": "BLOCK"}
        assert await js.call("get", client="js", queue="q") is None


async def test_wrong_key_hash_fails_the_connect(
    node: str, nursery: trio.Nursery
) -> None:
    info = await start_router(nursery)
    async with node_driver(node) as js:
        err = await js.error("connect", client="js", url=info.url, keyHash=bytes(32).hex())
        # The router's hello shows its identity certificate: the client sees the
        # mismatch before it answers.
        assert err.name == "IdentityMismatch", err
        assert "key hash" in str(err)
        # With the right one, the same call connects.
        assert (await connect_js(js, info))["version"] == 19


async def test_notifications_and_suspend(node: str, nursery: trio.Nursery) -> None:
    info = await start_router(nursery, ntf_batch_interval=0.01)
    async with node_driver(node) as js, open_client(info.address) as py:
        await connect_js(js, info)
        await connect_js(js, info, name="notifier")
        fields = await js.call("create", client="js", queue="q", sndSecure=False)
        creds = await js.call("enableNotifications", client="js", queue="q")
        await js.call("subscribeNotifications", client="notifier", queue="q")

        # A SEND with notify from Python: one NMSG, opened to the msgId the MSG carries.
        sender_id = bytes.fromhex(fields["senderId"])
        await py.send(sender_id, b"ring", notify=True)
        await py.send(sender_id, b"quiet")
        nmsg = await js.call("event", client="notifier")
        assert nmsg["type"] == "notification" and nmsg["notifierId"] == creds["notifierId"]
        await js.call("subscribe", client="js", queue="q")
        msg = await js.call("event", client="js")
        assert (msg["text"], msg["msgId"], msg["ts"]) == ("ring", nmsg["msgId"], nmsg["ts"])
        assert await js.call("noEvent", client="notifier") is None

        # NDEL: the notifier's subscriber is told (DELD at v10); NSUB is AUTH afterwards.
        await js.call("disableNotifications", client="js", queue="q")
        assert (await js.call("event", client="notifier"))["type"] == "deleted"
        err = await js.error("subscribeNotifications", client="notifier", queue="q")
        assert err.type == "AUTH"

        # OFF: senders are refused, in both clients alike.
        await js.call("suspend", client="js", queue="q")
        err = await js.error("send", client="js", senderId=fields["senderId"], text="late")
        assert (err.name, err.type) == ("SMPError", "AUTH")
        with pytest.raises(SMPError) as py_err:
            await py.send(sender_id, b"late")
        assert str(py_err.value.error) == "AUTH"


async def test_a_browser_acts_for_no_service(node: str, nursery: trio.Nursery) -> None:
    # A service is by TLS client certificate (docs/protocol.md#client-service), which a
    # browser cannot present: SUBS from the web client is refused, as from a Python
    # client without a certificate.
    info = await start_router(nursery)
    seed, _ = crypto.new_ed25519()
    service = bytes(24)
    subs = SUBS(0, NO_IDS_HASH)
    async with node_driver(node) as js, open_client(info.address) as py:
        connected = await connect_js(js, info, name="plain")
        assert connected["version"] == py.version == versions.SMP_VERSION_MAX
        js_answer = await js.call(
            "raw", client="plain", entityId=service.hex(),
            command=encode_command(subs, py.version).hex(), seed=seed.hex(),
        )
        py_answer = await py.command(service, subs, seed)
        assert js_answer["error"] == str(py_answer.error) == "SERVICE"
