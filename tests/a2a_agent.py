"""A minimal A2A agent built from the a2a-sdk 1.3.0 server classes, for `peer ask` to ask.

Usage: a2a_agent.py SEED_HEX TOKEN
Listens on 127.0.0.1 (port chosen by the kernel), prints {"port": N} on stdout, then serves:
the card at /.well-known/agent-card.json, signed by the SDK's own signer with the Ed25519 key
of SEED_HEX (EdDSA over the JCS form), and JSON-RPC at /. Every POST must carry
`Authorization: Bearer TOKEN` (401 otherwise). The executor answers "echo: QUESTION" as a
text artifact; a question containing "slow" works for 60 s (so it can be canceled) and one
containing "refuse" is rejected.
"""

import asyncio
import json
import socket
import sys

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
)
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue) -> None:
        task = context.current_task or new_task_from_user_message(context.message)
        if not context.current_task:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        question = context.get_user_input()
        if "refuse" in question:
            await updater.reject(updater.new_agent_message([Part(text="not this one")]))
            return
        await updater.start_work(updater.new_agent_message([Part(text="thinking")]))
        if "slow" in question:
            await asyncio.sleep(60)
        await updater.add_artifact([Part(text=f"echo: {question}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue) -> None:
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.cancel()


class Bearer(BaseHTTPMiddleware):
    def __init__(self, app, token):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request, call_next):
        if request.method == "POST" and request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


async def main():
    seed, token = bytes.fromhex(sys.argv[1]), sys.argv[2]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    card = AgentCard(
        name="sdk-echo",
        description="an a2a-sdk example agent",
        version="1.0.0",
        supported_interfaces=[AgentInterface(
            url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    private = Ed25519PrivateKey.from_private_bytes(seed)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    card = create_agent_card_signer(pem, {"alg": "EdDSA", "kid": "test", "typ": "JOSE"})(card)
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    app = Starlette(routes=routes)
    app.add_middleware(Bearer, token=token)
    print(json.dumps({"port": port}), flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    await server.serve(sockets=[sock])


asyncio.run(main())
