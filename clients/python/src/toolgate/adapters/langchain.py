"""toolgate in front of LangChain tools (LangGraph's `ToolNode`, LangChain agents).

    from toolgate import Client, AsyncClient
    from toolgate.adapters.langchain import guard_tool, guard_tools

    tools = guard_tools([read_file, write_file], client=Client(token="..."))
    graph = ...  # ToolNode(tools) in a LangGraph graph, or an agent given these tools

Each wrapped tool keeps the original's name, description and argument schema, so the model
sees the same tool. Invoking it runs toolgate's loop (`Client.call`): authorize, wait for a
human when the call is pending, run the original only on allow (with masked arguments when
toolgate masks them), and return what the output gate lets through. Anything that stops the
call (a deny, a refusal, a timeout, an unreachable sidecar, a blocked output) is a
`ToolException` whose text tells the model why, so the graph goes on with an error
`ToolMessage` (`status="error"`) instead of crashing; the original tool never ran.

Give `client` (sync), `async_client`, or both: `invoke` uses the first, `ainvoke` the second
(or the first in a worker thread when only it is given).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic_core import to_jsonable_python

from ..client import AsyncClient, Client
from ..errors import ToolgateError


def _json_args(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The parsed arguments as JSON (nested models, dates, ...), as toolgate decides on them
    and as the tool, which validates its input again, runs with them."""
    args = to_jsonable_python(kwargs)
    if not isinstance(args, dict):
        raise ToolException("toolgate did not run this tool: its arguments are not an object")
    return args


def guard_tool(
    tool: BaseTool,
    *,
    client: Client | None = None,
    async_client: AsyncClient | None = None,
    name: str | None = None,
    conv_id: str | None = None,
) -> StructuredTool:
    """`tool`, behind toolgate. `name` is its registered toolgate name (default: the tool's)."""
    if client is None and async_client is None:
        raise ValueError("guard_tool needs a toolgate `client`, an `async_client`, or both")
    gate_name = name or tool.name

    def run(config: RunnableConfig, **kwargs: Any) -> Any:
        assert client is not None
        try:
            outcome = client.call(
                gate_name,
                _json_args(kwargs),
                lambda **args: tool.invoke(args, config),
                conv_id=conv_id,
            )
        except ToolgateError as e:
            raise ToolException(e.for_model()) from e
        return outcome.output

    async def arun(config: RunnableConfig, **kwargs: Any) -> Any:
        if async_client is None:
            return await asyncio.to_thread(run, config, **kwargs)

        async def invoke(**args: Any) -> Any:
            return await tool.ainvoke(args, config)

        try:
            outcome = await async_client.call(
                gate_name, _json_args(kwargs), invoke, conv_id=conv_id
            )
        except ToolgateError as e:
            raise ToolException(e.for_model()) from e
        return outcome.output

    return StructuredTool.from_function(
        func=run if client is not None else None,
        coroutine=arun,
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        return_direct=tool.return_direct,
        handle_tool_error=True,
        infer_schema=False,
    )


def guard_tools(
    tools: Iterable[BaseTool],
    *,
    client: Client | None = None,
    async_client: AsyncClient | None = None,
    names: dict[str, str] | None = None,
    conv_id: str | None = None,
) -> list[StructuredTool]:
    """Every tool behind toolgate; `names` maps a tool's name to its toolgate name."""
    names = names or {}
    return [
        guard_tool(
            t,
            client=client,
            async_client=async_client,
            name=names.get(t.name),
            conv_id=conv_id,
        )
        for t in tools
    ]
