#!/usr/bin/env python3
"""Conformance fixture: an MCP server with everything the MCP conformance suite asks of a server.

The official suite (npm ``@modelcontextprotocol/conformance``, server mode) connects to a server
under test and exercises a fixed set of tools, resources, resource templates and prompts
(``test_simple_text``, ``test://static-text``, ``test_simple_prompt``, ...). This module is our own
implementation of that set, written on the low-level ``Server`` of the official MCP Python SDK
(``mcp`` 2.x). It lets us run the suite against toolgate: toolgate launches this file as a stdio
upstream and the suite talks to toolgate's gateway endpoint, which forwards ``tools/call``,
``resources/read``, ``prompts/get`` and so on to it. It can also serve streamable HTTP itself, so
the suite can be run against it directly (the baseline for what toolgate should pass through).

What it exposes (names and contents as the suite expects them):

* tools: ``test_simple_text``, ``test_image_content``, ``test_audio_content``,
  ``test_embedded_resource``, ``test_multiple_content_types``, ``test_tool_with_logging``,
  ``test_error_handling``, ``test_tool_with_progress``, ``test_sampling``, ``test_elicitation``,
  ``test_elicitation_sep1034_defaults``, ``test_elicitation_sep1330_enums``,
  ``json_schema_2020_12_tool``, ``test_reconnection``
* two tools of toolgate's own tests (the suite never calls them): ``toolgate_log_env`` logs the
  value of the environment variable ``FIXTURE_LOG_SECRET`` at ``warning`` (an upstream leaking a
  secret it holds through its log), ``toolgate_touch`` sends
  ``notifications/resources/updated`` for each resource this connection subscribed to
* resources: ``test://static-text``, ``test://static-binary``, ``test://watched-resource``
* resource template: ``test://template/{id}/data``
* prompts: ``test_simple_prompt``, ``test_prompt_with_arguments``,
  ``test_prompt_with_embedded_resource``, ``test_prompt_with_image``
* also: ``logging/setLevel`` (filters the log notifications), ``completion/complete`` (prompt
  arguments and the template's ``id``), ``resources/subscribe`` / ``resources/unsubscribe``, ``ping``.

Several tools call back to the client while they run: ``test_tool_with_logging`` sends
``notifications/message``, ``test_tool_with_progress`` sends ``notifications/progress`` (when the
call carries a progress token), ``test_sampling`` sends ``sampling/createMessage`` and the three
elicitation tools send ``elicitation/create``; all of these go on the calling request's channel.
``test_reconnection`` closes the call's SSE stream before answering (streamable HTTP only, and only
when the client's protocol version allows resuming), so the client has to reconnect with
``Last-Event-ID`` to get the result; on stdio it simply answers.

Run it:

    # stdio (the default; what toolgate launches)
    /opt/toolgate-ci/mcp/client/bin/python3 tests/mcp/conformance/fixture_server.py

    # streamable HTTP at http://127.0.0.1:PORT/mcp
    /opt/toolgate-ci/mcp/client/bin/python3 tests/mcp/conformance/fixture_server.py --http PORT
    bash tests/mcp/conformance/conformance.sh http://127.0.0.1:PORT/mcp

Over HTTP it binds 127.0.0.1 unless ``--host`` says otherwise, checks Host/Origin against the
loopback names (DNS-rebinding protection, which the suite tests) plus the bound host, keeps
sessions, and keeps a bounded in-memory event store so streams can be resumed. It needs only the
standard library and the SDK, keeps all state in memory and writes no files, so any user
(``nobody`` included) can run it.
"""

from __future__ import annotations

import argparse
import base64
import contextvars
import json
import os
import logging
import struct
import sys
import zlib
from collections import OrderedDict
from typing import Any

import anyio
import mcp.types as types
from mcp import UriTemplate
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

SERVER_NAME = "toolgate-conformance-fixture"
SERVER_VERSION = "1.0.0"

log = logging.getLogger("fixture_server")

