"""Sync and async clients for the toolgate HTTP API, and the whole call loop.

`Client` and `AsyncClient` have the same methods; the async ones are coroutines. Each wraps one
endpoint (`authorize`, `execute`, `report_result`, `screen`, approvals, `audit`) and turns the
sidecar's answers into the types of `toolgate.models`, or into the exceptions of
`toolgate.errors`. `call` runs the loop an agent runtime needs around a tool it runs itself:
authorize (waiting out a 429 when its `Retry-After` is short), wait for a human when the answer
is `pending_approval`, run the tool only on `allow`, and report what it returned so that only the
screened output reaches the model. `run` does the same with `/v1/execute`, where toolgate runs
the tool.

Both fail closed: a network error, a timeout, a 5xx or an answer that is not the API's raises
`Unavailable`, and the tool is not run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import httpx

from .errors import (
    ApprovalDenied,
    ApprovalTimeout,
    Denied,
    OutputBlocked,
    RateLimited,
    RequestRejected,
    ToolFailed,
    ToolgateError,
    Unavailable,
)
from .models import Approval, AuditPage, Decision, ExecResult, ResultReport, Screened

DEFAULT_URL = "http://127.0.0.1:8181"
# The sidecar holds a long poll at most 60 s; the client asks for 30 s at a time.
LONG_POLL_S = 30.0
_DECISIONS = ("allow", "deny", "pending_approval")


@dataclass(frozen=True)
class Settings:
    """What both clients are configured with (see `Client` for each field)."""

    url: str
    token: str | None
    timeout: float
    approval_timeout: float
    max_retries: int
    max_retry_wait: float
    conv_id: str | None
    execute_timeout: float

    @staticmethod
    def make(
        url: str | None,
        token: str | None,
        timeout: float,
        approval_timeout: float,
        max_retries: int,
        max_retry_wait: float,
        conv_id: str | None,
        execute_timeout: float = 3700.0,
    ) -> Settings:
        url = (url or os.environ.get("TOOLGATE_URL") or DEFAULT_URL).rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"toolgate url must start with http:// or https://, not {url!r}")
        token = token if token is not None else os.environ.get("TOOLGATE_TOKEN")
        if (
            timeout <= 0
            or execute_timeout <= 0
            or approval_timeout < 0
            or max_retries < 0
            or max_retry_wait < 0
        ):
            raise ValueError(
                "timeouts and retry bounds must not be negative (timeout and execute_timeout "
                "above 0)"
            )
        return Settings(
            url,
            token or None,
            timeout,
            approval_timeout,
            max_retries,
            max_retry_wait,
            conv_id,
            execute_timeout,
        )

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "toolgate-python"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


@dataclass
class Outcome:
    """The result of a guarded call: what may reach the model, and the records behind it."""

    output: Any
    decision: Decision
    report: ResultReport


# ---- request bodies and answers (shared by both clients) ----


def _call_body(
    tool: str,
    args: dict[str, Any] | None,
    conv_id: str | None,
    trace_id: str | None,
    iteration: int | None,
    approval_id: str | None,
) -> dict[str, Any]:
    if not isinstance(tool, str) or not tool:
        raise ValueError("tool must be a non-empty string")
    body: dict[str, Any] = {"tool": tool, "args": args if args is not None else {}}
    context = {
        k: v
        for k, v in (("conv_id", conv_id), ("trace_id", trace_id), ("iter", iteration))
        if v is not None
    }
    if context:
        body["context"] = context
    if approval_id is not None:
        body["approval_id"] = approval_id
    return body


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise Unavailable(
            f"the sidecar answered HTTP {response.status_code} with a body that is not JSON",
            code="bad_answer",
            status=response.status_code,
        ) from e


def _retry_after(response: httpx.Response, body: dict[str, Any]) -> float:
    value = body.get("retry_after", response.headers.get("retry-after"))
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 1.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 1.0


def _raise_for_error(response: httpx.Response, body: Any) -> None:
    """Raises for an error answer that is not a decision."""
    status = response.status_code
    info = body if isinstance(body, dict) else {}
    code = str(info.get("error") or info.get("code") or f"http_{status}")
    message = str(info.get("message") or f"the sidecar answered HTTP {status}")
    suggestion = str(info.get("suggestion") or "")
    if status == 429:
        raise RateLimited(info, _retry_after(response, info))
    if status >= 500 or status < 400:
        raise Unavailable(message, code=code, suggestion=suggestion, status=status, body=body)
    raise RequestRejected(message, code=code, suggestion=suggestion, status=status, body=body)


def _bad(status: int, body: Any, why: str) -> Unavailable:
    return Unavailable(
        f"the sidecar's answer (HTTP {status}) is not the API's: {why}",
        code="bad_answer",
        status=status,
        body=body,
    )


def _check_decision(body: Any, status: int) -> Decision:
    """A decision as the API defines it, or `Unavailable`: only a well-formed `allow` may
    ever run a tool."""
    if not isinstance(body, dict):
        raise _bad(status, body, "a decision must be an object")
    decision = body.get("decision")
    if decision not in _DECISIONS:
        raise _bad(status, body, f"unknown decision {decision!r}")
    if status == 401 and decision != "deny":
        raise _bad(status, body, "a 401 answer must be a deny")
    if decision != "deny" and not (
        isinstance(body.get("decision_id"), str) and body["decision_id"]
    ):
        raise _bad(status, body, "no decision_id")
    errors = body.get("errors")
    if not isinstance(errors, list) or not all(isinstance(e, dict) for e in errors):
        raise _bad(status, body, "`errors` must be a list of objects")
    if not isinstance(body.get("reasons"), list):
        raise _bad(status, body, "`reasons` must be a list")
    if "arguments" in body and not isinstance(body["arguments"], dict):
        raise _bad(status, body, "`arguments` must be an object")
    if decision == "pending_approval" and not (
        isinstance(body.get("approval_id"), str) and body["approval_id"]
    ):
        raise _bad(status, body, "a pending decision without an approval_id")
    return cast(Decision, body)


def _check_report(body: Any, status: int) -> ResultReport:
    """A `/v1/results` answer as the API defines it, or `Unavailable`."""
    if not isinstance(body, dict) or body.get("decision") not in ("allow", "warn", "mask", "block"):
        raise _bad(status, body, "not a result report")
    if "output" not in body or not isinstance(body.get("violations"), list):
        raise _bad(status, body, "a result report needs `output` and `violations`")
    if not isinstance(body.get("dropped_count"), int) or not isinstance(
        body.get("truncated"), bool
    ):
        raise _bad(status, body, "a result report needs `dropped_count` and `truncated`")
    return cast(ResultReport, body)


def _decision(response: httpx.Response) -> Decision:
    """A `/v1/authorize` answer: a decision (200, 401), or an exception."""
    body = _json(response)
    status = response.status_code
    if status == 429 and isinstance(body, dict):
        raise RateLimited(body, _retry_after(response, body))
    if status in (200, 401):
        return _check_decision(body, status)
    if status == 503 and isinstance(body, dict) and body.get("decision") == "deny":
        raise Unavailable(
            str((body.get("errors") or [{}])[0].get("message", "the decision was not recorded")),
            code="audit_unavailable",
            status=status,
            body=body,
        )
    _raise_for_error(response, body)
    raise Unavailable(
        f"the sidecar answered HTTP {status} without a decision",
        code="bad_answer",
        status=status,
        body=body,
    )


def _exec_result(response: httpx.Response) -> ExecResult:
    """A `/v1/execute` answer: a standard result (200, 202, 403, 409, 422), or an exception."""
    body = _json(response)
    status = response.status_code
    if status == 429 and isinstance(body, dict):
        raise RateLimited(body, _retry_after(response, body))
    if status in (200, 202, 403, 409, 422):
        if not isinstance(body, dict) or body.get("status") not in ("success", "error", "pending"):
            raise _bad(status, body, "not a standard result")
        if body["status"] == "pending" and not (
            isinstance(body.get("approval_id"), str) and body["approval_id"]
        ):
            raise _bad(status, body, "a pending result without an approval_id")
        if status == 200 and body["status"] == "pending":
            raise _bad(status, body, "a pending result must be HTTP 202")
        return cast(ExecResult, body)
    if status == 401 and isinstance(body, dict) and body.get("decision") == "deny":
        raise Denied(cast(Decision, body), status=401)
    _raise_for_error(response, body)
    raise Unavailable(
        f"the sidecar answered HTTP {status} without a result",
        code="bad_answer",
        status=status,
        body=body,
    )


def _object(response: httpx.Response) -> dict[str, Any]:
    body = _json(response)
    if response.status_code != 200 or not isinstance(body, dict):
        _raise_for_error(response, body)
        raise Unavailable("the sidecar's answer is not an object", code="bad_answer", body=body)
    return body


def _report_output(report: ResultReport) -> Any:
    if report.get("decision") == "block":
        raise OutputBlocked(report)
    return report.get("output")


def _jsonable(value: Any) -> Any:
    """What a tool returned, as JSON: itself when it is JSON, else its text."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _wait_param(wait: float | None) -> dict[str, str]:
    if wait is None:
        return {}
    return {"wait": f"{max(0, int(wait * 1000))}ms"}


