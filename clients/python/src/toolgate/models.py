"""Response types of the toolgate HTTP API.

Generated from docs/openapi.json by clients/gen_models.py; do not edit by hand.
"""

from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["Risk", "Advice", "Rate", "Limits", "Violation", "DecisionGate", "Decision", "Approval", "ExecResultError", "ExecResultMetadata", "ExecResultOutput", "ExecResult", "Screened", "ErrorBody", "ConversationSignals", "AuditEntryInputsFindings", "AuditEntryInputs", "AuditEntry", "AuditRecord", "ResultReport", "AuditPage", "ApprovalList"]


Risk = Literal['low', 'medium', 'high', 'critical']


class Advice(TypedDict):
    code: "str"
    message: "str"
    suggestion: "str"


class Rate(TypedDict):
    """A limit: a token bucket (`burst` calls at once, refilled at `per_second`; both or neither), fixed windows (`per_minute`, `per_hour`, `per_day`, reset on the minute, on the hour and at 00:00 UTC), or both. At least one must be set."""

    per_second: NotRequired["float"]
    burst: NotRequired["int"]
    per_minute: NotRequired["int"]
    per_hour: NotRequired["int"]
    per_day: NotRequired["int"]


class Limits(TypedDict):
    timeout_ms: "int"
    max_output_bytes: "int"
    rate: NotRequired["Rate"]


class Violation(TypedDict):
    """One finding of a gate. Never the content found."""

    # The detector: `aws-access-key`, `email`, `sensitive-key`, `high-entropy`, `instruction-override`, … (docs/redaction.md lists them).
    kind: "str"
    category: "Literal['secret', 'pii', 'entropy', 'injection']"
    # What this gate does with it.
    action: "Literal['warn', 'mask', 'block']"
    # JSON pointer to the string or value, for JSON content.
    path: NotRequired["str"]
    # Byte range in the original string (absent for a sensitive key's whole value).
    span: NotRequired["list[int]"]
    # The finding is in the member name at `path`, not in its value (absent otherwise).
    in_key: NotRequired["Literal[True]"]


class DecisionGate(TypedDict):
    """What the tool_call gate found in the arguments (absent when nothing): `decision` (warn, mask or block) and up to 20 `violations` (kind, category, action, JSON pointer `path`, `span`). A block is a deny at stage `gate` with code `secret_in_arguments`."""

    decision: "Literal['warn', 'mask', 'block']"
    violations: "list[Violation]"


class Decision(TypedDict):
    decision: "Literal['allow', 'deny', 'pending_approval']"
    # UUIDv7
    decision_id: "str"
    policy_revision: "str"
    tool: "str | None"
    risk: "Risk | None"
    stage: "Literal['auth', 'registry', 'validation', 'shared_state', 'kill_switch', 'quarantine', 'descriptor', 'rate_limit', 'gate', 'policy', 'approval', 'approval_limit', 'audit']"
    # Ids of the determining policies.
    reasons: "list[str]"
    errors: "list[Advice]"
    limits: "Limits | None"
    # pending_approval: the approval to wait for and send back as `approval_id`; allow through an approval: the approval used.
    approval_id: NotRequired["str"]
    # What the tool_call gate found in the arguments (absent when nothing): `decision` (warn, mask or block) and up to 20 `violations` (kind, category, action, JSON pointer `path`, `span`). A block is a deny at stage `gate` with code `secret_in_arguments`.
    gate: NotRequired["DecisionGate"]
    # With `[gates.tool_call] apply_mask = true`: the masked arguments the call was decided on and the tool must run with.
    arguments: NotRequired["dict[str, Any]"]


class Approval(TypedDict):
    id: "str"
    principal: "str"
    # The human the requesting agent acted for (`Human::"alice"`), when its verified token said so (RFC 8693 `act`, or `auth.jwt.on_behalf_of_claim`). Only a call for the same human can use the approval.
    on_behalf_of: NotRequired["str"]
    tool: "str"
    risk: "str"
    args_sha256: "str"
    args_preview: "str"
    policy_revision: "str"
    decision_id: "str"
    created_ms: "int"
    expires_ms: "int"
    status: "Literal['pending', 'approved', 'denied', 'expired', 'used']"
    decided_by: NotRequired["str"]
    reason: NotRequired["str"]
    decided_ms: NotRequired["int"]
    used_ms: NotRequired["int"]
    # The ids of the policies that made the call wait (the forbids an approval lifts).
    waiting_on: NotRequired["list[str]"]
    # Where each text argument's value came from when the call was decided (`context.provenance`).
    provenance: NotRequired["dict[str, Any]"]
    # Only for a human the policies let decide this approval, while this sidecar holds it (not after a restart): the arguments in full, with secrets masked. Personal data such as addresses and IBANs is shown. The stored `args_preview` stays redacted.
    arguments: NotRequired["Any"]


