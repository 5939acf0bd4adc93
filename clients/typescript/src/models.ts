// Response types of the toolgate HTTP API.
// Generated from docs/openapi.json by clients/gen_models.py; do not edit by hand.

export type Risk = "low" | "medium" | "high" | "critical";

export interface Advice {
  code: string;
  message: string;
  suggestion: string;
}

/** A limit: a token bucket (`burst` calls at once, refilled at `per_second`; both or neither), fixed windows (`per_minute`, `per_hour`, `per_day`, reset on the minute, on the hour and at 00:00 UTC), or both. At least one must be set. */
export interface Rate {
  per_second?: number;
  burst?: number;
  per_minute?: number;
  per_hour?: number;
  per_day?: number;
}

export interface Limits {
  timeout_ms: number;
  max_output_bytes: number;
  rate?: Rate;
}

/** One finding of a gate. Never the content found. */
export interface Violation {
  /** The detector: `aws-access-key`, `email`, `sensitive-key`, `high-entropy`, `instruction-override`, … (docs/redaction.md lists them). */
  kind: string;
  category: "secret" | "pii" | "entropy" | "injection";
  /** What this gate does with it. */
  action: "warn" | "mask" | "block";
  /** JSON pointer to the string or value, for JSON content. */
  path?: string;
  /** Byte range in the original string (absent for a sensitive key's whole value). */
  span?: Array<number>;
  /** The finding is in the member name at `path`, not in its value (absent otherwise). */
  in_key?: true;
}

/** What the tool_call gate found in the arguments (absent when nothing): `decision` (warn, mask or block) and up to 20 `violations` (kind, category, action, JSON pointer `path`, `span`). A block is a deny at stage `gate` with code `secret_in_arguments`. */
export interface DecisionGate {
  decision: "warn" | "mask" | "block";
  violations: Array<Violation>;
}

export interface Decision {
  decision: "allow" | "deny" | "pending_approval";
  /** UUIDv7 */
  decision_id: string;
  policy_revision: string;
  tool: string | null;
  risk: Risk | null;
  stage: "auth" | "registry" | "validation" | "shared_state" | "kill_switch" | "quarantine" | "descriptor" | "rate_limit" | "gate" | "policy" | "approval" | "approval_limit" | "audit";
  /** Ids of the determining policies. */
  reasons: Array<string>;
  errors: Array<Advice>;
  limits: Limits | null;
  /** pending_approval: the approval to wait for and send back as `approval_id`; allow through an approval: the approval used. */
  approval_id?: string;
  /** What the tool_call gate found in the arguments (absent when nothing): `decision` (warn, mask or block) and up to 20 `violations` (kind, category, action, JSON pointer `path`, `span`). A block is a deny at stage `gate` with code `secret_in_arguments`. */
  gate?: DecisionGate;
  /** With `[gates.tool_call] apply_mask = true`: the masked arguments the call was decided on and the tool must run with. */
  arguments?: Record<string, unknown>;
}

export interface Approval {
  id: string;
  principal: string;
  /** The human the requesting agent acted for (`Human::"alice"`), when its verified token said so (RFC 8693 `act`, or `auth.jwt.on_behalf_of_claim`). Only a call for the same human can use the approval. */
  on_behalf_of?: string;
  tool: string;
  risk: string;
  args_sha256: string;
  args_preview: string;
  policy_revision: string;
  decision_id: string;
  created_ms: number;
  expires_ms: number;
  status: "pending" | "approved" | "denied" | "expired" | "used";
  decided_by?: string;
  reason?: string;
  decided_ms?: number;
  used_ms?: number;
  /** The ids of the policies that made the call wait (the forbids an approval lifts). */
  waiting_on?: Array<string>;
  /** Where each text argument's value came from when the call was decided (`context.provenance`). */
  provenance?: Record<string, unknown>;
  /** Only for a human the policies let decide this approval, while this sidecar holds it (not after a restart): the arguments in full, with secrets masked. Personal data such as addresses and IBANs is shown. The stored `args_preview` stays redacted. */
  arguments?: unknown;
}

export interface ExecResultError {
  code: string;
  message: string;
  suggestion: string;
}

export interface ExecResultMetadata {
  /** The decision that allowed (or refused) the run; empty when refused before deciding. */
  decision_id: string;
  /** The run's id (its audit record, kind `execution`); absent when nothing ran. */
  execution_id?: string;
  duration_ms: number | null;
  /** A program's exit status; null for built-in file tools and runs that did not end by exiting. */
  exit_code: number | null;
  /** The signal that ended the program, if one did. */
  signal: number | null;
  timed_out: boolean;
  /** The output was cut to `max_output_bytes`. */
  truncated: boolean;
  /** Output bytes read from the program. */
  bytes: number;
  cpu_ms: number | null;
  max_rss_bytes: number | null;
  /** The run was stopped because its processes together passed its memory limit (`limits.memory_mb`); the error code is then `killed`. */
  memory_exceeded: boolean;
  /** The most memory the run's processes used together, where runs have a memory cgroup (`/readyz` `execution.memory_limit` is `cgroup`). */
  memory_peak_bytes: number | null;
  /** Runs made (retries count; 0 when nothing ran). */
  attempts: number;
  /** Landlock enforcement the program ran under (absent for built-in tools). */
  landlock?: string;
}

/** The output gate's verdict on what the tool returned. */
export interface ExecResultOutput {
  decision: "allow" | "warn" | "mask" | "block";
  violations: Array<Violation>;
  found: number;
  /** Dotted paths the tool's `output_fields` policy dropped (at most 100). */
  dropped: Array<string>;
  dropped_count: number;
}

