#!/usr/bin/env python3
"""LangChain tools behind toolgate, in a LangGraph agent: a runnable example.

    pip install "./clients/python[langchain]" langgraph
    TOOLGATE_URL=http://127.0.0.1:8181 TOOLGATE_TOKEN=demo-dev-token \\
        python clients/python/examples/langchain_tools.py

With the sidecar of the README's command 1 running. The chat model is LangChain's fake one,
playing a fixed script so that the example runs offline: it asks for `read_file` on `.env`
(denied: the graph goes on with an error message the model can read), then on `README.md`
(allowed), then answers. Put a real chat model in its place (`init_chat_model(...)`) to
drive it with one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import toolgate
from toolgate.adapters.langchain import guard_tools

ROOT = Path(__file__).resolve().parents[3]  # the checkout: the quickstart's `[exec] root`


@tool
def read_file(path: str) -> str:
    """Read a text file of the project.

    Args:
        path: the file, relative to the project root
    """
    print(f"  (read_file ran on {path})")
    return (ROOT / path).read_text()[:200]


class ScriptedChatModel(GenericFakeChatModel):
    """The fake chat model, accepting tools as a real one does."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def call(path: str, call_id: str) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": "read_file", "args": {"path": path}, "id": call_id}]
    )


def agent(model: Any, tools: list[Any]) -> Any:
    """The usual LangGraph agent: the model, then its tool calls, until it answers."""
    bound = model.bind_tools(tools)
    return (
        StateGraph(MessagesState)
        .add_node("model", lambda state: {"messages": [bound.invoke(state["messages"])]})
        .add_node("tools", ToolNode(tools))
        .add_edge(START, "model")
        .add_conditional_edges("model", tools_condition)
        .add_edge("tools", "model")
        .compile()
    )


def main() -> None:
    model = ScriptedChatModel(
        messages=iter([call(".env", "c1"), call("README.md", "c2"), AIMessage("done")])
    )
    with toolgate.Client() as client:
        graph = agent(model, guard_tools([read_file], client=client))
        out = graph.invoke({"messages": [("user", "Read the README")]})
    for m in out["messages"]:
        if m.type == "tool":
            print(f"tool message ({m.status}): {str(m.content)[:120]!r}")
    print(f"final answer: {out['messages'][-1].content}")


if __name__ == "__main__":
    main()