class ExecResultError(TypedDict):
    code: "str"
    message: "str"
    suggestion: "str"


class ExecResultMetadata(TypedDict):
    # The decision that allowed (or refused) the run; empty when refused before deciding.
    decision_id: "str"
    # The run's id (its audit record, kind `execution`); absent when nothing ran.
    execution_id: NotRequired["str"]
    duration_ms: "int | None"
    # A program's exit status; null for built-in file tools and runs that did not end by exiting.
    exit_code: "int | None"
    # The signal that ended the program, if one did.
    signal: "int | None"
    timed_out: "bool"
    # The output was cut to `max_output_bytes`.
    truncated: "bool"
    # Output bytes read from the program.
    bytes: "int"
    cpu_ms: "int | None"
    max_rss_bytes: "int | None"
    # The run was stopped because its processes together passed its memory limit (`limits.memory_mb`); the error code is then `killed`.
    memory_exceeded: "bool"
    # The most memory the run's processes used together, where runs have a memory cgroup (`/readyz` `execution.memory_limit` is `cgroup`).
    memory_peak_bytes: "int | None"
    # Runs made (retries count; 0 when nothing ran).
    attempts: "int"
    # Landlock enforcement the program ran under (absent for built-in tools).
    landlock: NotRequired["str"]


class ExecResultOutput(TypedDict):
    """The output gate's verdict on what the tool returned."""

    decision: "Literal['allow', 'warn', 'mask', 'block']"
    violations: "list[Violation]"
    found: "int"
    # Dotted paths the tool's `output_fields` policy dropped (at most 100).
    dropped: "list[str]"
    dropped_count: "int"


class ExecResult(TypedDict):
    status: "Literal['success', 'error', 'pending']"
    # The output after parsing (text, json, jsonl), field policy, output gate and cap
    data: "Any"
    # Why the call did not run or failed (status `error`); null otherwise.
    error: "None | ExecResultError"
    metadata: "ExecResultMetadata"
    # Status `pending`: the approval to wait for, then send back as `approval_id`.
    approval_id: NotRequired["str"]
    # The decision, when the call was decided (absent when refused before deciding).
    decision: NotRequired["Decision"]
    # The output gate's verdict on what the tool returned.
    output: NotRequired["ExecResultOutput"]
    # The end of stderr (4 KiB), screened by the output gate
    stderr: NotRequired["str"]


class Screened(TypedDict):
    # The most severe action among the violations.
    decision: "Literal['allow', 'warn', 'mask', 'block']"
    # The content with every finding this gate masks or blocks replaced by `<redacted:KIND>`; same shape as sent.
    content: "Any"
    violations: "list[Violation]"
    # How many violations there were in all (the list holds at most 1,000).
    found: "int"
    # Stream gate only: the stream this chunk belongs to.
    stream_id: NotRequired["str"]
    # Stream gate only: bytes held back, waiting for more of the stream or `final`.
    held: NotRequired["int"]
    # Stream gate only: the stream is closed (`final` was sent, or it was blocked).
    closed: NotRequired["bool"]


class ErrorBody(TypedDict):
    error: "str"
    message: "str"
    suggestion: "str"


class ConversationSignals(TypedDict):
    """context.conversation: what the gates found in the tool output of the call's conversation. known is false when the call names no conversation or toolgate holds none for it (every count 0), or holds it only in part, read back after an unclean stop (the counts are what was saved)."""

    known: "bool"
    # Tool outputs screened in the conversation.
    outputs: "int"
    # Every detector kind and category found in them.
    kinds: "list[str]"
    # Outputs with an injection finding.
    injections: "int"
    injection_kinds: "list[str]"
    # Age of the last output with an injection finding; absent when none.
    seconds_since_injection: NotRequired["int"]


