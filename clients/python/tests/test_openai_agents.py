"""The OpenAI Agents SDK adapter, in the SDK's real run loop with a scripted model.

No model is called over the network: `agents.testing.ScriptedModel` plays the model's turns
(a tool call, then a final message), and `Runner.run` does the rest as it would with a real
model: it runs the tool guardrails, the tool, and sends the tool's output back to the model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import toolgate  # noqa: E402
from toolgate.adapters.openai_agents import ToolgateGuardrails  # noqa: E402

from .conftest import BOB_TOKEN, DEV_TOKEN, Sidecar  # noqa: E402
from .test_client import Human  # noqa: E402

RAN: list[tuple[str, dict[str, Any]]] = []


@function_tool
def read_file(path: str) -> str:
    """Read a file below the project root."""
    RAN.append(("read_file", {"path": path}))
    if path == "notes.txt":
        return "call ops@example.com, key AKIAQWERTYUIOPASDFGH"
    return f"contents of {path}"


@function_tool
def write_file(path: str, content: str) -> str:
    """Write a whole file."""
    RAN.append(("write_file", {"path": path, "content": content}))
    return "written"


async def run_one(guard: ToolgateGuardrails, tool: str, args: dict[str, Any]) -> str:
    """One model turn calling `tool`, then a final answer; returns what the model was sent as
    the tool's output."""
    model = ScriptedModel(
        [[function_call(tool, args, call_id="call_1")], [assistant_message("done")]]
    )
    agent = Agent(
        name="coder", instructions="-", model=model, tools=guard.protect([read_file, write_file])
    )
    result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    sent = [
        item
        for item in model.last_call.input  # type: ignore[union-attr]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert len(sent) == 1, sent
    return str(sent[0]["output"])


@pytest.fixture
def guard(sidecar: Sidecar) -> ToolgateGuardrails:
    RAN.clear()
    return ToolgateGuardrails(toolgate.AsyncClient(sidecar.url, DEV_TOKEN, approval_timeout=20))


async def test_allowed_call_runs_and_its_output_reaches_the_model(
    guard: ToolgateGuardrails,
) -> None:
    assert await run_one(guard, "read_file", {"path": "src/main.rs"}) == "contents of src/main.rs"
    assert RAN == [("read_file", {"path": "src/main.rs"})]


async def test_denied_call_never_runs_and_the_model_is_told_why(guard: ToolgateGuardrails) -> None:
    out = await run_one(guard, "read_file", {"path": "src/../.env"})
    assert RAN == []
    assert out.startswith("toolgate did not run this tool (forbidden)")
    assert "deny-listed-paths" in out


async def test_masked_output_is_what_the_model_gets(guard: ToolgateGuardrails) -> None:
    out = await run_one(guard, "read_file", {"path": "notes.txt"})
    assert RAN == [("read_file", {"path": "notes.txt"})]
    assert "ops@example.com" not in out and "AKIAQWERTYUIOPASDFGH" not in out
    assert "<redacted:email>" in out and "<redacted:aws-access-key>" in out


async def test_pending_call_waits_for_the_human(
    guard: ToolgateGuardrails, sidecar: Sidecar
) -> None:
    with toolgate.Client(sidecar.url, BOB_TOKEN) as bob:
        human = Human(bob, "write_file", "src/agents.rs")
        out = await run_one(guard, "write_file", {"path": "src/agents.rs", "content": "// hi\n"})
        human.join()
    assert out == "written"
    assert RAN == [("write_file", {"path": "src/agents.rs", "content": "// hi\n"})]


async def test_refused_approval_never_runs(guard: ToolgateGuardrails, sidecar: Sidecar) -> None:
    with toolgate.Client(sidecar.url, BOB_TOKEN) as bob:
        human = Human(bob, "write_file", "src/refused.rs", deny=True)
        out = await run_one(guard, "write_file", {"path": "src/refused.rs", "content": "x"})
        human.join()
    assert RAN == []
    assert "(approval_denied)" in out and "not today" in out


async def test_unreachable_sidecar_fails_closed(closed_url: str) -> None:
    RAN.clear()
    guard = ToolgateGuardrails(toolgate.AsyncClient(closed_url, DEV_TOKEN, timeout=2))
    out = await run_one(guard, "read_file", {"path": "src/main.rs"})
    assert RAN == []
    assert "(unreachable)" in out


def test_protect_copies_the_tools() -> None:
    guard = ToolgateGuardrails(toolgate.AsyncClient("http://127.0.0.1:1"))
    [wrapped] = guard.protect([read_file])
    assert wrapped is not read_file
    assert wrapped.tool_input_guardrails == [guard.input]
    assert not read_file.tool_input_guardrails
    assert wrapped.params_json_schema == read_file.params_json_schema
    assert json.loads(json.dumps(wrapped.params_json_schema))["required"] == ["path"]