# JSON-RPC error codes used here. -32002 is "resource not found" in the handshake-era protocol
# versions (2025-06-18, 2025-11-25) this fixture is tested with.
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002


# --------------------------------------------------------------------------------------------
# Media: a 1x1 red PNG and a short silent WAV, built at import time from the standard library.
# --------------------------------------------------------------------------------------------


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def _red_pixel_png() -> bytes:
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit, truecolour RGB
    scanline = b"\x00" + bytes((255, 0, 0))  # filter byte "none", then one red pixel
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(scanline))
        + _png_chunk(b"IEND", b"")
    )


def _silent_wav(samples: int = 80, rate: int = 8000) -> bytes:
    """Mono 8-bit PCM, `samples` frames of silence (0x80 is the zero level for 8-bit PCM)."""
    data = b"\x80" * samples
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)  # PCM, mono, rate, byte rate, align, bits
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


PNG_B64 = base64.b64encode(_red_pixel_png()).decode("ascii")
WAV_B64 = base64.b64encode(_silent_wav()).decode("ascii")


def _image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG_B64, mime_type="image/png")


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


# --------------------------------------------------------------------------------------------
# Per-connection state (log level, subscriptions)
# --------------------------------------------------------------------------------------------

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
MAX_TRACKED_CONNECTIONS = 1024


class ConnectionState:
    def __init__(self) -> None:
        self.log_level: str = "debug"  # send everything until the client asks for less
        self.subscriptions: set[str] = set()


_states: OrderedDict[str, ConnectionState] = OrderedDict()


def _connection_key(ctx: Any) -> str:
    """The streamable-HTTP session id of the request, or "stdio" (one connection per process)."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is not None:
        session_id = headers.get("mcp-session-id")
        if session_id:
            return "http:" + session_id
        return "http:(no session)"
    return "stdio"


def _state(ctx: Any) -> ConnectionState:
    key = _connection_key(ctx)
    state = _states.get(key)
    if state is None:
        state = _states[key] = ConnectionState()
        while len(_states) > MAX_TRACKED_CONNECTIONS:
            _states.popitem(last=False)
    else:
        _states.move_to_end(key)
    return state


async def _log(ctx: Any, level: str, message: str) -> None:
    """Send a notifications/message on the calling request's channel, honouring logging/setLevel."""
    if LOG_LEVELS.index(level) < LOG_LEVELS.index(_state(ctx).log_level):
        return
    await ctx.session.send_notification(
        types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, logger=SERVER_NAME, data=message),
        ),
        related_request_id=ctx.request_id,
    )


def _request_scoped(ctx: Any) -> ServerMessageMetadata:
    return ServerMessageMetadata(related_request_id=ctx.request_id)


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------

NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}

JSON_SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema"

TOOLS: list[types.Tool] = [
    types.Tool(
        name="test_simple_text",
        description="Returns a fixed text content block.",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_image_content",
        description="Returns an image content block (a 1x1 red PNG).",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_audio_content",
        description="Returns an audio content block (a short silent WAV).",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_embedded_resource",
        description="Returns an embedded text resource.",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_multiple_content_types",
        description="Returns text, image and embedded resource content blocks in one result.",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_tool_with_logging",
        description="Sends three info log notifications, about 50 ms apart, while it runs.",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_error_handling",
        description="Always fails: returns a result with isError set.",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_tool_with_progress",
        description="Reports progress 0, 50 and 100 of 100, about 50 ms apart, when given a progress token.",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_sampling",
        description="Asks the client for an LLM completion (sampling/createMessage) of the prompt.",
        input_schema={
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
            "required": ["prompt"],
        },
    ),
    types.Tool(
        name="test_elicitation",
        description="Asks the user for a username and an email address (elicitation/create).",
        input_schema={
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to show the user"}},
            "required": ["message"],
        },
    ),
    types.Tool(
        name="test_elicitation_sep1034_defaults",
        description="Elicitation whose schema gives defaults for every primitive type (SEP-1034).",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_elicitation_sep1330_enums",
        description="Elicitation whose schema uses all five enum variants (SEP-1330).",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="json_schema_2020_12_tool",
        description="Tool with JSON Schema 2020-12 features",
        input_schema={
            "$schema": JSON_SCHEMA_2020_12,
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="toolgate_log_env",
        description="Logs the value of FIXTURE_LOG_SECRET (toolgate's tests: screening of relayed logs).",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="toolgate_touch",
        description="Says every subscribed resource was updated (toolgate's tests: subscriptions).",
        input_schema=NO_ARGS,
    ),
    types.Tool(
        name="test_reconnection",
        description="Closes the call's SSE stream before answering, so the client must resume (SEP-1699).",
        input_schema=NO_ARGS,
    ),
]

TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def _missing_string_args(tool: types.Tool, arguments: dict[str, Any]) -> list[str]:
    schema = tool.input_schema
    return [
        name
        for name in schema.get("required", [])
        if not isinstance(arguments.get(name), str) and schema["properties"][name].get("type") == "string"
    ]


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(message)], is_error=True)