def _approval_path(approval_id: str) -> str:
    return "/v1/approvals/" + quote(approval_id, safe="")


def _exec_outcome(result: ExecResult, status: int) -> Any:
    if result.get("status") == "success":
        return result.get("data")
    decision = result.get("decision")
    if status == 403 and decision:
        raise Denied(decision, status=403)
    raise ToolFailed(result, status)


# ---- requests and flows (no I/O: the clients send and sleep) ----


@dataclass(frozen=True)
class _Req:
    """One request, and how its answer is read."""

    method: str
    path: str
    parse: Callable[[httpx.Response], Any]
    body: Any = None
    params: dict[str, Any] | None = None
    # Added to the request timeout (a long poll's wait).
    extra_timeout: float = 0.0
    # For the answer, instead of the request timeout (`/v1/execute`: the tool runs meanwhile).
    read_timeout: float | None = None


@dataclass(frozen=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True)
class _Run:
    """Run the caller's tool with these arguments."""

    tool: str
    fn: Callable[..., Any]
    args: dict[str, Any]


_Step = _Req | _Sleep | _Run
# A flow yields steps, is sent each step's result (or thrown its error), and returns a value.
_Flow = Generator[_Step, Any, Any]


def _conv(s: Settings, conv_id: str | None) -> str | None:
    return conv_id or s.conv_id