export interface ExecResult {
  status: "success" | "error" | "pending";
  /** The output after parsing (text, json, jsonl), field policy, output gate and cap */
  data: unknown;
  /** Why the call did not run or failed (status `error`); null otherwise. */
  error: null | ExecResultError;
  metadata: ExecResultMetadata;
  /** Status `pending`: the approval to wait for, then send back as `approval_id`. */
  approval_id?: string;
  /** The decision, when the call was decided (absent when refused before deciding). */
  decision?: Decision;
  /** The output gate's verdict on what the tool returned. */
  output?: ExecResultOutput;
  /** The end of stderr (4 KiB), screened by the output gate */
  stderr?: string;
}

export interface Screened {
  /** The most severe action among the violations. */
  decision: "allow" | "warn" | "mask" | "block";
  /** The content with every finding this gate masks or blocks replaced by `<redacted:KIND>`; same shape as sent. */
  content: unknown;
  violations: Array<Violation>;
  /** How many violations there were in all (the list holds at most 1,000). */
  found: number;
  /** Stream gate only: the stream this chunk belongs to. */
  stream_id?: string;
  /** Stream gate only: bytes held back, waiting for more of the stream or `final`. */
  held?: number;
  /** Stream gate only: the stream is closed (`final` was sent, or it was blocked). */
  closed?: boolean;
}

export interface ErrorBody {
  error: string;
  message: string;
  suggestion: string;
}

/** context.conversation: what the gates found in the tool output of the call's conversation. known is false when the call names no conversation or toolgate holds none for it (every count 0), or holds it only in part, read back after an unclean stop (the counts are what was saved). */
export interface ConversationSignals {
  known: boolean;
  /** Tool outputs screened in the conversation. */
  outputs: number;
  /** Every detector kind and category found in them. */
  kinds: Array<string>;
  /** Outputs with an injection finding. */
  injections: number;
  injection_kinds: Array<string>;
  /** Age of the last output with an injection finding; absent when none. */
  seconds_since_injection?: number;
}

/** Detector kinds and categories found in the arguments (context.findings). */
export interface AuditEntryInputsFindings {
  kinds?: Array<string>;
  args?: Record<string, unknown>;
}

/** Decisions: what the policies read besides the arguments and the deployment data, as the decision saw it, each part present only when it says something. Fact strings are redacted; sets keep at most 16 items (then `+N more`). */
export interface AuditEntryInputs {
  /** Text argument → where its value came from (context.provenance). */
  provenance?: Record<string, unknown>;
  /** Argument → fact → value (context.facts), strings redacted. */
  facts?: Record<string, unknown>;
  /** Detector kinds and categories found in the arguments (context.findings). */
  findings?: AuditEntryInputsFindings;
  conversation?: ConversationSignals;
}

/** What one audit record says. Arguments are never stored in clear: a redacted preview and a digest stand in for them. */
export interface AuditEntry {
  /** The arguments, redacted, strings cut to 200 characters. */
  args_preview?: string;
  /** SHA-256 of the canonical JSON of the arguments. */
  args_sha256?: string;
  /** Unix ms. */
  at_ms: number;
  conv_id?: string;
  /** allow | deny | pending_approval; for approvals the event (created, approved, denied, expired, used); for reloads applied | failed; for other kinds their event. */
  decision: string;
  /** Free-form detail: the approval id of a decision, the approver's reason, reload revisions. */
  detail?: string;
  /** Time spent deciding, in microseconds. */
  duration_us?: number;
  /** State changes committed with this record: the tree, the key, and the SHA-256 of the value set (absent: removed). On a `state_checked` record, the whole state found at a start. `audit verify --state` holds the stored state to these. */
  effects?: Array<Record<string, unknown>>;
  /** Decision id, approval id or event id. */
  id: string;
  /** Decisions: what the policies read besides the arguments and the deployment data, as the decision saw it, each part present only when it says something. Fact strings are redacted; sets keep at most 16 items (then `+N more`). */
  inputs?: AuditEntryInputs;
  /** Agent loop iteration. */
  iter?: number;
  kind: "decision" | "approval" | "reload" | "admin" | "anomaly" | "gate" | "result" | "execution";
  /** Decisions: the human the agent acted for (`Human::"alice"`), when its verified token said so. */
  on_behalf_of?: string;
  policy_revision?: string;
  /** `Agent::"x"` or `Human::"y"`, when known. */
  principal?: string;
  /** Determining policy ids, or error codes (absent when none). */
  reasons?: Array<string>;
  risk?: string;
  stage?: string;
  tool?: string;
  trace_id?: string;
  /** The W3C trace id of the request that made the entry: its span's when traces are on, else the incoming traceparent's (absent when neither). */
  otel_trace_id?: string;
}

/** A stored entry and the hashes that chain it to the one before. */
export interface AuditRecord {
  /** Position in the log, from 1, without gaps. */
  seq: number;
  /** Hash of the previous record (64 zeros before the first). */
  prev: string;
  /** `H(prev ‖ canonical(seq, entry))`, hex. */
  hash: string;
  /** The id of the HMAC key that sealed it (absent on records of a legacy chain). */
  key?: string;
  entry: AuditEntry;
}

export interface ResultReport {
  result_id: string;
  decision: "allow" | "warn" | "mask" | "block";
  /** What may reach the model (null when blocked or when nothing remained). */
  output: unknown;
  violations: Array<Violation>;
  found: number;
  truncated: boolean;
  /** Size of the screened output (JSON text, or the string) before the cap. */
  bytes: number;
  dropped: Array<string>;
  dropped_count: number;
  /** Why a result was blocked. */
  errors: Array<Advice>;
}

export interface AuditPage {
  records: Array<AuditRecord>;
  /** The `cursor` for the next page; null on the last. */
  next_cursor: number | null;
}

export interface ApprovalList {
  approvals: Array<Approval>;
}