async def tool_simple_text(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[_text("This is a simple text response for testing.")])


async def tool_image_content(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[_image()])


async def tool_audio_content(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav")])


async def tool_embedded_resource(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=resource)])


async def tool_multiple_content_types(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
    )
    return types.CallToolResult(
        content=[
            _text("Multiple content types test:"),
            _image(),
            types.EmbeddedResource(type="resource", resource=resource),
        ]
    )


async def tool_with_logging(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    await _log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await _log(ctx, "info", "Tool execution completed")
    return types.CallToolResult(content=[_text("Tool with logging executed successfully")])


async def tool_error_handling(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    return _error_result("This tool intentionally returns an error for testing")


async def tool_with_progress(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    # report_progress is a no-op when the call carried no progress token.
    await ctx.session.report_progress(0, 100, "Started")
    await anyio.sleep(0.05)
    await ctx.session.report_progress(50, 100, "Half way")
    await anyio.sleep(0.05)
    await ctx.session.report_progress(100, 100, "Done")
    return types.CallToolResult(content=[_text("Tool with progress executed successfully")])


async def tool_sampling(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    caps = ctx.session.client_capabilities
    if caps is None or caps.sampling is None:
        return _error_result("The client does not support sampling (no sampling capability)")
    request = types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=_text(args["prompt"]))],
            max_tokens=100,
        )
    )
    try:
        result = await ctx.session.send_request(request, types.CreateMessageResult, metadata=_request_scoped(ctx))
    except MCPError as exc:
        return _error_result(f"Sampling failed: {exc.message}")
    content = result.content
    if isinstance(content, types.TextContent):
        reply = content.text
    else:
        reply = json.dumps(content.model_dump(by_alias=True, mode="json", exclude_none=True))
    return types.CallToolResult(content=[_text(f"LLM response: {reply}")])


async def _elicit(ctx: Any, message: str, schema: dict[str, Any]) -> types.ElicitResult | types.CallToolResult:
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None:
        return _error_result("The client does not support elicitation (no elicitation capability)")
    try:
        return await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    except MCPError as exc:
        return _error_result(f"Elicitation failed: {exc.message}")


def _describe(result: types.ElicitResult) -> str:
    return f"action={result.action}, content={json.dumps(result.content)}"


async def tool_elicitation(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    result = await _elicit(ctx, args["message"], schema)
    if isinstance(result, types.CallToolResult):
        return result
    return types.CallToolResult(content=[_text(f"User response: {_describe(result)}")])


async def tool_elicitation_sep1034_defaults(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
        "required": [],
    }
    result = await _elicit(ctx, "Please review and update the form fields with defaults", schema)
    if isinstance(result, types.CallToolResult):
        return result
    return types.CallToolResult(content=[_text(f"Elicitation completed: {_describe(result)}")])


async def tool_elicitation_sep1330_enums(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Untitled single-select enum",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Titled single-select enum",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "description": "Legacy titled enum (enumNames, deprecated)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Untitled multi-select enum",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Titled multi-select enum",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
        "required": [],
    }
    result = await _elicit(ctx, "Please choose from the enum fields", schema)
    if isinstance(result, types.CallToolResult):
        return result
    return types.CallToolResult(content=[_text(f"Elicitation completed: {_describe(result)}")])


async def tool_json_schema_2020_12(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(f"Received: {json.dumps(args, sort_keys=True)}")])


