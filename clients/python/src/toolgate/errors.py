"""The exceptions the toolgate clients raise.

Every one derives from `ToolgateError`. The clients fail closed: when the sidecar cannot be
reached, answers an error, or answers something they cannot read, they raise `Unavailable`,
and a guarded tool does not run.
"""

from __future__ import annotations

from typing import Any

from .models import Approval, Decision, ExecResult, ResultReport


class ToolgateError(Exception):
    """Base class. `code`, `message` and `suggestion` are the sidecar's when it gave them."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        suggestion: str = "",
        status: int | None = None,
        body: Any = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.suggestion = suggestion
        self.status = status
        self.body = body

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.suggestion:
            text += f" ({self.suggestion})"
        return text

    def for_model(self) -> str:
        """What to tell the model instead of the tool's output: why, and what to do next.
        The adapters answer with it."""
        text = f"toolgate did not run this tool ({self.code}): {self.message}"
        if self.suggestion:
            text += f". Next: {self.suggestion}"
        return text


class Unavailable(ToolgateError):
    """The sidecar could not be reached or could not decide (network error, timeout, 5xx, or an
    answer that is not the API's). Nothing was allowed: do not run the tool."""


class RequestRejected(ToolgateError):
    """The sidecar refused the request itself (4xx: malformed body, unknown tool for a result,
    a human token where an agent's is needed, no such approval, ...)."""


class Denied(ToolgateError):
    """The call was denied. `decision` is the sidecar's decision (reasons, stage, errors)."""

    def __init__(self, decision: Decision, *, status: int | None = None, **kw: Any):
        raw = decision.get("errors") if isinstance(decision, dict) else None
        errors = [e for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []
        first: dict[str, Any] = dict(errors[0]) if errors else {}
        super().__init__(
            kw.pop("message", None) or first.get("message") or "the call was denied",
            code=kw.pop("code", None) or first.get("code") or "denied",
            suggestion=kw.pop("suggestion", None) or first.get("suggestion", ""),
            status=status,
            body=decision,
            **kw,
        )
        self.decision = decision
        self.decision_id: str = str(decision.get("decision_id", ""))
        self.stage: str = str(decision.get("stage", ""))
        reasons = decision.get("reasons")
        self.reasons: list[str] = [str(r) for r in reasons] if isinstance(reasons, list) else []
        self.errors = errors


class RateLimited(Denied):
    """A rate limit (`rate_limited`) or the bound on pending approvals
    (`too_many_pending_approvals`) refused the call: HTTP 429. `retry_after` is in seconds."""

    def __init__(self, body: dict[str, Any], retry_after: float, *, status: int = 429):
        super().__init__(
            body,  # type: ignore[arg-type]
            status=status,
            code=body.get("error"),
            message=body.get("message"),
            suggestion=body.get("suggestion"),
        )
        self.retry_after = retry_after


class ApprovalDenied(Denied):
    """The call needed a human's approval and did not get it: the approval was denied, or it
    expired. `approval` is its record."""

    def __init__(self, decision: Decision, approval: Approval):
        status = approval.get("status", "denied")
        who = approval.get("decided_by")
        reason = approval.get("reason")
        message = f"approval {approval.get('id')} was {status}"
        if who:
            message += f" by {who}"
        if reason:
            message += f": {reason}"
        super().__init__(
            decision,
            code=f"approval_{status}",
            message=message,
            suggestion="do not retry the call unchanged; tell the user it was not approved",
        )
        self.approval = approval


class ApprovalTimeout(ToolgateError):
    """No human decided within the client's `approval_timeout`. The approval stays pending on
    the sidecar; wait again with `wait_for_approval(approval_id)` or let it expire."""

    def __init__(self, approval_id: str, waited: float):
        super().__init__(
            f"no decision on approval {approval_id} after {waited:.0f} s",
            code="approval_timeout",
            suggestion="wait again, or tell the user the call is waiting for a human",
        )
        self.approval_id = approval_id


class OutputBlocked(ToolgateError):
    """The tool ran, but the output gate blocked what it returned: nothing of it may reach the
    model. `report` is the sidecar's answer (violations, errors)."""

    def __init__(self, report: ResultReport | dict[str, Any]):
        kinds = sorted({v.get("kind", "?") for v in report.get("violations") or []})
        errors = report.get("errors") or []
        message = "the output gate blocked the tool's output"
        if kinds:
            message += " (" + ", ".join(kinds) + ")"
        elif errors:
            message += ": " + errors[0].get("message", "")
        super().__init__(
            message,
            code="output_blocked",
            suggestion="the tool ran, but its output may not be shown; do not run it again "
            "to see it",
            body=report,
        )
        self.report = report

    def for_model(self) -> str:
        return f"toolgate withheld this tool's output: {self.message}. Next: {self.suggestion}"


class ToolFailed(ToolgateError):
    """`/v1/execute` ran the tool (or refused its arguments) and it failed: `result` is the
    standard result, with `error.code` (e.g. `exit_nonzero`, `timeout`)."""

    def __init__(self, result: ExecResult, status: int):
        error: dict[str, Any] = dict(result.get("error") or {})
        super().__init__(
            error.get("message") or "the tool failed",
            code=error.get("code") or "tool_failed",
            suggestion=error.get("suggestion", ""),
            status=status,
            body=result,
        )
        self.result = result
