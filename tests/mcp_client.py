#!/usr/bin/env python3
"""Drive one or two `peer mcp` servers with the official MCP Python SDK client.

Usage:
  mcp_client.py SCRIPT.json [--session NAME=COMMAND]... [-- COMMAND ARG...]

SCRIPT.json is either a list of steps (one session "a", started from the command after `--`),
or an object:
  {"sessions": {"a": {"command": ["peer", "mcp", "--alias", "alice"], "env": {...}},
                "b": {"command": ["peer", "mcp", "--alias", "bob"]}},
   "steps": [...]}
Session commands may also come from `--session a='peer mcp --alias alice'` (shell-split) or
from the environment, PEER_MCP_CMD_A / PEER_MCP_CMD_B (a JSON array or a shell string); the
command line wins over the environment, which wins over the script. Servers inherit this
process's environment (so PEER_HOME reaches them) plus the session's "env".

Each session is initialized and its tools are listed: the four peer tools must be present
(the six ask tools too when friends are configured),
each with an object inputSchema. Then every step runs in order. A step:
  {"session": "a",                      # default: the first session
   "tool": "send_peer_message",         # or "ping": true, or "await_notification": {...}
   "args": {"to": "bob", "content": "hi", "replyTo": "${first_id}"},
   "expect_error_code": "USAGE",        # tool result with isError and this error code
   "expect_protocol_error": -32602,     # JSON-RPC error with this number instead of a result
   "expect_keys": ["messageId"],        # keys of structuredContent
   "expect": {"messages.0.content": "hi"},          # dotted paths into structuredContent
   "expect_text_contains": "<peer-message",         # substring of the text content
   "save": {"first_id": "messageId"},   # remember values for later ${name} substitution
   "retry": {"attempts": 20, "delay_ms": 250},      # repeat until the expectations hold
   "timeout_s": 60}
Without expect_error_code / expect_protocol_error a step expects isError false.
"${name}" as a whole string is replaced by the saved value (any JSON type); inside a longer
string it is replaced by its text. Substitution applies to args and to expectations.
"await_notification": {"event": "peer_update"} waits (timeout_s, default 30) for a
notifications/message whose data contains those key/values.

Output: one JSON line per session set-up and per step. Exit status: 0 all expectations held,
1 an expectation failed, 2 bad usage, bad script or a server that could not be started.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

try:
    from mcp.shared.exceptions import MCPError as ProtocolError
except ImportError:  # SDK 1.x spelling
    from mcp.shared.exceptions import McpError as ProtocolError

TOOL_NAMES = ["list_peers", "send_peer_message", "peer_messages", "coordinate_resource"]
# Listed only when the namespace has friends configured (ask.peers); checked when listed.
ASK_TOOL_NAMES = ["ask_peer", "peers_list", "ask_peers", "ask_peer_async", "ask_result", "recommend_peer"]
MISSING = object()


class SetupError(Exception):
    """Bad usage, a bad script, or a server that could not be started (exit 2)."""


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True, default=str), flush=True)


def parse_command(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("["):
        argv = json.loads(text)
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise SetupError(f"command {text!r} must be a non-empty JSON array of strings")
        return argv
    argv = shlex.split(text)
    if not argv:
        raise SetupError("empty server command")
    return argv


def parse_args(argv: list[str]) -> tuple[str, dict[str, list[str]], list[str]]:
    if not argv or argv[0] in ("-h", "--help"):
        raise SetupError(__doc__ or "usage: mcp_client.py SCRIPT.json [-- COMMAND...]")
    script, rest = argv[0], argv[1:]
    sessions: dict[str, list[str]] = {}
    tail: list[str] = []
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            tail, rest = rest, []
        elif arg == "--session" and rest:
            name, sep, cmd = rest.pop(0).partition("=")
            if not sep or not name:
                raise SetupError("--session needs NAME=COMMAND")
            sessions[name] = parse_command(cmd)
        else:
            raise SetupError(f"unexpected argument {arg!r}; see --help")
    return script, sessions, tail


def load_script(path: str, cli_sessions: dict[str, list[str]], tail: list[str]):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise SetupError(f"cannot read script {path}: {e}") from e
    if isinstance(data, list):
        data = {"sessions": {"a": {}}, "steps": data}
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        raise SetupError("script must be a list of steps or an object with 'steps'")
    declared = data.get("sessions") or {"a": {}}
    sessions: dict[str, dict[str, Any]] = {}
    for name, spec in declared.items():
        spec = dict(spec or {})
        env_cmd = os.environ.get(f"PEER_MCP_CMD_{name.upper()}")
        if name in cli_sessions:
            spec["command"] = cli_sessions[name]
        elif env_cmd:
            spec["command"] = parse_command(env_cmd)
        elif not spec.get("command") and tail and name == next(iter(declared)):
            spec["command"] = tail
        if isinstance(spec.get("command"), str):
            spec["command"] = parse_command(spec["command"])
        if not spec.get("command"):
            raise SetupError(f"session {name!r} has no server command")
        sessions[name] = spec
    return sessions, data["steps"]


def lookup(value: Any, path: str) -> Any:
    for part in path.split(".") if path else []:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def substitute(value: Any, saved: dict[str, Any]) -> Any:
    if isinstance(value, str):
        if value.startswith("${") and value.endswith("}") and value[2:-1] in saved:
            return saved[value[2:-1]]
        for name, v in saved.items():
            value = value.replace("${" + name + "}", v if isinstance(v, str) else json.dumps(v))
        return value
    if isinstance(value, list):
        return [substitute(v, saved) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, saved) for k, v in value.items()}
    return value


def field(obj: Any, *names: str, default: Any = None) -> Any:
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    return default


class Session:
    """One server process and its client session, plus the notifications it has sent."""

    def __init__(self, name: str, spec: dict[str, Any]):
        self.name = name
        self.spec = spec
        self.notifications: list[Any] = []
        self.client: ClientSession | None = None

    async def on_log(self, params: Any) -> None:
        self.notifications.append(field(params, "data"))

    async def start(self, stack: AsyncExitStack) -> None:
        argv = self.spec["command"]
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.spec.get("env") or {}).items()})
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=self.spec.get("cwd"))
        try:
            read, write = await stack.enter_async_context(stdio_client(params))
            self.client = await stack.enter_async_context(ClientSession(read, write, logging_callback=self.on_log))
            with anyio.fail_after(float(self.spec.get("timeout_s", 30))):
                init = await self.client.initialize()
                listed = await self.client.list_tools()
        except Exception as e:  # any start-up failure is a set-up error, not a test failure
            raise SetupError(f"session {self.name!r} ({shlex.join(argv)}) failed to start: {e!r}") from e
        tools = {t.name: field(t, "input_schema", "inputSchema") for t in listed.tools}
        missing = [n for n in TOOL_NAMES if n not in tools]
        bad = [n for n in TOOL_NAMES + ASK_TOOL_NAMES if n in tools and (tools[n] or {}).get("type") != "object"]
        version = field(init, "protocol_version", "protocolVersion")
        ok = not missing and not bad
        emit({"session": self.name, "initialized": True, "protocolVersion": version, "tools": sorted(tools),
              "ok": ok, "failures": [f"missing tool {n}" for n in missing] + [f"{n}: inputSchema is not an object schema" for n in bad]})
        if not ok:
            raise AssertionError(f"session {self.name}: tool list check failed")


def check(step: dict[str, Any], record: dict[str, Any]) -> list[str]:
    failures: list[str] = []
    structured = record.get("structuredContent")
    if "expect_protocol_error" in step:
        if record.get("protocolError") != step["expect_protocol_error"]:
            failures.append(f"expected JSON-RPC error {step['expect_protocol_error']}, got {record.get('protocolError') or 'a result'}")
        return failures
    if record.get("protocolError") is not None:
        return [f"unexpected JSON-RPC error {record['protocolError']}: {record.get('message')}"]
    if "expect_error_code" in step:
        code = lookup(structured, "error.code")
        if not record.get("isError") or code != step["expect_error_code"]:
            failures.append(f"expected tool error {step['expect_error_code']}, got isError={record.get('isError')} code={code if code is not MISSING else None}")
    elif record.get("isError"):
        failures.append(f"unexpected tool error: {lookup(structured, 'error')}")
    for key in step.get("expect_keys", []):
        if not isinstance(structured, dict) or key not in structured:
            failures.append(f"structuredContent lacks key {key!r}")
    for path, want in (step.get("expect") or {}).items():
        got = lookup(structured, path)
        if got is MISSING or got != want:
            failures.append(f"{path}: expected {want!r}, got {None if got is MISSING else got!r}")
    needle = step.get("expect_text_contains")
    if needle is not None and needle not in record.get("text", ""):
        failures.append(f"text content lacks {needle!r}")
    return failures


async def call_once(session: Session, step: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    timeout = float(step.get("timeout_s", 60))
    record: dict[str, Any] = {"session": session.name}
    assert session.client is not None
    try:
        with anyio.fail_after(timeout):
            if step.get("ping"):
                await session.client.send_ping()
                record.update(tool="ping", isError=False, structuredContent={})
                return record
            args = substitute(step.get("args") or {}, saved)
            record.update(tool=step["tool"], args=args)
            result = await session.client.call_tool(step["tool"], args, read_timeout_seconds=timeout)
    except ProtocolError as e:
        record.update(protocolError=e.error.code, message=e.error.message)
        return record
    texts = [field(c, "text", default="") for c in result.content if field(c, "type") == "text"]
    record.update(isError=bool(field(result, "is_error", "isError", default=False)),
                  structuredContent=field(result, "structured_content", "structuredContent"),
                  text="\n".join(texts))
    return record


async def await_notification(session: Session, step: dict[str, Any]) -> dict[str, Any]:
    want = step["await_notification"]
    seen = 0
    with anyio.move_on_after(float(step.get("timeout_s", 30))):
        while True:
            for data in session.notifications[seen:]:
                seen += 1
                if isinstance(data, dict) and all(data.get(k) == v for k, v in want.items()):
                    return {"session": session.name, "notification": data, "failures": []}
            await anyio.sleep(0.05)
    return {"session": session.name, "failures": [f"no notification matching {want!r}"]}


async def run_step(index: int, step: dict[str, Any], sessions: dict[str, Session], saved: dict[str, Any]) -> bool:
    # Saved values fill every field but the names under "save".
    step = {k: v if k == "save" else substitute(v, saved) for k, v in step.items()}
    name = step.get("session") or next(iter(sessions))
    if name not in sessions:
        raise SetupError(f"step {index}: unknown session {name!r}")
    if "await_notification" in step:
        record = await await_notification(sessions[name], step)
    else:
        if not step.get("ping") and not isinstance(step.get("tool"), str):
            raise SetupError(f"step {index}: needs 'tool', 'ping' or 'await_notification'")
        retry = step.get("retry") or {}
        attempts = max(1, int(retry.get("attempts", 1)))
        for attempt in range(attempts):
            record = await call_once(sessions[name], step, saved)
            record["failures"] = check(step, record)
            if not record["failures"] or attempt + 1 == attempts:
                break
            await anyio.sleep(int(retry.get("delay_ms", 250)) / 1000)
        for var, path in (step.get("save") or {}).items():
            value = lookup(record.get("structuredContent"), path)
            if value is MISSING:
                record["failures"].append(f"save {var}: no value at {path!r}")
            else:
                saved[var] = value
    record["step"] = index
    record["ok"] = not record["failures"]
    emit(record)
    return record["ok"]


async def main_async(argv: list[str]) -> int:
    script, cli_sessions, tail = parse_args(argv)
    specs, steps = load_script(script, cli_sessions, tail)
    sessions = {name: Session(name, spec) for name, spec in specs.items()}
    saved: dict[str, Any] = {}
    ok = True
    async with AsyncExitStack() as stack:
        for s in sessions.values():
            await s.start(stack)
        for i, step in enumerate(steps):
            if not isinstance(step, dict):
                raise SetupError(f"step {i} is not an object")
            ok = await run_step(i, step, sessions, saved) and ok
    return 0 if ok else 1


def first_known(e: BaseException) -> BaseException | None:
    """The SetupError/AssertionError inside (possibly nested) task-group exception groups."""
    if isinstance(e, (SetupError, AssertionError)):
        return e
    for inner in getattr(e, "exceptions", ()):
        found = first_known(inner)
        if found is not None:
            return found
    return None


def main() -> int:
    try:
        return anyio.run(main_async, sys.argv[1:])
    except BaseException as e:  # unwrap anyio/asyncio exception groups
        known = first_known(e)
        if known is None:
            raise
        print(f"mcp_client.py: {known}", file=sys.stderr)
        return 2 if isinstance(known, SetupError) else 1


if __name__ == "__main__":
    sys.exit(main())
