/**
 * The errors the toolgate client throws.
 *
 * Every one derives from `ToolgateError`. The client fails closed: when the sidecar cannot be
 * reached, answers an error, or answers something it cannot read, it throws `Unavailable`,
 * and a guarded tool does not run.
 */

import type { Advice, Approval, Decision, ExecResult, ResultReport } from "./models.js";

/** What `ToolgateError` is made with besides its message. */
export interface ErrorOptions {
  code?: string;
  suggestion?: string;
  status?: number | null;
  body?: unknown;
  /** The error behind this one (a network error, a JSON parse error). */
  cause?: unknown;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function text(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** A JSON value as text: a string itself, anything else as JSON. */
function str(value: unknown): string {
  return typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
}

/** Base class. `code`, `message` and `suggestion` are the sidecar's when it gave them. */
export class ToolgateError extends Error {
  override name = "ToolgateError";
  readonly code: string;
  readonly suggestion: string;
  readonly status: number | null;
  readonly body: unknown;

  constructor(message: string, options: ErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code ?? "error";
    this.suggestion = options.suggestion ?? "";
    this.status = options.status ?? null;
    this.body = options.body ?? null;
  }

  /** `code: message (suggestion)`, as the Python client's `str()`. */
  override toString(): string {
    let out = `${this.code}: ${this.message}`;
    if (this.suggestion) out += ` (${this.suggestion})`;
    return out;
  }

  /**
   * What to tell the model instead of the tool's output: why, and what to do next. The same
   * text as the Python client's `for_model()`.
   */
  forModel(): string {
    let out = `toolgate did not run this tool (${this.code}): ${this.message}`;
    if (this.suggestion) out += `. Next: ${this.suggestion}`;
    return out;
  }
}

/**
 * The sidecar could not be reached or could not decide (network error, timeout, 5xx, or an
 * answer that is not the API's). Nothing was allowed: do not run the tool.
 */
export class Unavailable extends ToolgateError {
  override name = "Unavailable";
}

/**
 * The sidecar refused the request itself (4xx: malformed body, unknown tool for a result, a
 * human token where an agent's is needed, no such approval, ...).
 */
export class RequestRejected extends ToolgateError {
  override name = "RequestRejected";
}

/** What `Denied` is made with besides the decision. */
export interface DeniedOptions {
  status?: number | null;
  code?: string | null;
  message?: string | null;
  suggestion?: string | null;
}

/** The call was denied. `decision` is the sidecar's decision (reasons, stage, errors). */
export class Denied extends ToolgateError {
  override name = "Denied";
  readonly decision: Decision;
  readonly decisionId: string;
  readonly stage: string;
  readonly reasons: string[];
  readonly errors: Advice[];

  constructor(decision: Decision, options: DeniedOptions = {}) {
    // Tolerant of a malformed decision: only the objects of `errors` count, and `reasons`
    // that is not an array is none.
    const d: Record<string, unknown> = isObject(decision) ? decision : {};
    const errors = (Array.isArray(d.errors) ? d.errors.filter(isObject) : []) as unknown as Advice[];
    const first: Record<string, unknown> = (errors[0] as unknown as Record<string, unknown>) ?? {};
    super(text(options.message) ?? text(first.message) ?? "the call was denied", {
      code: text(options.code) ?? text(first.code) ?? "denied",
      suggestion: text(options.suggestion) ?? (typeof first.suggestion === "string" ? first.suggestion : ""),
      status: options.status ?? null,
      body: decision,
    });
    this.decision = decision;
    this.decisionId = d.decision_id === undefined ? "" : str(d.decision_id);
    this.stage = d.stage === undefined ? "" : str(d.stage);
    this.reasons = Array.isArray(d.reasons) ? d.reasons.map(str) : [];
    this.errors = errors;
  }
}

/**
 * A rate limit (`rate_limited`) or the bound on pending approvals
 * (`too_many_pending_approvals`) refused the call: HTTP 429. `retryAfter` is in seconds.
 */
export class RateLimited extends Denied {
  override name = "RateLimited";
  readonly retryAfter: number;

  constructor(body: Record<string, unknown>, retryAfter: number, status = 429) {
    super(body as unknown as Decision, {
      status,
      code: text(body.error),
      message: text(body.message),
      suggestion: text(body.suggestion),
    });
    this.retryAfter = retryAfter;
  }
}

/**
 * The call needed a human's approval and did not get it: the approval was denied, or it
 * expired. `approval` is its record.
 */
export class ApprovalDenied extends Denied {
  override name = "ApprovalDenied";
  readonly approval: Approval;

  constructor(decision: Decision, approval: Approval) {
    const a: Record<string, unknown> = isObject(approval) ? approval : {};
    const status = a.status ?? "denied";
    let message = `approval ${a.id} was ${status}`;
    if (a.decided_by) message += ` by ${a.decided_by}`;
    if (a.reason) message += `: ${a.reason}`;
    super(decision, {
      code: `approval_${status}`,
      message,
      suggestion: "do not retry the call unchanged; tell the user it was not approved",
    });
    this.approval = approval;
  }
}

/**
 * No human decided within the client's `approvalTimeout`. The approval stays pending on the
 * sidecar; wait again with `waitForApproval(approvalId)` or let it expire.
 */
export class ApprovalTimeout extends ToolgateError {
  override name = "ApprovalTimeout";
  readonly approvalId: string;

  constructor(approvalId: string, waited: number) {
    super(`no decision on approval ${approvalId} after ${waited.toFixed(0)} s`, {
      code: "approval_timeout",
      suggestion: "wait again, or tell the user the call is waiting for a human",
    });
    this.approvalId = approvalId;
  }
}

/**
 * The tool ran, but the output gate blocked what it returned: nothing of it may reach the
 * model. `report` is the sidecar's answer (violations, errors).
 */
export class OutputBlocked extends ToolgateError {
  override name = "OutputBlocked";
  readonly report: ResultReport;

  constructor(report: ResultReport) {
    const r: Record<string, unknown> = isObject(report) ? report : {};
    const violations = Array.isArray(r.violations) ? r.violations : [];
    const kinds = [
      ...new Set(violations.map((v) => String((isObject(v) ? v.kind : undefined) ?? "?"))),
    ].sort();
    const errors = Array.isArray(r.errors) ? r.errors : [];
    let message = "the output gate blocked the tool's output";
    if (kinds.length > 0) {
      message += ` (${kinds.join(", ")})`;
    } else if (errors.length > 0) {
      const first = isObject(errors[0]) ? errors[0] : {};
      message += `: ${typeof first.message === "string" ? first.message : ""}`;
    }
    super(message, {
      code: "output_blocked",
      suggestion: "the tool ran, but its output may not be shown; do not run it again to see it",
      body: report,
    });
    this.report = report;
  }

  /** What to tell the model instead of the tool's output: it ran, and nothing of it may pass. */
  override forModel(): string {
    return `toolgate withheld this tool's output: ${this.message}. Next: ${this.suggestion}`;
  }
}

/**
 * `/v1/execute` ran the tool (or refused its arguments) and it failed: `result` is the
 * standard result, with `error.code` (e.g. `exit_nonzero`, `timeout`).
 */
export class ToolFailed extends ToolgateError {
  override name = "ToolFailed";
  readonly result: ExecResult;

  constructor(result: ExecResult, status: number) {
    const r: Record<string, unknown> = isObject(result) ? result : {};
    const error: Record<string, unknown> = isObject(r.error) ? r.error : {};
    super(text(error.message) ?? "the tool failed", {
      code: text(error.code) ?? "tool_failed",
      suggestion: typeof error.suggestion === "string" ? error.suggestion : "",
      status,
      body: result,
    });
    this.result = result;
  }
}
