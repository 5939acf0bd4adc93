"""The adapters' runnable examples (clients/python/examples) run as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DEV_TOKEN, Sidecar

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, sidecar: Sidecar) -> str:
    env = dict(os.environ, TOOLGATE_URL=sidecar.url, TOOLGATE_TOKEN=DEV_TOKEN)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_openai_agents_example(sidecar: Sidecar) -> None:
    pytest.importorskip("agents")
    out = run_example("openai_agents_guardrails.py", sidecar)
    assert "(read_file ran on src/main.rs)" in out
    assert "(read_file ran on .env)" not in out
    assert "toolgate did not run this tool (forbidden)" in out
    assert out.rstrip().endswith("final answer: done")


def test_langchain_example(sidecar: Sidecar) -> None:
    pytest.importorskip("langgraph")
    out = run_example("langchain_tools.py", sidecar)
    assert "(read_file ran on README.md)" in out
    assert "(read_file ran on .env)" not in out
    assert "tool message (error): 'toolgate did not run this tool (forbidden)" in out
    assert "tool message (success): '# toolgate" in out
    assert out.rstrip().endswith("final answer: done")


def test_claude_code_settings_example_is_the_documented_one() -> None:
    import json

    settings = json.loads((EXAMPLES / "claude_code_settings.json").read_text())
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for event in ("PreToolUse", "PostToolUse"):
        [entry] = settings["hooks"][event]
        assert entry["hooks"][0]["command"].startswith("toolgate-claude-hook")
        assert entry["matcher"] in readme
