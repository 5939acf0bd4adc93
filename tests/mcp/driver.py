#!/usr/bin/env python3
"""Interactive MCP client for toolgate's integration tests, driven over JSON Lines.

Built on the official MCP Python SDK (``mcp`` 2.x, ``mcp.Client``). A test process
starts this driver, reads events and answers from its stdout and writes commands to
its stdin, so it can act (approve, crash an upstream, flip a descriptor) between steps.

Invocation
  driver.py [OPTIONS] stdio [--env K=V]... [--cwd DIR] -- CMD [ARGS...]
      spawn CMD as an MCP server and talk to it over stdio. The driver's whole
      environment is passed through, plus each --env K=V.
  driver.py [OPTIONS] http URL [--bearer TOKEN] [--header 'Name: value']...
                           [--oauth-client ID:SECRET --oauth-issuer URL]
      streamable-HTTP client for URL; --bearer sends "Authorization: Bearer TOKEN".
      --oauth-client signs in with the SDK's own OAuth client (client_credentials grant,
      ClientCredentialsOAuthProvider): no token at first, then the SDK follows the 401's
      resource_metadata to the authorization server named there (which must be
      --oauth-issuer), gets a token for this resource and retries. Emits
      {"event":"oauth_token","sub":..,"aud":..} (the token's unverified claims) once signed in.
      Proxy variables are ignored (loopback tests).

OPTIONS (accepted before or after the transport word)
  --elicitation accept|decline|cancel|none   (default none)
      none: the elicitation capability is not advertised. Otherwise it is, and every
      elicitation/create is answered that way. accept answers a form with a value for
      every property of requestedSchema (its default, first enum/const, or a value of
      the right type/format), overridden by --elicitation-content.
  --elicitation-content JSON   object merged over the synthesized form content
  --sampling TEXT       advertise sampling and answer every sampling/createMessage with TEXT
      (model "driver-model"), printing {"event":"sampling","messages":[..]} first
  --mode legacy|auto|default|<modern version>   protocol negotiation (default legacy:
      initialize handshake at the SDK's newest handshake version; auto first probes
      server/discover, which a handshake-only server must answer with an error;
      default passes no mode, so the SDK's own default applies)
  --log-level LEVEL     per-request log opt-in on 2026-07-28 connections only
  --client-name NAME    clientInfo.name (default toolgate-test-driver)
  --deadline-s N        (default 120) after N seconds the driver prints
      {"event":"deadline"} and exits 3 (a watchdog hard-exits 4 if teardown hangs)

stdout: JSON objects, one per line, flushed; nothing else (diagnostics -> stderr).
  {"event":"ready","protocolVersion":..,"serverInfo":{..},"capabilities":{..}}
  {"event":"elicitation","mode":"form","message":..,"requestedSchema":{..},"action":..}
      printed and flushed BEFORE the elicitation is answered ("url" mode carries
      "url" and "elicitationId" instead of "requestedSchema")
  {"event":"tools_list_changed"}
  {"event":"log","level":..,"logger":..,"data":..}
  {"event":"progress","progressToken":..,"id":<cmd id>,"progress":..,"total":..,"message":..}
  {"event":"notification","method":..,"params":..}   any other server notification
  {"event":"transport_error","message":..}
  {"event":"connect_error","error":{..}[,"httpStatus":N]}   connecting/initializing
      failed; exit 2 (httpStatus: the last HTTP error status seen, if any)
  {"event":"deadline","seconds":N}         exit 3
  answers: {"id":<cmd id>,"ok":true,"result":<SDK result, by_alias, exclude_none>}
      (SDK defaults for 2026-only fields resultType/ttlMs/cacheScope are left out
      unless the server sent them; isError is always present)
           {"id":<cmd id>,"ok":false,"error":{"kind":..,"code":..,"message":..[,"data":..]}}
      kind "protocol": a JSON-RPC error from the server (McpError; code is its code);
      kind "client": the SDK rejected the answer (e.g. structuredContent not matching
      outputSchema; code null); kind "cancelled": a `cancel` op stopped the command;
      kind "driver": a malformed command. A tool result with isError is ok:true.

stdin: one JSON command per line; commands run concurrently and answers may arrive
out of order (match them by id). Each command may carry "timeout_s" (SDK read timeout).
  {"id":1,"op":"list_tools"}
  {"id":2,"op":"call_tool","name":"x","arguments":{..},"timeout_s":30,"progress":true}
      "meta":{..} is sent as the request's _meta (e.g. {"toolgate/conv_id": "c-1"}).
      "request_state":".." seeds the call with that requestState (2026-07-28 only).
      progress:true sends _meta.progressToken = "progress-<id>"; notifications for it
      are printed as progress events carrying "id".
  {"id":3,"op":"read_resource","uri":".."}
  {"id":4,"op":"get_prompt","name":"..","arguments":{..}}
  {"id":5,"op":"list_resources"}   {"id":6,"op":"list_prompts"}
  {"id":7,"op":"ping"}             (handshake-era connections only)
  {"id":12,"op":"listen"}          (2026-07-28) subscriptions/listen for tool list changes:
      prints {"event":"listening"} once acknowledged, then a tools_list_changed event per
      change; answers when the stream ends
  {"id":9,"op":"cancel","target":2}   cancel in-flight command 2 (the SDK then sends
      notifications/cancelled); answers {"cancelled":true|false}
  {"id":10,"op":"list_resource_templates"}  {"id":11,"op":"set_logging_level","level":"debug"}
  {"id":13,"op":"subscribe","uri":".."}  {"id":14,"op":"unsubscribe","uri":".."}
      (handshake-era connections) notifications/resources/updated print as
      {"event":"notification","method":"notifications/resources/updated","params":{"uri":..}}
  {"id":15,"op":"complete","ref":{"type":"ref/prompt","name":".."},"argument":{"name":..,"value":..}}
  {"id":8,"op":"close"}   cancel in-flight commands, close the session, answer, exit 0
EOF on stdin = close (no answer). Exit codes: 0 closed, 2 connect error, 3 deadline,
4 watchdog, 64 usage, 128+N after signal N (SIGTERM/SIGINT close the session first).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import signal
import sys
import threading
import traceback
import warnings
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

EXIT_OK = 0
EXIT_CONNECT = 2
EXIT_DEADLINE = 3
EXIT_WATCHDOG = 4
EXIT_USAGE = 64
WATCHDOG_GRACE_S = 15.0

# The SDK flags handshake-era features (ping, logging/setLevel) as deprecated for
# 2026-07-28; the tests still use them on handshake connections. Keep stderr clean.
warnings.simplefilter("ignore")

_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    """Write one JSON line to stdout and flush it."""
    line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
    with _out_lock:
        sys.stdout.buffer.write(line.encode("utf-8"))
        sys.stdout.buffer.flush()


def diag(msg: str) -> None:
    print(f"driver: {msg}", file=sys.stderr, flush=True)


# 2026-07-28 result fields the SDK models fill with defaults; dropped from answers
# unless the server really sent them, so an answer shows what was on the wire.
_ERA_DEFAULT_FIELDS = {"result_type": "resultType", "ttl_ms": "ttlMs", "cache_scope": "cacheScope"}


def dump(model: Any) -> Any:
    if model is None:
        return None
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, alias in _ERA_DEFAULT_FIELDS.items():
        if name in type(model).model_fields and name not in model.model_fields_set:
            data.pop(alias, None)
    return data


def error_obj(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, MCPError):
        err: dict[str, Any] = {"kind": "protocol", "code": exc.code, "message": exc.message}
        if exc.data is not None:
            err["data"] = exc.data
        return err
    return {"kind": "client", "code": None, "message": f"{type(exc).__name__}: {exc}"}


# --------------------------------------------------------------------------- elicitation


def _first_const(options: Any) -> Any:
    if isinstance(options, list):
        for option in options:
            if isinstance(option, dict) and "const" in option:
                return option["const"]
    return None


def _synth_number(prop: dict[str, Any], integer: bool) -> int | float:
    lo = prop.get("minimum")
    hi = prop.get("maximum")
    value: float = 1
    if isinstance(lo, int | float) and value < lo:
        value = lo
    if isinstance(hi, int | float) and value > hi:
        value = hi
    if integer:
        value = math.ceil(value) if isinstance(lo, int | float) and value == lo else math.floor(value)
        return int(value)
    return float(value)


def _synth_string(prop: dict[str, Any]) -> str:
    fmt = prop.get("format")
    value = {
        "email": "driver@example.com",
        "uri": "https://example.com/",
        "date": "2000-01-01",
        "date-time": "2000-01-01T00:00:00Z",
    }.get(fmt, "ok")
    min_len = prop.get("minLength")
    if isinstance(min_len, int) and len(value) < min_len:
        value = value + "x" * (min_len - len(value))
    max_len = prop.get("maxLength")
    if isinstance(max_len, int) and len(value) > max_len:
        value = value[:max_len]
    return value


def synth_value(prop: dict[str, Any]) -> Any:
    """A value that satisfies one (flat) elicitation property schema."""
    if "default" in prop:
        return prop["default"]
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return prop["enum"][0]
    for key in ("oneOf", "anyOf"):
        const = _first_const(prop.get(key))
        if const is not None:
            return const
    kind = prop.get("type")
    if kind == "boolean":
        return True
    if kind == "integer":
        return _synth_number(prop, integer=True)
    if kind == "number":
        return _synth_number(prop, integer=False)
    if kind == "array":
        items = prop.get("items") if isinstance(prop.get("items"), dict) else {}
        item = None
        if isinstance(items.get("enum"), list) and items["enum"]:
            item = items["enum"][0]
        if item is None:
            item = _first_const(items.get("anyOf")) or _first_const(items.get("oneOf"))
        if item is None:
            item = "ok"
        return [item]
    return _synth_string(prop)


def synth_form_content(schema: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    content: dict[str, Any] = {}
    if isinstance(props, dict):
        for name, prop in props.items():
            content[name] = synth_value(prop if isinstance(prop, dict) else {})
    content.update(override)
    return content


def make_elicitation_callback(action: str, override: dict[str, Any]) -> Any:
    async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
        mode = getattr(params, "mode", "form")
        event: dict[str, Any] = {"event": "elicitation", "mode": mode, "message": params.message}
        if mode == "url":
            event["url"] = params.url
            event["elicitationId"] = params.elicitation_id
        else:
            event["requestedSchema"] = params.requested_schema
        event["action"] = action
        # The test reads this line (e.g. an approval id) while the call is still held.
        emit(event)
        if action == "accept":
            if mode == "url":
                return types.ElicitResult(action="accept")
            return types.ElicitResult(action="accept", content=synth_form_content(params.requested_schema, override))
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    return on_elicit


def make_sampling_callback(text: str) -> Any:
    async def on_sample(context: Any, params: Any) -> types.CreateMessageResult:
        emit({"event": "sampling", "messages": [dump(m) for m in params.messages]})
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text), model="driver-model"
        )

    return on_sample


# --------------------------------------------------------------------------- notifications

PROGRESS_PREFIX = "progress-"


async def on_message(message: Any) -> None:
    if isinstance(message, Exception):
        emit({"event": "transport_error", "message": f"{type(message).__name__}: {message}"})
        return
    if isinstance(message, types.ToolListChangedNotification):
        emit({"event": "tools_list_changed"})
    elif isinstance(message, types.LoggingMessageNotification):
        p = message.params
        emit({"event": "log", "level": p.level, "logger": p.logger, "data": p.data})
    elif isinstance(message, types.ProgressNotification):
        p = message.params
        event: dict[str, Any] = {"event": "progress", "progressToken": p.progress_token}
        token = p.progress_token
        if isinstance(token, str) and token.startswith(PROGRESS_PREFIX):
            raw = token[len(PROGRESS_PREFIX) :]
            try:
                event["id"] = json.loads(raw)
            except ValueError:
                event["id"] = raw
        event.update({"progress": p.progress, "total": p.total, "message": p.message})
        emit(event)
    else:
        data = dump(message)
        emit({"event": "notification", "method": data.get("method"), "params": data.get("params")})


# --------------------------------------------------------------------------- commands


@dataclass
class State:
    client: Client
    in_flight: dict[Any, anyio.CancelScope] = field(default_factory=dict)
    closing: anyio.Event = field(default_factory=anyio.Event)
    close_id: Any = None
    close_requested: bool = False


def _timeout(cmd: dict[str, Any]) -> float | None:
    value = cmd.get("timeout_s")
    return float(value) if isinstance(value, int | float) else None


async def execute(state: State, cmd: dict[str, Any]) -> Any:
    client = state.client
    op = cmd.get("op")
    timeout = _timeout(cmd)
    if op == "listen":
        # 2026-07-28: a subscriptions/listen stream for tool list changes; "listening" once
        # acknowledged, then one tools_list_changed event per change, until close.
        async with client.listen(tools_list_changed=True) as sub:
            emit({"event": "listening", "id": cmd.get("id")})
            async for _ in sub:
                emit({"event": "tools_list_changed", "via": "listen"})
        return {}
    if op == "call_tool":
        meta = dict(cmd.get("meta") or {}) or None
        if cmd.get("progress"):
            meta = dict(meta or {})
            meta["progressToken"] = PROGRESS_PREFIX + json.dumps(cmd.get("id"))
        # The SDK's read timeout: on expiry it sends notifications/cancelled and
        # raises McpError -32001 (REQUEST_TIMEOUT).
        seeded: dict[str, Any] = {}
        if cmd.get("request_state") is not None:
            # Resume an exchange with this state (2026-07-28), as a client that kept it would.
            seeded["request_state"] = cmd["request_state"]
        return await client.call_tool(
            cmd["name"],
            cmd.get("arguments") or {},
            read_timeout_seconds=timeout,
            meta=meta,  # type: ignore[arg-type]
            **seeded,
        )
    with anyio.fail_after(timeout):  # None = no limit; expiry -> kind "client"
        if op == "list_tools":
            return await client.list_tools(cursor=cmd.get("cursor"), cache_mode="bypass")
        if op == "read_resource":
            return await client.read_resource(cmd["uri"], cache_mode="bypass")
        if op == "get_prompt":
            return await client.get_prompt(cmd["name"], cmd.get("arguments"))
        if op == "list_resources":
            return await client.list_resources(cursor=cmd.get("cursor"), cache_mode="bypass")
        if op == "list_resource_templates":
            return await client.list_resource_templates(cursor=cmd.get("cursor"), cache_mode="bypass")
        if op == "list_prompts":
            return await client.list_prompts(cursor=cmd.get("cursor"), cache_mode="bypass")
        if op == "ping":
            return await client.send_ping()
        if op == "set_logging_level":
            return await client.set_logging_level(cmd["level"])
        if op == "subscribe":
            return await client.subscribe_resource(cmd["uri"])
        if op == "unsubscribe":
            return await client.unsubscribe_resource(cmd["uri"])
        if op == "complete":
            ref = cmd["ref"]
            reference = (
                types.PromptReference(type="ref/prompt", name=ref["name"])
                if ref.get("type") == "ref/prompt"
                else types.ResourceTemplateReference(type="ref/resource", uri=ref["uri"])
            )
            return await client.complete(reference, cmd["argument"])
    raise _DriverError(f"unknown op {op!r}")


class _DriverError(Exception):
    pass


async def run_command(state: State, cmd: dict[str, Any], scope: anyio.CancelScope) -> None:
    cmd_id = cmd.get("id")
    try:
        with scope:
            try:
                result = await execute(state, cmd)
            except _DriverError as exc:
                emit({"id": cmd_id, "ok": False, "error": {"kind": "driver", "code": None, "message": str(exc)}})
                return
            except KeyError as exc:
                emit(
                    {
                        "id": cmd_id,
                        "ok": False,
                        "error": {"kind": "driver", "code": None, "message": f"missing field {exc}"},
                    }
                )
                return
            except TimeoutError:
                emit(
                    {
                        "id": cmd_id,
                        "ok": False,
                        "error": {"kind": "client", "code": None, "message": f"timed out after timeout_s={cmd.get('timeout_s')}"},
                    }
                )
                return
            except Exception as exc:  # MCPError and SDK-side rejections
                if not isinstance(exc, MCPError):
                    diag(f"command {cmd_id!r} failed:\n{traceback.format_exc()}")
                emit({"id": cmd_id, "ok": False, "error": error_obj(exc)})
                return
            emit({"id": cmd_id, "ok": True, "result": dump(result)})
        if scope.cancelled_caught and not state.close_requested:
            emit({"id": cmd_id, "ok": False, "error": {"kind": "cancelled", "code": None, "message": "cancelled"}})
    finally:
        state.in_flight.pop(cmd_id, None)


async def read_commands(state: State, tg: anyio.abc.TaskGroup) -> None:
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if line == "":
            diag("stdin EOF: closing")
            state.close_requested = True
            state.closing.set()
            return
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            if not isinstance(cmd, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            emit({"id": None, "ok": False, "error": {"kind": "driver", "code": None, "message": f"bad command: {exc}"}})
            continue
        op = cmd.get("op")
        cmd_id = cmd.get("id")
        if op == "close":
            state.close_requested = True
            state.close_id = cmd_id
            state.closing.set()
            return
        if op == "cancel":
            target = state.in_flight.get(cmd.get("target"))
            if target is not None:
                target.cancel()
            emit({"id": cmd_id, "ok": True, "result": {"cancelled": target is not None}})
            continue
        if cmd_id in state.in_flight:
            emit({"id": cmd_id, "ok": False, "error": {"kind": "driver", "code": None, "message": "id in flight"}})
            continue
        scope = anyio.CancelScope()
        state.in_flight[cmd_id] = scope
        tg.start_soon(run_command, state, cmd, scope)


# --------------------------------------------------------------------------- main


def build_server(args: argparse.Namespace) -> Any:
    if args.transport == "stdio":
        env = dict(os.environ)
        for item in args.env or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise SystemExit(f"--env expects K=V, got {item!r}")
            env[key] = value
        return StdioServerParameters(command=args.command[0], args=args.command[1:], env=env, cwd=args.cwd)
    headers: dict[str, str] = {}
    if args.bearer is not None:
        headers["Authorization"] = f"Bearer {args.bearer}"
    for item in args.header or []:
        name, sep, value = item.partition(":")
        if not sep:
            raise SystemExit(f"--header expects 'Name: value', got {item!r}")
        headers[name.strip()] = value.strip()
    auth = None
    if args.oauth_client:
        from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

        client_id, sep, secret = args.oauth_client.partition(":")
        if not sep or not args.oauth_issuer:
            raise SystemExit("--oauth-client expects ID:SECRET, with --oauth-issuer URL")
        auth = ClientCredentialsOAuthProvider(
            server_url=args.url,
            storage=MemoryTokens(),
            client_id=client_id,
            client_secret=secret,
            issuer=args.oauth_issuer,
        )
    http = httpx2.AsyncClient(
        headers=headers,
        auth=auth,
        timeout=httpx2.Timeout(30.0, read=300.0),
        trust_env=False,
        event_hooks={"response": [_record_http_status]},
    )
    return streamable_http_client(args.url, http_client=http), http


class MemoryTokens:
    """The SDK's TokenStorage, in memory; tells the test once a token is stored."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens
        claims: dict[str, Any] = {}
        try:
            body = tokens.access_token.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except Exception:  # an opaque token: nothing to show
            pass
        emit({"event": "oauth_token", "sub": claims.get("sub"), "aud": claims.get("aud")})

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client_info: Any) -> None:
        self.client = client_info