async def tool_reconnection(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    # The transport offers close_sse_stream only on streamable HTTP with an event store and a
    # client that can resume (protocol 2025-11-25 or later); everywhere else just answer.
    close = getattr(ctx, "close_sse_stream", None)
    if close is None:
        return types.CallToolResult(content=[_text("Reconnection test completed (the stream was not closed)")])
    await anyio.sleep(0.05)
    await close()
    # Give the client time to notice and come back with Last-Event-ID; the answer is stored in the
    # event store either way and replayed on reconnection.
    await anyio.sleep(0.2)
    return types.CallToolResult(content=[_text("Reconnection test completed (the stream was closed mid-call)")])


async def tool_log_env(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    await _log(ctx, "warning", "the key is " + os.environ.get("FIXTURE_LOG_SECRET", "(unset)"))
    await _log(ctx, "debug", "a debug line")
    return types.CallToolResult(content=[_text("logged")])


async def tool_touch(ctx: Any, args: dict[str, Any]) -> types.CallToolResult:
    uris = sorted(_state(ctx).subscriptions)
    for uri in uris:
        await ctx.session.send_resource_updated(uri)
    return types.CallToolResult(content=[_text(f"touched {len(uris)}")])


TOOL_HANDLERS = {
    "toolgate_log_env": tool_log_env,
    "toolgate_touch": tool_touch,
    "test_simple_text": tool_simple_text,
    "test_image_content": tool_image_content,
    "test_audio_content": tool_audio_content,
    "test_embedded_resource": tool_embedded_resource,
    "test_multiple_content_types": tool_multiple_content_types,
    "test_tool_with_logging": tool_with_logging,
    "test_error_handling": tool_error_handling,
    "test_tool_with_progress": tool_with_progress,
    "test_sampling": tool_sampling,
    "test_elicitation": tool_elicitation,
    "test_elicitation_sep1034_defaults": tool_elicitation_sep1034_defaults,
    "test_elicitation_sep1330_enums": tool_elicitation_sep1330_enums,
    "json_schema_2020_12_tool": tool_json_schema_2020_12,
    "test_reconnection": tool_reconnection,
}
assert set(TOOL_HANDLERS) == set(TOOLS_BY_NAME)


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    tool = TOOLS_BY_NAME.get(params.name)
    if tool is None:
        raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
    args = dict(params.arguments or {})
    missing = _missing_string_args(tool, args)
    if missing:
        return _error_result(f"Missing or non-string required argument(s): {', '.join(missing)}")
    return await TOOL_HANDLERS[params.name](ctx, args)


# --------------------------------------------------------------------------------------------
# Resources and the resource template
# --------------------------------------------------------------------------------------------

STATIC_TEXT = "This is the content of the static text resource."
WATCHED_TEXT = "This is a resource that can be subscribed to for updates."

RESOURCES = [
    types.Resource(
        uri="test://static-text",
        name="static-text",
        title="Static text resource",
        description="A static text resource for testing",
        mime_type="text/plain",
    ),
    types.Resource(
        uri="test://static-binary",
        name="static-binary",
        title="Static binary resource",
        description="A static binary resource (a 1x1 red PNG) for testing",
        mime_type="image/png",
    ),
    types.Resource(
        uri="test://watched-resource",
        name="watched-resource",
        title="Watched resource",
        description="A resource clients can subscribe to",
        mime_type="text/plain",
    ),
]

TEMPLATE_URI = "test://template/{id}/data"
TEMPLATE = UriTemplate.parse(TEMPLATE_URI)

RESOURCE_TEMPLATES = [
    types.ResourceTemplate(
        uri_template=TEMPLATE_URI,
        name="template-data",
        title="Template data",
        description="A resource template: {id} is substituted into the returned data",
        mime_type="application/json",
    )
]


async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def list_resource_templates(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    contents: types.TextResourceContents | types.BlobResourceContents
    if uri == "test://static-text":
        contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=STATIC_TEXT)
    elif uri == "test://static-binary":
        contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_B64)
    elif uri == "test://watched-resource":
        contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=WATCHED_TEXT)
    else:
        match = TEMPLATE.match(uri)
        resource_id = match.get("id") if match else None
        if not isinstance(resource_id, str) or not resource_id:
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}", {"uri": uri})
        data = {"id": resource_id, "templateTest": True, "data": f"Data for ID: {resource_id}"}
        contents = types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(data, separators=(",", ":"))
        )
    return types.ReadResourceResult(contents=[contents])


