"""The Python client against a real sidecar: every outcome of the loop, sync and async."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolgate
from toolgate import models

from .conftest import DEV_TOKEN, REPO, Sidecar

PENDING_WRITE = {"path": "src/lib.rs", "content": "// from the client tests\n"}


class Spy:
    """A tool that records its calls."""

    def __init__(self, result: Any = "ran"):
        self.calls: list[dict[str, Any]] = []
        self.result = result

    def __call__(self, **args: Any) -> Any:
        self.calls.append(args)
        return self.result


def conforms(value: Any, cls: Any) -> None:
    """`value` has every key `cls` (a generated TypedDict) requires and none it does not know."""
    hints = typing.get_type_hints(cls, localns=vars(models))
    assert isinstance(value, dict), value
    missing = cls.__required_keys__ - value.keys()
    unknown = value.keys() - hints.keys()
    assert not missing, f"{cls.__name__} lacks {missing}"
    assert not unknown, f"{cls.__name__} has keys the API document does not: {unknown}"


class Human(threading.Thread):
    """A scripted human: waits for the pending approval of `tool` on `path`, then decides it.
    `join()` re-raises what went wrong in the thread."""

    def __init__(self, bob: toolgate.Client, tool: str, path: str, *, deny: bool = False):
        super().__init__(daemon=True)
        self.bob, self.tool, self.path, self.deny = bob, tool, path, deny
        self.error: BaseException | None = None
        self.decided: str | None = None
        self.start()

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for a in self.bob.approvals(status="pending"):
                    if a["tool"] == self.tool and self.path in a["args_preview"]:
                        if self.deny:
                            self.bob.deny(a["id"], "not today")
                        else:
                            self.bob.approve(a["id"], "looks fine")
                        self.decided = a["id"]
                        return
                time.sleep(0.05)
            raise AssertionError(f"no pending {self.tool} on {self.path} within 15 s")
        except BaseException as e:
            self.error = e

    def join(self, timeout: float | None = 10) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error
        assert self.decided, "the human did not decide"


def test_models_are_generated_from_the_api_document() -> None:
    gen = REPO / "clients" / "gen_models.py"
    done = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_allow_runs_the_tool_and_returns_screened_output(agent: toolgate.Client) -> None:
    spy = Spy("fn main() {}")
    read_file = toolgate.guard(spy, tool="read_file", client=agent)
    assert read_file(path="src/main.rs") == "fn main() {}"
    assert spy.calls == [{"path": "src/main.rs"}]

    outcome = agent.call("read_file", {"path": "src/main.rs"}, spy)
    assert outcome.decision["decision"] == "allow"
    assert outcome.decision["reasons"] == ["developers-read-write"]
    assert outcome.report["decision"] == "allow"
    conforms(outcome.decision, models.Decision)
    conforms(outcome.report, models.ResultReport)


def test_the_decorator_binds_arguments_by_name(agent: toolgate.Client) -> None:
    seen = []

    @toolgate.tool(name="read_file", client=agent)
    def read(path: str, max_bytes: int = 10) -> str:
        """Reads a file."""
        seen.append((path, max_bytes))
        return f"{path}:{max_bytes}"

    assert read("README.md") == "README.md:10"
    assert read.__doc__ == "Reads a file."
    assert read.__name__ == "read"
    assert seen == [("README.md", 10)]

    # Defaults are part of the call the policies decide on: one the tool's schema does not
    # know is refused before the function runs.
    @toolgate.tool(name="read_file", client=agent)
    def read_more(path: str, recursive: bool = True) -> str:
        seen.append((path, recursive))
        return path

    with pytest.raises(toolgate.Denied) as caught:
        read_more("README.md")
    assert caught.value.stage == "validation"
    assert seen == [("README.md", 10)]


def test_deny_raises_with_reasons_and_never_runs_the_tool(agent: toolgate.Client) -> None:
    spy = Spy()
    read_file = toolgate.guard(spy, tool="read_file", client=agent)
    with pytest.raises(toolgate.Denied) as caught:
        read_file(path="src/../.env")
    e = caught.value
    assert e.reasons == ["deny-listed-paths"]
    assert e.stage == "policy"
    assert e.code == "forbidden"
    assert "deny-listed-paths" in e.message
    assert e.decision_id
    assert spy.calls == []


def test_unknown_token_is_a_deny_at_the_auth_stage(sidecar: Sidecar) -> None:
    spy = Spy()
    with toolgate.Client(sidecar.url, "not-a-token") as c:
        with pytest.raises(toolgate.Denied) as caught:
            c.call("read_file", {"path": "README.md"}, spy)
    assert caught.value.stage == "auth"
    assert caught.value.code == "unauthenticated"
    assert spy.calls == []


def test_pending_then_approved_runs_once(agent: toolgate.Client, bob: toolgate.Client) -> None:
    spy = Spy("written")
    human = Human(bob, "write_file", PENDING_WRITE["path"])
    outcome = agent.call("write_file", dict(PENDING_WRITE), spy)
    human.join()
    assert outcome.output == "written"
    assert outcome.decision["decision"] == "allow"
    assert outcome.decision["stage"] == "approval"
    assert outcome.decision.get("approval_id")
    assert spy.calls == [PENDING_WRITE]
    approval = agent.get_approval(outcome.decision["approval_id"])
    conforms(approval, models.Approval)
    assert approval["status"] == "used"
    assert approval["decided_by"] == 'Human::"bob"'


def test_pending_then_denied_never_runs(agent: toolgate.Client, bob: toolgate.Client) -> None:
    spy = Spy()
    human = Human(bob, "write_file", "src/denied.rs", deny=True)
    args = {"path": "src/denied.rs", "content": "x"}
    with pytest.raises(toolgate.ApprovalDenied) as caught:
        agent.call("write_file", args, spy)
    human.join()
    assert caught.value.approval["status"] == "denied"
    assert caught.value.code == "approval_denied"
    assert "not today" in caught.value.message
    assert spy.calls == []


def test_no_decision_in_time_is_an_approval_timeout(sidecar: Sidecar) -> None:
    spy = Spy()
    with toolgate.Client(sidecar.url, DEV_TOKEN, approval_timeout=0.5) as c:
        with pytest.raises(toolgate.ApprovalTimeout) as caught:
            c.call("write_file", {"path": "src/timeout.rs", "content": "x"}, spy)
        assert c.get_approval(caught.value.approval_id)["status"] == "pending"
    assert spy.calls == []


def test_output_is_redacted_before_it_reaches_the_model(agent: toolgate.Client) -> None:
    spy = Spy("mail ops@example.com, key AKIAIOSFODNN7EXAMPLF")
    read_file = toolgate.guard(spy, tool="read_file", client=agent)
    out = read_file(path="notes.txt")
    assert "ops@example.com" not in out and "AKIAIOSFODNN7EXAMPLF" not in out
    assert "<redacted:email>" in out
    assert spy.calls == [{"path": "notes.txt"}]


def test_output_that_breaks_the_tools_schema_is_blocked(agent: toolgate.Client) -> None:
    spy = Spy("a page, but not the object http_fetch's outputSchema promises")
    fetch = toolgate.guard(spy, tool="http_fetch", client=agent)
    with pytest.raises(toolgate.OutputBlocked) as caught:
        fetch(url="https://example.com/")
    assert caught.value.report["output"] is None
    assert caught.value.report["errors"][0]["code"] == "output_schema_mismatch"
    assert len(spy.calls) == 1


def exhaust(c: toolgate.Client) -> toolgate.RateLimited:
    """Spends the rate-limited sidecar's burst; returns the 429 that ends it."""
    for _ in range(10):
        try:
            c.authorize("read_file", {"path": "README.md"})
        except toolgate.RateLimited as e:
            return e
    raise AssertionError("no 429 after 10 calls")


