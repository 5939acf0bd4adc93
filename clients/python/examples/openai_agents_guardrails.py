#!/usr/bin/env python3
"""The OpenAI Agents SDK with toolgate's tool guardrails: a runnable example.

    pip install "./clients/python[openai-agents]"
    TOOLGATE_URL=http://127.0.0.1:8181 TOOLGATE_TOKEN=demo-dev-token \\
        python clients/python/examples/openai_agents_guardrails.py

With the sidecar of the README's command 1 running. The model is scripted (the SDK's own
`agents.testing.ScriptedModel`) so that the example runs offline and the same every time: it
asks for `read_file` on `src/main.rs` (allowed), then on `.env` (denied: the function never
runs, and the model is told why). To use a real model, drop `model=` from the `Agent` and set
OPENAI_API_KEY.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

import toolgate
from toolgate.adapters.openai_agents import ToolgateGuardrails

ROOT = Path(__file__).resolve().parents[3]  # the checkout: the quickstart's `[exec] root`


@function_tool
def read_file(path: str) -> str:
    """Read a text file of the project.

    Args:
        path: the file, relative to the project root
    """
    print(f"  (read_file ran on {path})")
    return (ROOT / path).read_text()[:200]


async def main() -> None:
    guard = ToolgateGuardrails(toolgate.AsyncClient())
    model = ScriptedModel(
        [
            [function_call("read_file", {"path": "src/main.rs"}, call_id="c1")],
            [function_call("read_file", {"path": ".env"}, call_id="c2")],
            [assistant_message("done")],
        ]
    )
    agent = Agent(
        name="coder",
        instructions="Read what you need.",
        model=model,
        tools=guard.protect([read_file]),
    )
    result = await Runner.run(agent, "Look around", run_config=RunConfig(tracing_disabled=True))
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            print(f"tool output the model got: {str(item.output)[:120]!r}")
    print(f"final answer: {result.final_output}")


if __name__ == "__main__":
    asyncio.run(main())