async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
    _state(ctx).subscriptions.add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    _state(ctx).subscriptions.discard(str(params.uri))
    return types.EmptyResult()


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments"),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments",
        arguments=[
            types.PromptArgument(name="arg1", description="First test argument", required=True),
            types.PromptArgument(name="arg2", description="Second test argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource",
        arguments=[
            types.PromptArgument(name="resourceUri", description="URI of the resource to embed", required=True)
        ],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with image content"),
]

PROMPTS_BY_NAME = {prompt.name: prompt for prompt in PROMPTS}


async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    prompt = PROMPTS_BY_NAME.get(params.name)
    if prompt is None:
        raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name}")
    args = dict(params.arguments or {})
    missing = [a.name for a in prompt.arguments or [] if a.required and not isinstance(args.get(a.name), str)]
    if missing:
        raise MCPError(INVALID_PARAMS, f"Missing required argument(s) for {prompt.name}: {', '.join(missing)}")

    def user(content: types.ContentBlock) -> types.PromptMessage:
        return types.PromptMessage(role="user", content=content)

    if prompt.name == "test_simple_prompt":
        messages = [user(_text("This is a simple prompt for testing."))]
    elif prompt.name == "test_prompt_with_arguments":
        messages = [user(_text(f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"))]
    elif prompt.name == "test_prompt_with_embedded_resource":
        resource = types.TextResourceContents(
            uri=args["resourceUri"], mime_type="text/plain", text="Embedded resource content for testing."
        )
        messages = [
            user(types.EmbeddedResource(type="resource", resource=resource)),
            user(_text("Please process the embedded resource above.")),
        ]
    else:  # test_prompt_with_image
        messages = [user(_image()), user(_text("Please analyze the image above."))]
    return types.GetPromptResult(description=prompt.description, messages=messages)


# --------------------------------------------------------------------------------------------
# Completion and logging
# --------------------------------------------------------------------------------------------

COMPLETIONS: dict[tuple[str, str, str], list[str]] = {
    ("ref/prompt", "test_prompt_with_arguments", "arg1"): ["paris", "park", "party", "test", "testValue1"],
    ("ref/prompt", "test_prompt_with_arguments", "arg2"): ["world", "wonder", "test", "testValue2"],
    ("ref/prompt", "test_prompt_with_embedded_resource", "resourceUri"): [
        "test://static-text",
        "test://watched-resource",
        "test://example-resource",
    ],
    ("ref/resource", TEMPLATE_URI, "id"): ["1", "2", "3", "123"],
}


async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
    ref = params.ref
    key_name = ref.name if isinstance(ref, types.PromptReference) else ref.uri
    candidates = COMPLETIONS.get((ref.type, key_name, params.argument.name), [])
    values = [v for v in candidates if v.startswith(params.argument.value)]
    return types.CompleteResult(completion=types.Completion(values=values[:100], total=len(values), has_more=False))


async def set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    _state(ctx).log_level = params.level
    return types.EmptyResult()


def build_server() -> Server:
    server = Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        title="toolgate conformance fixture",
        instructions="Test fixture implementing the MCP conformance suite's server scenarios.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
    )
    # Registered directly rather than through the deprecated `on_set_logging_level` keyword (which
    # would print an MCPDeprecationWarning); the logging capability is derived from it all the same.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_logging_level)
    return server


# --------------------------------------------------------------------------------------------
# Streamable HTTP: a bounded in-memory event store, scoped per session
# --------------------------------------------------------------------------------------------


class _SessionCell:
    """Mutable holder for the session id of the HTTP request being served.

    Set into a context variable for each HTTP request. Tasks a request spawns inherit the same
    cell; that is how the session's message router (started while serving `initialize`) learns the
    session id once the response announces it, so the events it stores are tagged with it.
    """

    __slots__ = ("session_id",)

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id


_request_session: contextvars.ContextVar[_SessionCell | None] = contextvars.ContextVar(
    "fixture_request_session", default=None
)


def _current_session() -> str | None:
    cell = _request_session.get()
    return cell.session_id if cell is not None else None


class MemoryEventStore(EventStore):
    """Keeps the last `limit` SSE events so a client can resume a stream with Last-Event-ID.

    The SDK names streams by JSON-RPC request id, which repeats across sessions, so every event is
    also tagged with its session and a replay only returns events of the same session and stream.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._counter = 0
        self._events: OrderedDict[str, tuple[str | None, str, types.JSONRPCMessage | None]] = OrderedDict()

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self._counter += 1
        event_id = str(self._counter)
        self._events[event_id] = (_current_session(), stream_id, message)
        while len(self._events) > self._limit:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        origin = self._events.get(last_event_id)
        if origin is None:
            return None
        session, stream_id, _ = origin
        requester = _current_session()
        if session is not None and requester is not None and session != requester:
            return None  # someone else's stream
        after = False
        for event_id, (ev_session, ev_stream, message) in list(self._events.items()):
            if not after:
                after = event_id == last_event_id
                continue
            if ev_stream == stream_id and ev_session == session and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def _with_session_cell(app: Any) -> Any:
    """ASGI wrapper: give each HTTP request a _SessionCell, filled from its Mcp-Session-Id header
    or, for the request that opens a session, from the response's."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        session_id = None
        for name, value in scope.get("headers", []):
            if name.lower() == b"mcp-session-id":
                session_id = value.decode("latin-1")
        cell = _SessionCell(session_id)
        _request_session.set(cell)

        async def send_and_note(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start" and cell.session_id is None:
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        cell.session_id = value.decode("latin-1")
            await send(message)

        await app(scope, receive, send_and_note)

    return wrapped


def _security_settings(host: str) -> TransportSecuritySettings:
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if bound not in hosts and bound not in ("0.0.0.0", "[::]"):
        hosts.append(bound)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for name in hosts for h in (name, f"{name}:*")],
        allowed_origins=[o for name in hosts for o in (f"http://{name}", f"http://{name}:*")],
    )


async def serve_http(host: str, port: int) -> None:
    import uvicorn  # a dependency of the SDK's HTTP transport

    server = build_server()
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        event_store=MemoryEventStore(),
        retry_interval=500,
        transport_security=_security_settings(host),
        host=host,
    )
    config = uvicorn.Config(_with_session_cell(app), host=host, port=port, log_level="warning", lifespan="on")
    print(f"{SERVER_NAME}: serving streamable HTTP at http://{host}:{port}/mcp", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve()


async def serve_stdio() -> None:
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="MCP server implementing the conformance suite's server scenarios (stdio by default)."
    )
    parser.add_argument("--http", metavar="PORT", type=int, help="serve streamable HTTP on PORT at /mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind with --http (default 127.0.0.1)")
    parser.add_argument("--verbose", action="store_true", help="log the SDK's debug output to stderr")
    opts = parser.parse_args(argv)

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if opts.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if opts.http is not None:
            if not 0 < opts.http < 65536:
                parser.error("--http needs a port between 1 and 65535")
            anyio.run(serve_http, opts.host, opts.http)
        else:
            anyio.run(serve_stdio)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
