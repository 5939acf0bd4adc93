#!/usr/bin/env python3
"""A scripted coding agent whose every tool call goes through toolgate.

No model is needed: the agent's "thoughts" are a fixed script, so the run is the same every
time (CI runs it). The task, in ./workspace (a copy, made by run.sh): fix the bug in
`slugify` that README.md describes, add a test, and get the tests green. On the way it reads,
searches, edits, runs the tests, has one call wait for a human (who approves it), and has one
call denied. At the end it prints the audit trail of the conversation.

Two ways to run a tool appear, as in a real agent runtime:
- `@toolgate.tool`: the agent runs the tool itself (here `read_file` in Python); toolgate
  decides first and screens what it returned;
- `client.run(...)`: toolgate runs the tool (`/v1/execute`), in its sandbox.

Environment: TOOLGATE_URL (the sidecar), AGENT_TOKEN (the agent, default the demo
`demo-dev-token`), APPROVER_TOKEN (the human approver, default `demo-bob-token`),
AUDITOR_TOKEN (reads the audit log, default `demo-grace-token`), WORKSPACE (the sidecar's
`[exec] root`, for the agent's own `read_file`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import toolgate

URL = os.environ.get("TOOLGATE_URL", "http://127.0.0.1:8181")
WORKSPACE = Path(os.environ.get("WORKSPACE", Path(__file__).parent / "workspace")).resolve()
CONV = f"example-{uuid.uuid4()}"
START_MS = int(time.time() * 1000)

agent = toolgate.Client(
    URL, os.environ.get("AGENT_TOKEN", "demo-dev-token"), conv_id=CONV, approval_timeout=60
)
human = toolgate.Client(URL, os.environ.get("APPROVER_TOKEN", "demo-bob-token"))
auditor = toolgate.Client(URL, os.environ.get("AUDITOR_TOKEN", "demo-grace-token"))


def say(who: str, text: str) -> None:
    print(f"{who:>7} | {text}", flush=True)


def short(value: Any, n: int = 110) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


@toolgate.tool(client=agent)
def read_file(path: str) -> str:
    """The agent's own file reader: toolgate decides before it runs and screens what it read."""
    return (WORKSPACE / path).read_text()


class ScriptedHuman(threading.Thread):
    """The human approver (bob): approves each call that waits for him, after a look."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for a in human.approvals(status="pending"):
                    say("bob", f"reviews {a['tool']} {short(a['args_preview'], 80)}")
                    approved = human.approve(a["id"], "test file only: fine")
                    say("bob", f"approves -> {approved['status']}")
                time.sleep(0.2)
        except toolgate.ToolgateError as e:
            self.error = e


def run_tests(*, expect_pass: bool) -> None:
    """`run_tests` through toolgate; a failing suite is a `ToolFailed` with its output."""
    try:
        out = agent.run("run_tests", {})
        passed = True
    except toolgate.ToolFailed as e:
        out = e.result.get("data") or ""
        passed = False
        say("tool", f"tests failed ({e.code})")
    summary = [ln for ln in str(out).splitlines() if ln.startswith(("# pass", "# fail"))]
    say("tool", " ".join(summary) or short(out))
    if passed != expect_pass:
        raise SystemExit(f"expected the tests to {'pass' if expect_pass else 'fail'}: {out}")


def main() -> int:
    bob = ScriptedHuman()
    bob.start()
    task = "Fix the slugify bug that README.md describes, add a test for it, run the tests."
    say("user", task)
    # The user's words go through the input gate with the conversation id: policies can then
    # tell values the user gave from values that only came out of a tool.
    agent.screen("input", task)

    say("agent", "reads README.md (its own read_file, guarded)")
    readme = read_file(path="README.md")
    say("tool", short(readme))

    say("agent", "searches for slugify (toolgate runs search_files)")
    found = agent.run("search_files", {"regex": "slugify\\(", "path": "src"})
    for m in found["matches"]:
        say("tool", f"{m['path']}:{m['line']}: {short(m['text'], 80)}")

    say("agent", "wants the npm token from .env to publish a fix")
    try:
        agent.run("read_file", {"path": ".env"})
        say("agent", "read .env: THIS SHOULD NOT HAPPEN")
        return 1
    except toolgate.Denied as e:
        say("toolgate", f"DENY {e.reasons}: {e.message}")

    say("agent", "runs the tests")
    run_tests(expect_pass=False)

    say("agent", "edits src/slugify.js: one dash per run of separators")
    edit = {
        "path": "src/slugify.js",
        "edits": [{"operation": "replace", "spec": "/[^a-z0-9]/g", "content": "/[^a-z0-9]+/g"}],
    }
    changed = agent.run("edit_file", edit)
    say("tool", f"changed={changed['changed']} bytes={changed['bytes']}")

    say("agent", "adds test/trim.test.js (write_file: high risk, a human must approve)")
    test = (
        'import { test } from "node:test";\n'
        'import assert from "node:assert/strict";\n'
        'import { slugify } from "../src/slugify.js";\n\n'
        'test("leading and trailing separators", () => {\n'
        '  assert.equal(slugify("  --Hello--  "), "hello");\n'
        "});\n"
    )
    written = agent.run("write_file", {"path": "test/trim.test.js", "content": test})
    say("tool", f"wrote {written['path']} ({written['bytes']} bytes)")

    say("agent", "runs the tests again")
    run_tests(expect_pass=True)

    bob.stop.set()
    bob.join(5)
    if bob.error:
        raise bob.error

    print()
    print("the audit trail of this run, oldest first (read by grace, an auditor):")
    records = auditor.audit(since=START_MS, limit=1000)["records"]
    for r in reversed(records):
        e = r["entry"]
        who = (e.get("principal") or "-").replace('Agent::"', "agent ").replace('Human::"', "")
        print(
            f"  #{r['seq']:<3} {e['kind']:<9} {who.rstrip(chr(34)):<16} {e.get('tool', '-'):<12} "
            f"{e['decision']:<16} {short(','.join(e.get('reasons') or []), 40)}"
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except toolgate.ToolgateError as e:
        print(f"agent stopped: {e}", file=sys.stderr)
        sys.exit(1)