class AuditEntryInputsFindings(TypedDict):
    """Detector kinds and categories found in the arguments (context.findings)."""

    kinds: NotRequired["list[str]"]
    args: NotRequired["dict[str, Any]"]


class AuditEntryInputs(TypedDict):
    """Decisions: what the policies read besides the arguments and the deployment data, as the decision saw it, each part present only when it says something. Fact strings are redacted; sets keep at most 16 items (then `+N more`)."""

    # Text argument → where its value came from (context.provenance).
    provenance: NotRequired["dict[str, Any]"]
    # Argument → fact → value (context.facts), strings redacted.
    facts: NotRequired["dict[str, Any]"]
    # Detector kinds and categories found in the arguments (context.findings).
    findings: NotRequired["AuditEntryInputsFindings"]
    conversation: NotRequired["ConversationSignals"]


class AuditEntry(TypedDict):
    """What one audit record says. Arguments are never stored in clear: a redacted preview and a digest stand in for them."""

    # The arguments, redacted, strings cut to 200 characters.
    args_preview: NotRequired["str"]
    # SHA-256 of the canonical JSON of the arguments.
    args_sha256: NotRequired["str"]
    # Unix ms.
    at_ms: "int"
    conv_id: NotRequired["str"]
    # allow | deny | pending_approval; for approvals the event (created, approved, denied, expired, used); for reloads applied | failed; for other kinds their event.
    decision: "str"
    # Free-form detail: the approval id of a decision, the approver's reason, reload revisions.
    detail: NotRequired["str"]
    # Time spent deciding, in microseconds.
    duration_us: NotRequired["int"]
    # State changes committed with this record: the tree, the key, and the SHA-256 of the value set (absent: removed). On a `state_checked` record, the whole state found at a start. `audit verify --state` holds the stored state to these.
    effects: NotRequired["list[dict[str, Any]]"]
    # Decision id, approval id or event id.
    id: "str"
    # Decisions: what the policies read besides the arguments and the deployment data, as the decision saw it, each part present only when it says something. Fact strings are redacted; sets keep at most 16 items (then `+N more`).
    inputs: NotRequired["AuditEntryInputs"]
    # Agent loop iteration.
    iter: NotRequired["int"]
    kind: "Literal['decision', 'approval', 'reload', 'admin', 'anomaly', 'gate', 'result', 'execution']"
    # Decisions: the human the agent acted for (`Human::"alice"`), when its verified token said so.
    on_behalf_of: NotRequired["str"]
    policy_revision: NotRequired["str"]
    # `Agent::"x"` or `Human::"y"`, when known.
    principal: NotRequired["str"]
    # Determining policy ids, or error codes (absent when none).
    reasons: NotRequired["list[str]"]
    risk: NotRequired["str"]
    stage: NotRequired["str"]
    tool: NotRequired["str"]
    trace_id: NotRequired["str"]
    # The W3C trace id of the request that made the entry: its span's when traces are on, else the incoming traceparent's (absent when neither).
    otel_trace_id: NotRequired["str"]


class AuditRecord(TypedDict):
    """A stored entry and the hashes that chain it to the one before."""

    # Position in the log, from 1, without gaps.
    seq: "int"
    # Hash of the previous record (64 zeros before the first).
    prev: "str"
    # `H(prev ‖ canonical(seq, entry))`, hex.
    hash: "str"
    # The id of the HMAC key that sealed it (absent on records of a legacy chain).
    key: NotRequired["str"]
    entry: "AuditEntry"


class ResultReport(TypedDict):
    result_id: "str"
    decision: "Literal['allow', 'warn', 'mask', 'block']"
    # What may reach the model (null when blocked or when nothing remained).
    output: "Any"
    violations: "list[Violation]"
    found: "int"
    truncated: "bool"
    # Size of the screened output (JSON text, or the string) before the cap.
    bytes: "int"
    dropped: "list[str]"
    dropped_count: "int"
    # Why a result was blocked.
    errors: "list[Advice]"


class AuditPage(TypedDict):
    records: "list[AuditRecord]"
    # The `cursor` for the next page; null on the last.
    next_cursor: "int | None"


class ApprovalList(TypedDict):
    approvals: "list[Approval]"
