"""The LangChain adapter in LangGraph's real `ToolNode` and in a LangGraph agent loop.

No model is called: the agent's model is LangChain's own fake chat model playing scripted
turns (tool calls, then an answer); everything else is the frameworks' real code.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import toolgate
from toolgate.adapters.langchain import guard_tool, guard_tools

from .conftest import BOB_TOKEN, DEV_TOKEN, Sidecar
from .test_client import Human

RAN: list[tuple[str, dict[str, Any]]] = []


@tool
def read_file(path: str) -> str:
    """Read a file below the project root.

    Args:
        path: the file, relative to the project root
    """
    RAN.append(("read_file", {"path": path}))
    if path == "notes.txt":
        return "call ops@example.com"
    return f"contents of {path}"


@tool
async def write_file(path: str, content: str) -> str:
    """Write a whole file."""
    RAN.append(("write_file", {"path": path, "content": content}))
    return "written"


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def tool_node_graph(tools: list[Any]) -> Any:
    # A ToolNode runs inside a graph (it reads the graph's runtime config).
    return (
        StateGraph(MessagesState)
        .add_node("tools", ToolNode(tools))
        .add_edge(START, "tools")
        .compile()
    )


@pytest.fixture
def clients(sidecar: Sidecar) -> Any:
    RAN.clear()
    sync = toolgate.Client(sidecar.url, DEV_TOKEN, approval_timeout=20)
    aio = toolgate.AsyncClient(sidecar.url, DEV_TOKEN, approval_timeout=20)
    yield sync, aio
    sync.close()


def test_the_wrapped_tool_looks_the_same_to_the_model() -> None:
    wrapped = guard_tool(read_file, client=toolgate.Client("http://127.0.0.1:1"))
    assert convert_to_openai_tool(wrapped) == convert_to_openai_tool(read_file)
    with pytest.raises(ValueError):
        guard_tool(read_file)


async def test_tool_node_allows_denies_and_masks(clients: Any) -> None:
    sync, aio = clients
    graph = tool_node_graph(guard_tools([read_file], client=sync, async_client=aio))
    ai = AIMessage(
        content="",
        tool_calls=[
            call("read_file", {"path": "src/main.rs"}, "c1"),
            call("read_file", {"path": "src/../.env"}, "c2"),
            call("read_file", {"path": "notes.txt"}, "c3"),
        ],
    )
    for run in (graph.invoke, graph.ainvoke):
        RAN.clear()
        out = run({"messages": [ai]})
        if hasattr(out, "__await__"):
            out = await out
        msgs: dict[str, ToolMessage] = {m.tool_call_id: m for m in out["messages"][1:]}
        assert msgs["c1"].status == "success" and msgs["c1"].content == "contents of src/main.rs"
        assert msgs["c2"].status == "error"
        assert "deny-listed-paths" in msgs["c2"].content
        assert msgs["c3"].content == "call <redacted:email>"
        assert sorted(p["path"] for _, p in RAN) == ["notes.txt", "src/main.rs"]


async def test_pending_call_waits_for_the_human(clients: Any, sidecar: Sidecar) -> None:
    sync, aio = clients
    graph = tool_node_graph(guard_tools([write_file], client=sync, async_client=aio))
    ai = AIMessage(
        content="", tool_calls=[call("write_file", {"path": "src/lc.rs", "content": "x"}, "w1")]
    )
    with toolgate.Client(sidecar.url, BOB_TOKEN) as bob:
        human = Human(bob, "write_file", "src/lc.rs")
        out = await graph.ainvoke({"messages": [ai]})
        human.join()
    [msg] = out["messages"][1:]
    assert msg.status == "success" and msg.content == "written"
    assert RAN == [("write_file", {"path": "src/lc.rs", "content": "x"})]


def test_unreachable_sidecar_is_an_error_message_not_a_run(closed_url: str) -> None:
    RAN.clear()
    with toolgate.Client(closed_url, DEV_TOKEN, timeout=2) as c:
        graph = tool_node_graph([guard_tool(read_file, client=c)])
        ai = AIMessage(content="", tool_calls=[call("read_file", {"path": "src/main.rs"}, "u1")])
        [msg] = graph.invoke({"messages": [ai]})["messages"][1:]
    assert msg.status == "error" and "(unreachable)" in msg.content
    assert RAN == []


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, made to accept tools like a real one."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def test_an_agent_loop_with_guarded_tools(clients: Any) -> None:
    sync, _ = clients
    model = ScriptedChatModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=[call("read_file", {"path": ".env"}, "a1")]),
                AIMessage(content="", tool_calls=[call("read_file", {"path": "README.md"}, "a2")]),
                AIMessage(content="all done"),
            ]
        )
    )
    tools = guard_tools([read_file], client=sync)
    bound = model.bind_tools(tools)
    graph = (
        StateGraph(MessagesState)
        .add_node("model", lambda state: {"messages": [bound.invoke(state["messages"])]})
        .add_node("tools", ToolNode(tools))
        .add_edge(START, "model")
        .add_conditional_edges("model", tools_condition)
        .add_edge("tools", "model")
        .compile()
    )
    out = graph.invoke({"messages": [("user", "read the readme")]})
    kinds = [(type(m).__name__, getattr(m, "status", None)) for m in out["messages"]]
    assert kinds == [
        ("HumanMessage", None),
        ("AIMessage", None),
        ("ToolMessage", "error"),
        ("AIMessage", None),
        ("ToolMessage", "success"),
        ("AIMessage", None),
    ]
    assert out["messages"][-1].content == "all done"
    assert RAN == [("read_file", {"path": "README.md"})]


def test_parsed_arguments_are_sent_as_json() -> None:
    import datetime

    from toolgate.adapters.langchain import _json_args

    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    assert _json_args({"path": "a", "when": when, "tags": ("x",)}) == {
        "path": "a",
        "when": "2026-01-02T03:04:05",
        "tags": ["x"],
    }