def _authorize_req(s: Settings, tool: str, args: dict[str, Any] | None, **kw: Any) -> _Req:
    conv = _conv(s, kw.get("conv_id"))
    body = _call_body(
        tool, args, conv, kw.get("trace_id"), kw.get("iteration"), kw.get("approval_id")
    )
    return _Req("POST", "/v1/authorize", _decision, body)


def _execute_req(s: Settings, tool: str, args: dict[str, Any] | None, **kw: Any) -> _Req:
    conv = _conv(s, kw.get("conv_id"))
    body = _call_body(
        tool, args, conv, kw.get("trace_id"), kw.get("iteration"), kw.get("approval_id")
    )
    return _Req("POST", "/v1/execute", _exec_answer, body, read_timeout=s.execute_timeout)


def _exec_answer(response: httpx.Response) -> tuple[ExecResult, int]:
    return _exec_result(response), response.status_code


def _report_req(
    s: Settings, tool: str, output: Any, decision_id: str | None, conv_id: str | None
) -> _Req:
    body: dict[str, Any] = {"tool": tool, "output": _jsonable(output)}
    if decision_id:
        body["decision_id"] = decision_id
    if _conv(s, conv_id):
        body["conv_id"] = _conv(s, conv_id)
    return _Req("POST", "/v1/results", lambda r: _check_report(_object(r), r.status_code), body)


def _screen_req(s: Settings, gate: str, content: Any, conv_id: str | None) -> _Req:
    body: dict[str, Any] = {"content": content}
    if _conv(s, conv_id):
        body["conv_id"] = _conv(s, conv_id)
    return _Req("POST", "/v1/gates/" + quote(gate, safe=""), _object, body)


