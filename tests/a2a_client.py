"""Drives `peer ask serve`'s A2A endpoint with the official a2a-sdk Python client.

Usage: a2a_client.py BASE_URL TOKEN SCENARIO [ARG]
Prints one JSON object on stdout; tests/a2a.rs asserts on it.

Scenarios:
  card HEXKEY    fetch the card, verify its JWS with the Ed25519 key HEXKEY (raw 32 bytes)
  ask Q          blocking SendMessage (streaming off)
  stream Q       SendStreamingMessage; every event's kind and state
  poll Q         SendMessage with returnImmediately, then GetTask until it ends
  cancel Q       SendMessage with returnImmediately, then CancelTask
  subscribe Q    SendMessage with returnImmediately, then SubscribeToTask
"""

import asyncio
import json
import sys
import time
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.signing import create_signature_verifier
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.json_format import MessageToDict


def state_name(s):
    return TaskState.Name(s)


def task_view(task):
    texts = [p.text for a in task.artifacts for p in a.parts if p.text]
    msg = ""
    if task.status.HasField("message"):
        msg = " ".join(p.text for p in task.status.message.parts)
    return {
        "id": task.id,
        "state": state_name(task.status.state),
        "answer": "".join(texts),
        "message": msg,
    }


def message(q):
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=q)],
    )


async def main():
    base, token, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    arg = sys.argv[4] if len(sys.argv) > 4 else ""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        if scenario == "card":
            key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(arg))
            verifier = create_signature_verifier(lambda kid, jku: key, ["EdDSA"])
            card = await A2ACardResolver(http, base).get_agent_card(
                signature_verifier=verifier
            )
            print(json.dumps({
                "verified": True,
                "card": MessageToDict(card),
            }))
            return
        streaming = scenario in ("stream", "subscribe")
        client = await create_client(
            base, client_config=ClientConfig(streaming=streaming, httpx_client=http)
        )
        req = SendMessageRequest(message=message(arg))
        if scenario in ("poll", "cancel", "subscribe"):
            req.configuration.return_immediately = True
        events = []
        t0 = time.monotonic()
        async for ev in client.send_message(req):
            kind = ev.WhichOneof("payload")
            if kind == "task":
                events.append({"kind": kind, **task_view(ev.task)})
            elif kind == "status_update":
                events.append({"kind": kind, "state": state_name(ev.status_update.status.state)})
            elif kind == "artifact_update":
                texts = [p.text for p in ev.artifact_update.artifact.parts]
                events.append({"kind": kind, "answer": "".join(texts)})
            else:
                events.append({"kind": kind})
        first = events[0]
        out = {"events": events, "first": first, "ms": (time.monotonic() - t0) * 1000}
        if scenario == "poll":
            while True:
                task = await client.get_task(GetTaskRequest(id=first["id"]))
                if state_name(task.status.state) not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                    break
                await asyncio.sleep(0.05)
            out["final"] = task_view(task)
        elif scenario == "cancel":
            task = await client.cancel_task(CancelTaskRequest(id=first["id"]))
            out["final"] = task_view(task)
            again = await client.get_task(GetTaskRequest(id=first["id"]))
            out["again"] = task_view(again)
        elif scenario == "subscribe":
            sub = []
            async for ev in client.subscribe(SubscribeToTaskRequest(id=first["id"])):
                sub.append(ev.WhichOneof("payload"))
            out["subscribe"] = sub
            out["final"] = task_view(await client.get_task(GetTaskRequest(id=first["id"])))
        print(json.dumps(out))


try:
    asyncio.run(main())
except Exception as e:  # the test reads the error's type and text
    print(json.dumps({"error": type(e).__name__, "text": str(e)[:500]}))
    sys.exit(3)