def test_429_is_retried_after_retry_after(limited: Sidecar) -> None:
    spy = Spy("ok")
    with toolgate.Client(limited.url, DEV_TOKEN, max_retries=3) as c:
        e = exhaust(c)
        assert e.status == 429 and e.code == "rate_limited" and e.retry_after >= 1
        # The bucket is empty: this call gets a 429 first, waits `retry_after`, and succeeds.
        assert c.call("read_file", {"path": "README.md"}, spy).output == "ok"
    assert spy.calls == [{"path": "README.md"}]


def test_429_without_retries_raises_rate_limited(limited: Sidecar) -> None:
    spy = Spy()
    with toolgate.Client(limited.url, DEV_TOKEN, max_retries=0) as c:
        exhaust(c)
        with pytest.raises(toolgate.RateLimited) as caught:
            c.call("read_file", {"path": "README.md"}, spy)
    assert caught.value.retry_after >= 1
    assert caught.value.stage == "rate_limit"
    assert "rate limit" in caught.value.message
    assert spy.calls == []


def test_a_retry_after_above_the_bound_is_not_waited(limited: Sidecar) -> None:
    spy = Spy()
    with toolgate.Client(limited.url, DEV_TOKEN, max_retries=5, max_retry_wait=0.1) as c:
        exhaust(c)
        with pytest.raises(toolgate.RateLimited):
            c.call("read_file", {"path": "README.md"}, spy)
    assert spy.calls == []


