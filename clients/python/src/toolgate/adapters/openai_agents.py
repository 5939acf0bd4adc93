"""toolgate as tool guardrails of the OpenAI Agents SDK (`openai-agents`).

    from toolgate import AsyncClient
    from toolgate.adapters.openai_agents import ToolgateGuardrails

    guard = ToolgateGuardrails(AsyncClient(token="..."))
    agent = Agent(name="coder", tools=guard.protect([read_file, write_file]))

The input guardrail authorizes each call before its function runs. A deny, a human's refusal,
an approval that did not come in time, or a sidecar that cannot be reached becomes the tool's
output for the model (`reject_content`), and the function does not run; a pending call waits
for the human (the client's `approval_timeout`). The output guardrail reports what the function
returned to `/v1/results`: when toolgate masks, drops or cuts anything, the model gets the
screened output instead; when it blocks, the model gets why. The SDK does not let a guardrail
change a call's arguments, so a call that toolgate would run with masked arguments is refused.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from agents import (
    FunctionTool,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

from ..client import AsyncClient
from ..errors import OutputBlocked, ToolgateError

# Calls allowed and not yet screened that are remembered, at most.
_MAX_OPEN_CALLS = 4096


def _text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output)


class ToolgateGuardrails:
    """A pair of tool guardrails (`input`, `output`) bound to one toolgate client.

    `names` maps an SDK tool name to its registered toolgate tool name where they differ.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        conv_id: str | None = None,
        names: dict[str, str] | None = None,
    ):
        self.client = client
        self.conv_id = conv_id
        self.names = dict(names or {})
        # tool_call_id -> the decision that allowed it, for the output guardrail (bounded: a
        # tool that raises never reaches its output guardrail).
        self._allowed: OrderedDict[str, str] = OrderedDict()
        self.input: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._authorize, name="toolgate"
        )
        self.output: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._screen, name="toolgate"
        )

    def protect(self, tools: Iterable[Any]) -> list[Any]:
        """The tools, each function tool with these guardrails first (copies; the originals are
        unchanged). Other kinds of tools (hosted ones) are returned as they are: the SDK runs
        guardrails on function tools only."""
        out = []
        for tool in tools:
            if isinstance(tool, FunctionTool):
                tool = dataclasses.replace(
                    tool,
                    tool_input_guardrails=[self.input, *(tool.tool_input_guardrails or [])],
                    tool_output_guardrails=[self.output, *(tool.tool_output_guardrails or [])],
                )
            out.append(tool)
        return out

    def _name(self, sdk_name: str) -> str:
        return self.names.get(sdk_name, sdk_name)

    async def _authorize(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        try:
            args = json.loads(ctx.tool_arguments or "{}")
        except json.JSONDecodeError:
            return ToolGuardrailFunctionOutput.reject_content(
                "toolgate did not run this tool: its arguments are not JSON"
            )
        try:
            decision = await self.client.decide(
                self._name(ctx.tool_name), args, conv_id=self.conv_id
            )
        except ToolgateError as e:
            return ToolGuardrailFunctionOutput.reject_content(e.for_model(), output_info=e.body)
        if "arguments" in decision and decision["arguments"] != args:
            return ToolGuardrailFunctionOutput.reject_content(
                "toolgate did not run this tool: its arguments hold secrets it masks; "
                "send the call without them",
                output_info=decision,
            )
        self._allowed[ctx.tool_call_id] = decision["decision_id"]
        while len(self._allowed) > _MAX_OPEN_CALLS:
            self._allowed.popitem(last=False)
        return ToolGuardrailFunctionOutput.allow(output_info=decision)

    async def _screen(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        decision_id = self._allowed.pop(ctx.tool_call_id, None)
        try:
            report = await self.client.report_result(
                self._name(ctx.tool_name),
                data.output,
                decision_id=decision_id,
                conv_id=self.conv_id,
            )
        except ToolgateError as e:
            return ToolGuardrailFunctionOutput.reject_content(
                f"toolgate could not screen this tool's output, so it is withheld ({e.code})",
                output_info=e.body,
            )
        if report["decision"] == "block":
            return ToolGuardrailFunctionOutput.reject_content(
                OutputBlocked(report).for_model(), output_info=report
            )
        if report["decision"] == "mask" or report["dropped_count"] or report["truncated"]:
            return ToolGuardrailFunctionOutput.reject_content(
                _text(report["output"]), output_info=report
            )
        return ToolGuardrailFunctionOutput.allow(output_info=report)