def _approval_req(approval_id: str, wait: float | None) -> _Req:
    return _Req(
        "GET",
        _approval_path(approval_id),
        _object,
        params=_wait_param(wait),
        extra_timeout=wait or 0.0,
    )


def _settle_req(approval_id: str, verb: str, reason: str | None) -> _Req:
    body = {"reason": reason} if reason else {}
    return _Req("POST", f"{_approval_path(approval_id)}/{verb}", _object, body)


def _approvals_req(params: dict[str, Any]) -> _Req:
    return _Req("GET", "/v1/approvals", lambda r: _object(r).get("approvals", []), params=params)


def _audit_req(params: dict[str, Any]) -> _Req:
    return _Req("GET", "/v1/audit", _object, params=params)


def _retry_wait(s: Settings, e: RateLimited, attempt: int) -> float | None:
    """How long to wait before trying a rate-limited call again; None to give up."""
    if attempt >= s.max_retries or e.retry_after > s.max_retry_wait:
        return None
    return e.retry_after


def _retrying(s: Settings, make: Callable[[], _Req]) -> _Flow:
    """`make()`'s request, tried again after a short 429 (`max_retries`, `max_retry_wait`)."""
    attempt = 0
    while True:
        try:
            return (yield make())
        except RateLimited as e:
            wait = _retry_wait(s, e, attempt)
            if wait is None:
                raise
            attempt += 1
            yield _Sleep(wait)


def _wait_flow(s: Settings, approval_id: str, timeout: float | None) -> _Flow:
    limit = s.approval_timeout if timeout is None else timeout
    start = time.monotonic()
    while True:
        left = limit - (time.monotonic() - start)
        approval = yield _approval_req(approval_id, max(0.0, min(LONG_POLL_S, left)))
        if approval.get("status") != "pending":
            return approval
        if time.monotonic() - start >= limit:
            raise ApprovalTimeout(approval_id, time.monotonic() - start)


def _decide_flow(s: Settings, tool: str, args: dict[str, Any] | None, conv_id: str | None) -> _Flow:
    decision = yield from _retrying(s, lambda: _authorize_req(s, tool, args, conv_id=conv_id))
    if decision["decision"] == "pending_approval":
        approval_id = decision["approval_id"]
        approval = yield from _wait_flow(s, approval_id, None)
        if approval.get("status") != "approved":
            raise ApprovalDenied(decision, approval)
        decision = yield from _retrying(
            s, lambda: _authorize_req(s, tool, args, conv_id=conv_id, approval_id=approval_id)
        )
    if decision["decision"] != "allow":
        raise Denied(decision)
    return decision


def _call_flow(
    s: Settings,
    tool: str,
    args: dict[str, Any] | None,
    fn: Callable[..., Any],
    conv_id: str | None,
) -> _Flow:
    decision = yield from _decide_flow(s, tool, args, conv_id)
    run_args = decision.get("arguments", args if args is not None else {})
    output = yield _Run(tool, fn, run_args)
    report = yield _report_req(s, tool, output, decision["decision_id"], conv_id)
    return Outcome(_report_output(report), decision, report)


def _run_flow(s: Settings, tool: str, args: dict[str, Any] | None, conv_id: str | None) -> _Flow:
    approval_id: str | None = None
    while True:

        def make(pending: str | None = approval_id) -> _Req:
            return _execute_req(s, tool, args, conv_id=conv_id, approval_id=pending)

        result, status = yield from _retrying(s, make)
        if result.get("status") != "pending":
            return _exec_outcome(result, status)
        if approval_id is not None:
            raise _bad(status, result, "still pending after its approval")
        approval_id = result["approval_id"]
        approval = yield from _wait_flow(s, approval_id, None)
        if approval.get("status") != "approved":
            raise ApprovalDenied(result.get("decision") or cast(Decision, {}), approval)