def test_unreachable_sidecar_fails_closed(closed_url: str) -> None:
    spy = Spy()
    with toolgate.Client(closed_url, DEV_TOKEN, timeout=2) as c:
        guarded = toolgate.guard(spy, tool="read_file", client=c)
        with pytest.raises(toolgate.Unavailable) as caught:
            guarded(path="README.md")
        with pytest.raises(toolgate.Unavailable):
            c.run("read_file", {"path": "README.md"})
    assert caught.value.code == "unreachable"
    assert spy.calls == []


class Garbage(http.server.BaseHTTPRequestHandler):
    """Answers every request with what the test set in `answer`: (status, body); a path in
    `by_path` gets its own answer; `delay` seconds pass before any answer."""

    answer: tuple[int, bytes] = (200, b"")
    by_path: dict[str, tuple[int, bytes]] = {}  # noqa: RUF012 (set per test on a subclass)
    delay: float = 0.0

    def do_POST(self) -> None:
        time.sleep(self.delay)
        status, body = self.by_path.get(self.path, self.answer)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def garbage() -> Iterator[tuple[str, type[Garbage]]]:
    handler = type("Handler", (Garbage,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # A client that gave up (a timeout test) leaves a broken pipe behind: not news.
    server.handle_error = lambda *_: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "status,body",
    [
        (200, b"<html>allow</html>"),
        (200, b'{"decision":"allowed"}'),
        (200, b'["allow"]'),
        (500, b'{"error":"internal","message":"boom","suggestion":""}'),
        (503, b'{"decision":"deny","errors":[{"code":"audit_unavailable","message":"full"}]}'),
        (302, b""),
        # Well-formed JSON, but not decisions the API gives: never an allow.
        (200, b'{"decision":"allow","reasons":[],"errors":[]}'),
        (401, b'{"decision":"allow","decision_id":"d","reasons":[],"errors":[]}'),
        (200, b'{"decision":"allow","decision_id":"d","reasons":[],"errors":"none"}'),
        (200, b'{"decision":"allow","decision_id":"d","reasons":[],"errors":[],"arguments":[]}'),
        (200, b'{"decision":"pending_approval","decision_id":"d","reasons":[],"errors":[]}'),
    ],
)
def test_an_answer_that_is_not_a_decision_fails_closed(
    garbage: tuple[str, type[Garbage]], status: int, body: bytes
) -> None:
    url, handler = garbage
    handler.answer = (status, body)
    spy = Spy()
    with toolgate.Client(url, DEV_TOKEN) as c:
        with pytest.raises(toolgate.Unavailable):
            toolgate.guard(spy, tool="read_file", client=c)(path="README.md")
    assert spy.calls == []


def test_run_executes_through_the_sidecar(agent: toolgate.Client) -> None:
    data = agent.run("read_file", {"path": "README.md"})
    assert data["path"] == "README.md"
    assert "client test workspace" in data["content"]
    result = agent.execute("read_file", {"path": "README.md"})
    conforms(result, models.ExecResult)
    with pytest.raises(toolgate.Denied) as caught:
        agent.run("read_file", {"path": ".env"})
    assert caught.value.reasons == ["deny-listed-paths"]
    with pytest.raises(toolgate.ToolFailed) as failed:
        agent.run("read_file", {"path": "no/such/file.txt"})
    assert failed.value.code


def test_screen_and_audit(agent: toolgate.Client, bob: toolgate.Client) -> None:
    screened = agent.screen("output", "token AKIAIOSFODNN7EXAMPLF")
    conforms(screened, models.Screened)
    assert screened["decision"] == "mask"
    assert "AKIAIOSFODNN7EXAMPLF" not in screened["content"]
    with pytest.raises(toolgate.RequestRejected) as caught:
        agent.report_result("no_such_tool", "x")
    assert caught.value.status == 400
    # A result must join its decision: an unknown one, or a second report, is refused.
    with pytest.raises(toolgate.RequestRejected) as caught:
        agent.report_result("read_file", "x", decision_id="0190aaaa-0000-7000-8000-000000000000")
    assert (caught.value.status, caught.value.code) == (404, "unknown_decision")
    outcome = agent.call("read_file", {"path": "src/main.rs"}, Spy("fn main() {}"))
    with pytest.raises(toolgate.RequestRejected) as caught:
        agent.report_result("read_file", "again", decision_id=outcome.decision["decision_id"])
    assert (caught.value.status, caught.value.code) == (409, "result_reported")
    page = bob.audit(limit=5, tool="read_file")
    conforms(page, models.AuditPage)
    assert len(page["records"]) == 5
    for record in page["records"]:
        conforms(record, models.AuditRecord)
        conforms(record["entry"], models.AuditEntry)
        assert record["entry"]["tool"] == "read_file"
    conforms({"approvals": bob.approvals()}, models.ApprovalList)


def test_bad_client_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        toolgate.Client("localhost:8181")
    with pytest.raises(ValueError):
        toolgate.Client("http://127.0.0.1:1", timeout=0)
    with pytest.raises(TypeError):
        toolgate.guard(Spy(), tool="x", client=toolgate.AsyncClient("http://127.0.0.1:1"))
    with pytest.raises(TypeError):
        toolgate.guard(Spy())


# ---- async ----


async def test_async_allow_deny_and_approval(sidecar: Sidecar, bob: toolgate.Client) -> None:
    calls: list[dict[str, Any]] = []

    async def write_file(path: str, content: str) -> str:
        calls.append({"path": path, "content": content})
        return "written"

    async with toolgate.AsyncClient(sidecar.url, DEV_TOKEN, approval_timeout=20) as c:
        guarded = toolgate.guard(write_file, client=c)
        assert guarded.__name__ == "write_file"
        human = Human(bob, "write_file", "src/async.rs")
        assert await guarded(path="src/async.rs", content="// async\n") == "written"
        human.join()
        assert calls == [{"path": "src/async.rs", "content": "// async\n"}]

        with pytest.raises(toolgate.Denied):
            await c.call("read_file", {"path": ".env"}, lambda **a: calls.append(a))
        assert (await c.run("read_file", {"path": "README.md"}))["path"] == "README.md"
    assert len(calls) == 1


async def test_async_unreachable_fails_closed(closed_url: str) -> None:
    ran = []

    async def read_file(path: str) -> str:
        ran.append(path)
        return "x"

    async with toolgate.AsyncClient(closed_url, DEV_TOKEN, timeout=2) as c:
        with pytest.raises(toolgate.Unavailable):
            await toolgate.guard(read_file, client=c)(path="README.md")
    assert ran == []


async def test_async_429_is_retried(limited: Sidecar) -> None:
    with toolgate.Client(limited.url, DEV_TOKEN) as sync:
        exhaust(sync)
    async with toolgate.AsyncClient(limited.url, DEV_TOKEN, max_retries=3) as c:
        out = await c.call("read_file", {"path": "README.md"}, lambda path: path.upper())
    assert out.output == "README.MD"


def test_the_package_is_typed() -> None:
    assert (Path(toolgate.__file__).parent / "py.typed").exists()


ALLOW = b'{"decision":"allow","decision_id":"d1","reasons":["p"],"errors":[],"stage":"policy"}'


def test_a_report_that_is_not_the_apis_withholds_the_output(
    garbage: tuple[str, type[Garbage]],
) -> None:
    url, handler = garbage
    handler.answer = (200, ALLOW)
    handler.by_path = {"/v1/results": (200, b'{"decision":"allow","output":"raw"}')}
    spy = Spy("raw")
    with toolgate.Client(url, DEV_TOKEN) as c, pytest.raises(toolgate.Unavailable) as caught:
        toolgate.guard(spy, tool="read_file", client=c)(path="README.md")
    assert caught.value.code == "bad_answer"
    assert len(spy.calls) == 1  # it ran; its output is not passed on


def test_no_answer_after_sending_is_an_unknown_outcome(
    garbage: tuple[str, type[Garbage]],
) -> None:
    url, handler = garbage
    handler.answer, handler.delay = (200, ALLOW), 3.0
    spy = Spy()
    with toolgate.Client(url, DEV_TOKEN, timeout=0.5) as c:
        with pytest.raises(toolgate.Unavailable) as caught:
            toolgate.guard(spy, tool="read_file", client=c)(path="README.md")
        assert caught.value.code == "outcome_unknown"
        assert "audit log" in caught.value.suggestion
    assert spy.calls == []


def test_execute_waits_for_execute_timeout(garbage: tuple[str, type[Garbage]]) -> None:
    url, handler = garbage
    handler.delay = 1.0
    handler.answer = (
        200,
        json.dumps(
            {"status": "success", "data": "ran", "error": None, "metadata": {"decision_id": "d"}}
        ).encode(),
    )
    with toolgate.Client(url, DEV_TOKEN, timeout=0.3, execute_timeout=5) as c:
        assert c.run("read_file", {"path": "README.md"}) == "ran"
    with toolgate.Client(url, DEV_TOKEN, timeout=0.3, execute_timeout=0.3) as c:
        with pytest.raises(toolgate.Unavailable) as caught:
            c.run("read_file", {"path": "README.md"})
    assert caught.value.code == "outcome_unknown"


def test_a_sync_client_refuses_an_async_tool(agent: toolgate.Client) -> None:
    async def read_file(path: str) -> str:
        return path

    with pytest.raises(TypeError, match="AsyncClient"):
        agent.call("read_file", {"path": "README.md"}, read_file)


def test_errors_tell_the_model_what_to_do() -> None:
    e = toolgate.Unavailable("gone", code="unreachable", suggestion="start it")
    assert e.for_model() == "toolgate did not run this tool (unreachable): gone. Next: start it"