# The SDK maps an HTTP error status without a JSON-RPC body to a generic -32603;
# keep the last error status so connect_error can report it (e.g. 401 vs 404).
_last_http_error: dict[str, Any] = {}


async def _record_http_status(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        _last_http_error.clear()
        _last_http_error.update(
            {"status": response.status_code, "method": response.request.method, "url": str(response.request.url)}
        )


async def session(args: argparse.Namespace) -> int:
    override: dict[str, Any] = {}
    if args.elicitation_content:
        override = json.loads(args.elicitation_content)
        if not isinstance(override, dict):
            raise SystemExit("--elicitation-content must be a JSON object")
    http = None
    server = build_server(args)
    if isinstance(server, tuple):
        server, http = server
    # --mode default: no `mode=` at all, so the SDK's own default applies (what a user gets).
    chosen: dict[str, Any] = {} if args.mode == "default" else {"mode": args.mode}
    client = Client(
        server,
        **chosen,
        cache=None,  # every list_* must reach the server (descriptor changes)
        message_handler=on_message,
        elicitation_callback=(
            make_elicitation_callback(args.elicitation, override) if args.elicitation != "none" else None
        ),
        sampling_callback=make_sampling_callback(args.sampling) if args.sampling is not None else None,
        client_info=types.Implementation(name=args.client_name, version="1.0.0"),
        log_level=args.log_level,
    )
    state = State(client=client)
    connected = False
    try:
        async with AsyncExitStack() as stack:
            if http is not None:
                await stack.enter_async_context(http)
            # Entered with `async with` semantics: the SDK's own teardown is shielded and
            # bounded (stdio: close stdin, SIGTERM, SIGKILL; HTTP: DELETE the session).
            await stack.enter_async_context(client)
            connected = True
            emit(
                {
                    "event": "ready",
                    "protocolVersion": client.protocol_version,
                    "serverInfo": dump(client.server_info),
                    "capabilities": dump(client.server_capabilities),
                }
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_commands, state, tg)
                await state.closing.wait()
                tg.cancel_scope.cancel()
    except Exception as exc:
        if connected:
            raise
        diag(f"connect failed:\n{traceback.format_exc()}")
        event: dict[str, Any] = {"event": "connect_error", "error": error_obj(_unwrap(exc))}
        if _last_http_error:
            event["httpStatus"] = _last_http_error["status"]
        emit(event)
        return EXIT_CONNECT
    if state.close_id is not None:
        emit({"id": state.close_id, "ok": True, "result": {}})
    return EXIT_OK


def _unwrap(exc: BaseException) -> BaseException:
    """The first leaf of a (nested) exception group, else the exception itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def amain(args: argparse.Namespace) -> int:
    code = EXIT_DEADLINE
    with anyio.move_on_after(args.deadline_s) as deadline_scope:
        async with anyio.create_task_group() as tg:

            async def on_signals() -> None:
                nonlocal code
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        diag(f"signal {signum}: closing")
                        code = 128 + int(signum)
                        tg.cancel_scope.cancel()
                        return

            async def main_task() -> None:
                nonlocal code
                code = await session(args)
                tg.cancel_scope.cancel()

            tg.start_soon(on_signals)
            tg.start_soon(main_task)
    if deadline_scope.cancelled_caught:
        diag(f"deadline of {args.deadline_s}s reached")
        emit({"event": "deadline", "seconds": args.deadline_s})
        return EXIT_DEADLINE
    return code


def parse_args(argv: list[str]) -> argparse.Namespace:
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]

    def add_common(p: argparse.ArgumentParser, suppress: bool) -> None:
        d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
        p.add_argument("--elicitation", choices=["accept", "decline", "cancel", "none"], default=d("none"))
        p.add_argument("--elicitation-content", default=d(None), help="JSON object merged into accepted forms")
        p.add_argument("--sampling", default=d(None), metavar="TEXT")
        p.add_argument("--mode", default=d("legacy"), help="legacy | auto | default | a modern protocol version")
        p.add_argument("--log-level", default=d(None))
        p.add_argument("--client-name", default=d("toolgate-test-driver"))
        p.add_argument("--deadline-s", type=float, default=d(120.0))

    parser = argparse.ArgumentParser(prog="driver.py", description="JSON-Lines MCP test client")
    add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="transport", required=True)
    p_stdio = sub.add_parser("stdio", help="spawn a server: stdio [opts] -- CMD ARGS...")
    add_common(p_stdio, suppress=True)
    p_stdio.add_argument("--env", action="append", metavar="K=V")
    p_stdio.add_argument("--cwd", default=None)
    p_http = sub.add_parser("http", help="streamable HTTP: http URL [--bearer TOKEN]")
    add_common(p_http, suppress=True)
    p_http.add_argument("url")
    p_http.add_argument("--bearer", default=None)
    p_http.add_argument("--header", action="append", metavar="'Name: value'")
    p_http.add_argument("--oauth-client", default=None, metavar="ID:SECRET")
    p_http.add_argument("--oauth-issuer", default=None, metavar="URL")
    args = parser.parse_args(argv)
    args.command = command
    if args.transport == "stdio" and not command:
        parser.error("stdio needs a command after --")
    if args.transport == "http" and command:
        parser.error("http takes no command")
    if args.deadline_s <= 0:
        parser.error("--deadline-s must be positive")
    return args


def main() -> None:
    try:
        args = parse_args(sys.argv[1:])
    except SystemExit as exc:
        sys.stderr.flush()
        os._exit(EXIT_USAGE if exc.code not in (0, None) else 0)

    def watchdog() -> None:
        diag("watchdog: teardown did not finish; hard exit")
        try:
            emit({"event": "deadline", "seconds": args.deadline_s})
        finally:
            os._exit(EXIT_WATCHDOG)

    timer = threading.Timer(args.deadline_s + WATCHDOG_GRACE_S, watchdog)
    timer.daemon = True
    timer.start()
    try:
        code = anyio.run(amain, args)
    except SystemExit as exc:
        diag(str(exc))
        code = EXIT_USAGE
    except BaseException:
        diag(f"fatal:\n{traceback.format_exc()}")
        code = 1
    sys.stderr.flush()
    # os._exit: a thread may still be blocked reading stdin; do not wait for it.
    os._exit(code)


if __name__ == "__main__":
    main()