class _Base:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        approval_timeout: float = 300.0,
        max_retries: int = 2,
        max_retry_wait: float = 30.0,
        conv_id: str | None = None,
        execute_timeout: float = 3700.0,
        transport: Any = None,
    ):
        self.settings = Settings.make(
            url,
            token,
            timeout,
            approval_timeout,
            max_retries,
            max_retry_wait,
            conv_id,
            execute_timeout,
        )
        self._open(transport)

    def _open(self, transport: Any) -> None:
        raise NotImplementedError

    def _http_options(self) -> dict[str, Any]:
        return {
            "base_url": self.settings.url,
            "headers": self.settings.headers(),
            "follow_redirects": False,
        }

    @property
    def url(self) -> str:
        return self.settings.url

    def _timeout(self, req: _Req) -> httpx.Timeout:
        base = self.settings.timeout + req.extra_timeout
        return httpx.Timeout(base, read=req.read_timeout or base)

    def _transport_error(self, e: Exception) -> Unavailable:
        if isinstance(e, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return Unavailable(
                f"could not reach toolgate at {self.settings.url}: {e.__class__.__name__}: {e}",
                code="unreachable",
                suggestion="start the sidecar (`toolgate serve`) or check TOOLGATE_URL; "
                "nothing was sent, so nothing was run",
            )
        return Unavailable(
            f"no answer from toolgate at {self.settings.url} after the request was sent: "
            f"{e.__class__.__name__}: {e}",
            code="outcome_unknown",
            suggestion="the call may have been decided, and through /v1/execute the tool may "
            "have run: check the audit log (GET /v1/audit) before trying it again",
        )


def _sync_output(step: _Run) -> Any:
    output = step.fn(**step.args)
    if inspect.isawaitable(output):
        close = getattr(output, "close", None)
        if close is not None:
            close()
        raise TypeError(f"{step.tool}: the tool is async; call it through an AsyncClient")
    return output


class Client(_Base):
    """A blocking client.

    - `url`: the sidecar (default `$TOOLGATE_URL`, else http://127.0.0.1:8181).
    - `token`: the bearer token (default `$TOOLGATE_TOKEN`; none in dev mode).
    - `timeout`: seconds for each request (long polls add their wait).
    - `approval_timeout`: how long `call` and `run` wait for a human (default 300 s).
    - `max_retries`, `max_retry_wait`: `call` and `run` try a rate-limited call again up to
      this many times, when its `Retry-After` is at most this many seconds.
    - `conv_id`: the conversation every call belongs to (provenance), unless a call names one.
    - `execute_timeout`: seconds to wait for `/v1/execute` to answer (the tool runs meanwhile,
      up to its manifest's `limits.timeout_ms`, at most an hour; default 3,700).

    A request sent that gets no answer (a timeout, a dropped connection) raises `Unavailable`
    with code `outcome_unknown`: it may have been decided, and a tool run; one that could not
    be sent, code `unreachable`.
    """

    def _open(self, transport: httpx.BaseTransport | None) -> None:
        self._http = httpx.Client(transport=transport, **self._http_options())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, req: _Req) -> Any:
        try:
            response = self._http.request(
                req.method,
                req.path,
                json=req.body,
                params=req.params,
                timeout=self._timeout(req),
            )
        except httpx.HTTPError as e:
            raise self._transport_error(e) from e
        return req.parse(response)

    def _drive(self, flow: _Flow) -> Any:
        """Runs a flow: sends its requests, sleeps its waits, runs its tool."""
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(send)
            except StopIteration as done:
                return done.value
            send, error = None, None
            try:
                if isinstance(step, _Req):
                    send = self._send(step)
                elif isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                else:
                    send = _sync_output(step)
            except ToolgateError as e:
                error = e

    # ---- endpoints ----

    def authorize(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        *,
        conv_id: str | None = None,
        trace_id: str | None = None,
        iteration: int | None = None,
        approval_id: str | None = None,
    ) -> Decision:
        """`POST /v1/authorize`: the decision (allow, deny or pending_approval). Raises
        `RateLimited` on 429 and `Unavailable` when no decision could be had."""
        kw = {"conv_id": conv_id, "trace_id": trace_id, "iteration": iteration}
        return cast(
            Decision,
            self._send(_authorize_req(self.settings, tool, args, approval_id=approval_id, **kw)),
        )

    def execute(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        *,
        conv_id: str | None = None,
        trace_id: str | None = None,
        iteration: int | None = None,
        approval_id: str | None = None,
    ) -> ExecResult:
        """`POST /v1/execute`: toolgate decides and runs the tool. Returns the standard result
        (status `success`, `error` or `pending`); raises `RateLimited` or `Unavailable`."""
        kw = {"conv_id": conv_id, "trace_id": trace_id, "iteration": iteration}
        req = _execute_req(self.settings, tool, args, approval_id=approval_id, **kw)
        return cast(ExecResult, self._send(req)[0])

    def report_result(
        self,
        tool: str,
        output: Any,
        *,
        decision_id: str | None = None,
        conv_id: str | None = None,
    ) -> ResultReport:
        """`POST /v1/results`: what a tool returned, screened. Use `report["output"]`."""
        return cast(
            ResultReport,
            self._send(_report_req(self.settings, tool, output, decision_id, conv_id)),
        )

    def screen(self, gate: str, content: Any, *, conv_id: str | None = None) -> Screened:
        """`POST /v1/gates/{gate}` (`input`, `context`, `output`, `tool_call`)."""
        return cast(Screened, self._send(_screen_req(self.settings, gate, content, conv_id)))

    def get_approval(self, approval_id: str, *, wait: float | None = None) -> Approval:
        """`GET /v1/approvals/{id}`; with `wait` (seconds, at most 60) it long-polls until a
        human decides."""
        return cast(Approval, self._send(_approval_req(approval_id, wait)))

    def wait_for_approval(self, approval_id: str, timeout: float | None = None) -> Approval:
        """Long-polls until the approval is no longer pending; raises `ApprovalTimeout`."""
        return cast(Approval, self._drive(_wait_flow(self.settings, approval_id, timeout)))

    def approve(self, approval_id: str, reason: str | None = None) -> Approval:
        """`POST /v1/approvals/{id}/approve` (a human approver's token)."""
        return cast(Approval, self._send(_settle_req(approval_id, "approve", reason)))

    def deny(self, approval_id: str, reason: str | None = None) -> Approval:
        """`POST /v1/approvals/{id}/deny` (a human approver's token)."""
        return cast(Approval, self._send(_settle_req(approval_id, "deny", reason)))

    def approvals(self, **params: Any) -> list[Approval]:
        """`GET /v1/approvals` (filters as query parameters, e.g. `status="pending"`)."""
        return cast(list[Approval], self._send(_approvals_req(params)))

    def audit(self, **params: Any) -> AuditPage:
        """`GET /v1/audit` (humans, filters as query parameters): records, newest first, and
        the `next_cursor` of the next page."""
        return cast(AuditPage, self._send(_audit_req(params)))

    # ---- the loop ----

    def decide(
        self, tool: str, args: dict[str, Any] | None = None, *, conv_id: str | None = None
    ) -> Decision:
        """Authorize until there is an `allow`: waits out short rate limits and a pending
        approval, then returns the allowing decision. Raises `Denied` (and its kinds) or
        `ApprovalTimeout` otherwise."""
        return cast(Decision, self._drive(_decide_flow(self.settings, tool, args, conv_id)))

    def call(
        self,
        tool: str,
        args: dict[str, Any] | None,
        fn: Callable[..., Any],
        *,
        conv_id: str | None = None,
    ) -> Outcome:
        """The whole loop around a tool you run: `decide`, then `fn(**args)` (the masked
        arguments when the sidecar masks them), then `report_result`. Returns what may reach
        the model; raises `OutputBlocked` when nothing may."""
        return cast(Outcome, self._drive(_call_flow(self.settings, tool, args, fn, conv_id)))

    def run(
        self, tool: str, args: dict[str, Any] | None = None, *, conv_id: str | None = None
    ) -> Any:
        """The loop with `/v1/execute`: toolgate runs the tool. Returns the result's `data`;
        raises `Denied`, `ApprovalDenied`, `ApprovalTimeout` or `ToolFailed`."""
        return self._drive(_run_flow(self.settings, tool, args, conv_id))


