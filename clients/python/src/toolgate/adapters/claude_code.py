"""Claude Code hooks: toolgate decides every tool call Claude Code makes.

Register the `toolgate-claude-hook` command for `PreToolUse` and `PostToolUse` in
`.claude/settings.json` (docs: clients/python/README.md). Claude Code sends each event as JSON
on stdin; the hook answers on stdout:

- `PreToolUse`: the call is mapped to a toolgate call (built-in tools to toolgate's file tools:
  `Read` to `read_file`, `Edit` to `edit_file`, ...; paths made relative to the project root;
  `Bash` to `bash`, which the shipped policies decide by the programs of the command line;
  any other tool keeps its name and input) and authorized. toolgate's `allow` answers
  `allow`; `deny` answers `deny` with the reason Claude is shown. A pending call waits for a
  human's approval in toolgate for up to `--wait` seconds: approved answers `allow`, anything
  else `deny` (sending the same call again later reuses the open approval). A tool toolgate does
  not know is denied, unless `--unknown ask` hands it to Claude Code's own permission prompt.
- `PostToolUse`: what the tool returned is reported to toolgate (`/v1/results`, joined to the
  decision; the output of a tool toolgate does not know, and WebFetch's, go through the output
  gate instead). When toolgate masks anything, the hook hands Claude Code the masked output
  (`updatedToolOutput`); when it blocks, every text in the output is withheld.

Fail closed: when toolgate cannot be reached, answers what the hook cannot read, or the hook
itself fails, the call is denied (and an output withheld), in the hook's answer: for
PostToolUse an exit code would not stop the output. Input that is not a hook event exits 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from ..client import Client
from ..errors import (
    ApprovalTimeout,
    Denied,
    RequestRejected,
    ToolgateError,
)

WITHHELD = "<withheld by toolgate>"
# Seconds for each request to the sidecar (a long poll adds its wait).
REQUEST_TIMEOUT = 5.0


def _rel(path: Any, root: Path) -> Any:
    """A path argument relative to the project root (toolgate's tools take those), after
    following symbolic links: what toolgate decides on is the file the tool will touch. A path
    that leads outside the root stays absolute, and toolgate refuses it."""
    if not isinstance(path, str) or not path:
        return path
    p = Path(path)
    real = (p if p.is_absolute() else root / p).resolve()
    try:
        return str(real.relative_to(root)) or "."
    except ValueError:
        return str(real)


def _replace_count(root: Path, path: Any, old: str, replace_all: bool) -> int | None:
    """How many matches an edit expects: 1, or for `replace_all` the matches in the file now."""
    if not replace_all:
        return None
    try:
        text = (root / str(path)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return text.count(old) or None


def _edit(root: Path, path: Any, old: Any, new: Any, replace_all: Any) -> dict[str, Any]:
    edit: dict[str, Any] = {"operation": "replace", "spec": old, "content": new}
    count = _replace_count(root, path, str(old), bool(replace_all))
    if count:
        edit["count"] = count
    return edit


def to_toolgate(
    tool_name: str, tool_input: dict[str, Any], root: Path
) -> tuple[str, dict[str, Any]]:
    """Claude Code's tool call as a toolgate call: (tool, args)."""
    i = tool_input
    if tool_name == "Read":
        return "read_file", {"path": _rel(i.get("file_path"), root)}
    if tool_name == "Write":
        return "write_file", {"path": _rel(i.get("file_path"), root), "content": i.get("content")}
    if tool_name == "Edit":
        path = _rel(i.get("file_path"), root)
        edit = _edit(root, path, i.get("old_string"), i.get("new_string"), i.get("replace_all"))
        return "edit_file", {"path": path, "edits": [edit]}
    if tool_name == "MultiEdit":
        path = _rel(i.get("file_path"), root)
        edits = [
            _edit(root, path, e.get("old_string"), e.get("new_string"), e.get("replace_all"))
            for e in i.get("edits") or []
            if isinstance(e, dict)
        ]
        return "edit_file", {"path": path, "edits": edits}
    if tool_name == "Grep":
        args: dict[str, Any] = {"regex": i.get("pattern")}
        if i.get("path"):
            args["path"] = _rel(i["path"], root)
        return "search_files", args
    if tool_name == "Glob":
        return "list_files", {"path": _rel(i.get("path") or ".", root), "recursive": True}
    if tool_name == "WebFetch":
        return "http_fetch", {"url": i.get("url")}
    if tool_name == "Bash":
        return "bash", {"command": i.get("command")}
    return tool_name, dict(i)


def _project_root(event: dict[str, Any], opts: argparse.Namespace) -> Path:
    """The project root: `--root`, else $CLAUDE_PROJECT_DIR (Claude Code sets it for every
    hook), else the event's cwd (which moves with a `cd` in Bash)."""
    return Path(
        opts.root or os.environ.get("CLAUDE_PROJECT_DIR") or event.get("cwd") or os.getcwd()
    ).resolve()


def _state_dir() -> Path:
    """This user's private directory for what PreToolUse tells PostToolUse (the decision of
    each call). One found that is not a real directory of this user's, closed to others, is
    refused: in a shared temporary directory another user could have made it first."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    d = Path(base) / f"toolgate-claude-hook-{os.getuid()}"
    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{d} is not a directory of this user's closed to others: remove it")
    return d


def _state_file(tool_use_id: str) -> Path:
    return _state_dir() / hashlib.sha256(tool_use_id.encode()).hexdigest()[:32]


def _save_state(tool_use_id: str, state: dict[str, Any]) -> None:
    f = _state_file(tool_use_id)
    try:
        f.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(state, out)


def _take_state(tool_use_id: str) -> dict[str, Any]:
    """What PreToolUse saved for this call (once: the file goes), or nothing."""
    try:
        f = _state_file(tool_use_id)
        fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as inp:
            state = json.load(inp)
        f.unlink()
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _pre_answer(decision: str, reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }


def pre_tool_use(event: dict[str, Any], client: Client, opts: argparse.Namespace) -> dict[str, Any]:
    root = _project_root(event, opts)
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict):
        return _pre_answer("deny", "toolgate: the hook got no tool_input object; denied")
    tool, args = to_toolgate(str(event.get("tool_name", "")), tool_input, root)
    conv_id = str(event.get("session_id") or "")[:256] or None
    try:
        # A pending call waits up to `--wait` s (the client's approval_timeout).
        decision = client.decide(tool, args, conv_id=conv_id)
    except ApprovalTimeout as e:
        return _pre_answer(
            "deny",
            f"toolgate: this call waits for a human's approval ({e.approval_id}). Ask the user to "
            "have it approved in toolgate, then make the same call again.",
        )
    except Denied as e:
        if e.code == "unknown_tool" and opts.unknown == "ask":
            return _pre_answer("ask", f"toolgate does not know the tool `{tool}`: {e.message}")
        return _pre_answer("deny", f"toolgate: {e.message}. {e.suggestion}".strip())
    except ToolgateError as e:
        return _pre_answer("deny", "toolgate: " + e.for_model())
    if "arguments" in decision and decision["arguments"] != args:
        return _pre_answer(
            "deny",
            "toolgate: the arguments hold secrets that toolgate masks; make the call without them",
        )
    tool_use_id = event.get("tool_use_id")
    if isinstance(tool_use_id, str) and tool_use_id:
        try:
            _save_state(tool_use_id, {"tool": tool, "decision_id": decision["decision_id"]})
        except OSError as e:
            return _pre_answer("deny", f"toolgate-claude-hook cannot keep its state: {e}")
    reasons = ", ".join(decision.get("reasons") or []) or "policy"
    return _pre_answer("allow", f"toolgate: allowed ({reasons})")


def _withhold(value: Any) -> Any:
    """`value` with every string replaced, keeping its shape: Claude Code ignores a
    replacement that does not have the tool's output shape, so numbers, booleans and the
    `type` tags that tell one shape from another stay."""
    if isinstance(value, str):
        return WITHHELD
    if isinstance(value, list):
        return [_withhold(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k == "type" else _withhold(v) for k, v in value.items()}
    return value


def _post_answer(output: Any, context: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "updatedToolOutput": output,
            "additionalContext": context,
        }
    }


# Claude Code tools whose output does not have the shape of the toolgate tool they map to.
_SCREEN_ONLY = {"WebFetch"}


def _screened_answer(client: Client, response: Any, conv_id: str | None) -> dict[str, Any]:
    """The output gate alone (`/v1/gates/output`), for output toolgate cannot take as a
    result of the tool."""
    screened = client.screen("output", response, conv_id=conv_id)
    kinds = ", ".join(sorted({v["kind"] for v in screened["violations"]}))
    if screened["decision"] == "block":
        return _post_answer(_withhold(response), f"toolgate withheld this output ({kinds})")
    if screened["decision"] != "mask":
        return {}
    return _post_answer(screened["content"], f"toolgate masked {kinds} in this output")


def post_tool_use(
    event: dict[str, Any], client: Client, opts: argparse.Namespace
) -> dict[str, Any]:
    response = event.get("tool_response")
    try:
        return _post(event, response, client, opts)
    except Exception as e:
        return _post_answer(
            _withhold(response),
            f"toolgate could not screen this output ({getattr(e, 'code', type(e).__name__)}); "
            "withheld",
        )


def _post(
    event: dict[str, Any], response: Any, client: Client, opts: argparse.Namespace
) -> dict[str, Any]:
    tool_use_id = event.get("tool_use_id")
    state: dict[str, Any] = {}
    if isinstance(tool_use_id, str) and tool_use_id:
        state = _take_state(tool_use_id)
    root = _project_root(event, opts)
    raw_input = event.get("tool_input")
    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    tool = state.get("tool") or to_toolgate(str(event.get("tool_name", "")), tool_input, root)[0]
    conv_id = str(event.get("session_id") or "")[:256] or None
    if event.get("tool_name") in _SCREEN_ONLY:
        return _screened_answer(client, response, conv_id)
    try:
        report = client.report_result(
            tool, response, decision_id=state.get("decision_id"), conv_id=conv_id
        )
    except RequestRejected as e:
        if e.code != "unknown_tool":
            raise
        return _screened_answer(client, response, conv_id)
    kinds = ", ".join(sorted({v["kind"] for v in report["violations"]}))
    if report["decision"] == "block":
        why = kinds or "; ".join(e["message"] for e in report["errors"])
        return _post_answer(_withhold(response), f"toolgate withheld this output ({why})")
    if report["dropped_count"] or report["truncated"]:
        # The tool's field policy or size cap: what it lets through is not in Claude Code's
        # shape, and Claude Code would ignore it and pass the original on.
        return _post_answer(
            _withhold(response),
            f"toolgate withheld this output: `{tool}`'s field policy or size limit does not let "
            "all of it through",
        )
    if report["decision"] != "mask":
        return {}
    return _post_answer(report["output"], f"toolgate masked {kinds} in this output")


def main(argv: list[str] | None = None, stdin: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="toolgate-claude-hook",
        description="Claude Code PreToolUse/PostToolUse hook: toolgate decides every tool call.",
    )
    parser.add_argument("--url", help="the sidecar (default $TOOLGATE_URL or 127.0.0.1:8181)")
    parser.add_argument(
        "--token-file", help="a file holding the agent's token (default $TOOLGATE_TOKEN)"
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=40.0,
        help="seconds a pending call waits for a human before it is denied (default 40). The "
        "hook takes at most this plus 15 s (three requests of 5 s at most): keep the sum under "
        "the hook's `timeout`, past which Claude Code goes on without the hook",
    )
    parser.add_argument(
        "--unknown",
        choices=("ask", "deny"),
        default="deny",
        help="what a tool toolgate does not know gets: deny (default), or Claude Code's own "
        "prompt (ask). To let toolgate decide a tool, register it (a manifest in schemas/tools/)",
    )
    parser.add_argument(
        "--root",
        help="the project root paths are relative to (default: $CLAUDE_PROJECT_DIR, else cwd)",
    )
    opts = parser.parse_args(argv)
    if not 0 <= opts.wait <= 3600:
        parser.error("--wait must be between 0 and 3600 seconds")
    try:
        event = json.load(stdin or sys.stdin)
        if not isinstance(event, dict):
            raise ValueError("the hook input is not a JSON object")
        name = event.get("hook_event_name")
        if name not in ("PreToolUse", "PostToolUse"):
            raise ValueError(
                f"toolgate-claude-hook handles PreToolUse and PostToolUse, not {name!r}"
            )
    except Exception as e:
        print(f"toolgate-claude-hook: {e.__class__.__name__}: {e}", file=sys.stderr)
        return 2
    try:
        token = None
        if opts.token_file:
            token = Path(opts.token_file).read_text().strip()
        # Short requests and no 429 retries: the whole hook must end within its timeout.
        with Client(
            opts.url, token, timeout=REQUEST_TIMEOUT, approval_timeout=opts.wait, max_retries=0
        ) as client:
            if name == "PreToolUse":
                answer = pre_tool_use(event, client, opts)
            else:
                answer = post_tool_use(event, client, opts)
    except Exception as e:
        why = f"toolgate-claude-hook failed ({e.__class__.__name__}: {e})"
        print(why, file=sys.stderr)
        if name == "PreToolUse":
            answer = _pre_answer("deny", why + "; denied")
        else:
            answer = _post_answer(_withhold(event.get("tool_response")), why + "; withheld")
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
