"""Framework adapters: each puts toolgate in front of a framework's tools.

- `toolgate.adapters.openai_agents`: tool guardrails for the OpenAI Agents SDK
  (`pip install "toolgate[openai-agents]"`).
- `toolgate.adapters.langchain`: a wrapper for LangChain tools, for LangGraph's `ToolNode` and
  LangChain agents (`pip install "toolgate[langchain]"`).
- `toolgate.adapters.claude_code`: `PreToolUse` and `PostToolUse` hooks for Claude Code
  (the `toolgate-claude-hook` command; no extra dependency).

The modules import their framework only when imported themselves.
"""