class AsyncClient(_Base):
    """The asyncio client: the same constructor and methods as `Client` (see each there), as
    coroutines; `call` also takes a coroutine function as the tool."""

    def _open(self, transport: httpx.AsyncBaseTransport | None) -> None:
        self._http = httpx.AsyncClient(transport=transport, **self._http_options())

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, req: _Req) -> Any:
        try:
            response = await self._http.request(
                req.method,
                req.path,
                json=req.body,
                params=req.params,
                timeout=self._timeout(req),
            )
        except httpx.HTTPError as e:
            raise self._transport_error(e) from e
        return req.parse(response)

    async def _drive(self, flow: _Flow) -> Any:
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(send)
            except StopIteration as done:
                return done.value
            send, error = None, None
            try:
                if isinstance(step, _Req):
                    send = await self._send(step)
                elif isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                else:
                    send = step.fn(**step.args)
                    if inspect.isawaitable(send):
                        send = await send
            except ToolgateError as e:
                error = e

    async def authorize(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        *,
        conv_id: str | None = None,
        trace_id: str | None = None,
        iteration: int | None = None,
        approval_id: str | None = None,
    ) -> Decision:
        kw = {"conv_id": conv_id, "trace_id": trace_id, "iteration": iteration}
        req = _authorize_req(self.settings, tool, args, approval_id=approval_id, **kw)
        return cast(Decision, await self._send(req))

    async def execute(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        *,
        conv_id: str | None = None,
        trace_id: str | None = None,
        iteration: int | None = None,
        approval_id: str | None = None,
    ) -> ExecResult:
        kw = {"conv_id": conv_id, "trace_id": trace_id, "iteration": iteration}
        req = _execute_req(self.settings, tool, args, approval_id=approval_id, **kw)
        return cast(ExecResult, (await self._send(req))[0])

    async def report_result(
        self,
        tool: str,
        output: Any,
        *,
        decision_id: str | None = None,
        conv_id: str | None = None,
    ) -> ResultReport:
        req = _report_req(self.settings, tool, output, decision_id, conv_id)
        return cast(ResultReport, await self._send(req))

    async def screen(self, gate: str, content: Any, *, conv_id: str | None = None) -> Screened:
        return cast(Screened, await self._send(_screen_req(self.settings, gate, content, conv_id)))

    async def get_approval(self, approval_id: str, *, wait: float | None = None) -> Approval:
        return cast(Approval, await self._send(_approval_req(approval_id, wait)))

    async def wait_for_approval(self, approval_id: str, timeout: float | None = None) -> Approval:
        flow = _wait_flow(self.settings, approval_id, timeout)
        return cast(Approval, await self._drive(flow))

    async def approve(self, approval_id: str, reason: str | None = None) -> Approval:
        return cast(Approval, await self._send(_settle_req(approval_id, "approve", reason)))

    async def deny(self, approval_id: str, reason: str | None = None) -> Approval:
        return cast(Approval, await self._send(_settle_req(approval_id, "deny", reason)))

    async def approvals(self, **params: Any) -> list[Approval]:
        return cast(list[Approval], await self._send(_approvals_req(params)))

    async def audit(self, **params: Any) -> AuditPage:
        return cast(AuditPage, await self._send(_audit_req(params)))

    async def decide(
        self, tool: str, args: dict[str, Any] | None = None, *, conv_id: str | None = None
    ) -> Decision:
        flow = _decide_flow(self.settings, tool, args, conv_id)
        return cast(Decision, await self._drive(flow))

    async def call(
        self,
        tool: str,
        args: dict[str, Any] | None,
        fn: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *,
        conv_id: str | None = None,
    ) -> Outcome:
        flow = _call_flow(self.settings, tool, args, fn, conv_id)
        return cast(Outcome, await self._drive(flow))

    async def run(
        self, tool: str, args: dict[str, Any] | None = None, *, conv_id: str | None = None
    ) -> Any:
        return await self._drive(_run_flow(self.settings, tool, args, conv_id))


__all__ = ["AsyncClient", "Client", "Outcome", "Settings", "ToolgateError"]
