/**
 * The client for the toolgate HTTP API, and the whole call loop.
 *
 * `Client` wraps one endpoint per method (`authorize`, `execute`, `reportResult`, `screen`,
 * approvals, `audit`) and turns the sidecar's answers into the types of `./models.js`, or into
 * the errors of `./errors.js`. `call` runs the loop an agent runtime needs around a tool it
 * runs itself: authorize (waiting out a 429 when its `Retry-After` is short), wait for a human
 * when the answer is `pending_approval`, run the tool only on `allow`, and report what it
 * returned so that only the screened output reaches the model. `run` does the same with
 * `/v1/execute`, where toolgate runs the tool.
 *
 * It fails closed: a network error, a timeout, a 5xx or an answer that is not the API's throws
 * `Unavailable`, and the tool is not run. A request that could not be sent throws it with code
 * `unreachable`; one sent that got no answer (a timeout, a dropped connection), with code
 * `outcome_unknown`: it may have been decided, and through `/v1/execute` a tool may have run.
 *
 * A port of the Python client (clients/python/src/toolgate/client.py): the same methods in
 * camelCase, the same answers and errors. Every method is async; durations are in seconds.
 */

import {
  ApprovalDenied,
  ApprovalTimeout,
  Denied,
  OutputBlocked,
  RateLimited,
  RequestRejected,
  ToolFailed,
  Unavailable,
} from "./errors.js";
import type {
  Approval,
  ApprovalList,
  AuditPage,
  Decision,
  ExecResult,
  ResultReport,
  Screened,
} from "./models.js";

export const DEFAULT_URL = "http://127.0.0.1:8181";
/** The sidecar holds a long poll at most 60 s; the client asks for 30 s at a time. */
export const LONG_POLL_S = 30;
const DECISIONS: ReadonlyArray<unknown> = ["allow", "deny", "pending_approval"];
const REPORT_DECISIONS: ReadonlyArray<unknown> = ["allow", "warn", "mask", "block"];
const RESULT_STATUSES: ReadonlyArray<unknown> = ["success", "error", "pending"];
/**
 * The codes of a connection that failed before anything was sent: the call was not made.
 * Any other failure may come after the sidecar received the request.
 */
const NOT_SENT: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** A tool's arguments: a JSON object. */
export type Args = Record<string, unknown>;

/** Query parameters: `undefined` and `null` values are left out, arrays repeat the key. */
export type Params = Record<
  string,
  string | number | boolean | null | undefined | ReadonlyArray<string | number | boolean>
>;

/** What `new Client()` takes; every field is optional. */
export interface ClientOptions {
  /** The sidecar (default `$TOOLGATE_URL`, else http://127.0.0.1:8181). */
  url?: string;
  /** The bearer token (default `$TOOLGATE_TOKEN`; none in dev mode). */
  token?: string | null;
  /**
   * Seconds for each request; a long poll adds its wait (default 10). `/v1/execute` waits
   * `executeTimeout` instead.
   */
  timeout?: number;
  /** Seconds `decide`, `call` and `run` wait for a human (default 300). */
  approvalTimeout?: number;
  /** `decide`, `call` and `run` try a rate-limited call again up to this many times (default 2) ... */
  maxRetries?: number;
  /** ... when its `Retry-After` is at most this many seconds (default 30). */
  maxRetryWait?: number;
  /** The conversation every call belongs to (provenance), unless a call names one. */
  convId?: string | null;
  /**
   * Seconds to wait for `/v1/execute` to answer, instead of `timeout` (default 3700): the tool
   * runs meanwhile, up to its manifest's `limits.timeout_ms`, at most an hour.
   */
  executeTimeout?: number;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

/** What a client is configured with (see `ClientOptions` for each field). */
export interface Settings {
  readonly url: string;
  readonly token: string | null;
  readonly timeout: number;
  readonly approvalTimeout: number;
  readonly maxRetries: number;
  readonly maxRetryWait: number;
  readonly convId: string | null;
  readonly executeTimeout: number;
}

/** What `authorize` and `execute` send besides the tool and its arguments. */
export interface CallOptions {
  /** Recorded as `context.conv_id` (default: the client's `convId`). */
  convId?: string | null;
  /** Recorded as `context.trace_id`. */
  traceId?: string | null;
  /** Recorded as `context.iter`: the agent loop's iteration. */
  iteration?: number | null;
  /** Sending a call again after a human approved it. */
  approvalId?: string | null;
}

/** The conversation a call or a report belongs to (default: the client's `convId`). */
export interface ConvOptions {
  convId?: string | null;
}

export interface ReportOptions extends ConvOptions {
  /** The decision that allowed the call. */
  decisionId?: string | null;
}

/** The result of a guarded call: what may reach the model, and the records behind it. */
export interface Outcome {
  /** What the output gate let through: pass this, and only this, to the model. */
  output: unknown;
  /** The allowing decision. */
  decision: Decision;
  /** The sidecar's answer to the report of what the tool returned. */
  report: ResultReport;
}

/** An answer, read in full. */
interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

type Obj = Record<string, unknown>;

function isObject(value: unknown): value is Obj {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A value as Python's `str()` would give a JSON value. */
function str(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
}

/** Python's truthiness, for JSON values. */
function truthy(value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (isObject(value)) return Object.keys(value).length > 0;
  return Boolean(value);
}

function first(...values: unknown[]): unknown {
  return values.find(truthy);
}

function makeSettings(options: ClientOptions): Settings {
  const url = (options.url || process.env.TOOLGATE_URL || DEFAULT_URL).replace(/\/+$/, "");
  if (!url.startsWith("http://") && !url.startsWith("https://")) {
    throw new TypeError(
      `toolgate url must start with http:// or https://, not ${JSON.stringify(url)}`,
    );
  }
  const token = options.token !== undefined ? options.token : process.env.TOOLGATE_TOKEN;
  const timeout = options.timeout ?? 10;
  const approvalTimeout = options.approvalTimeout ?? 300;
  const maxRetries = options.maxRetries ?? 2;
  const maxRetryWait = options.maxRetryWait ?? 30;
  const executeTimeout = options.executeTimeout ?? 3700;
  const numbers = [timeout, approvalTimeout, maxRetries, maxRetryWait, executeTimeout];
  if (
    numbers.some((n) => typeof n !== "number" || Number.isNaN(n)) ||
    !(timeout > 0) ||
    !(executeTimeout > 0) ||
    approvalTimeout < 0 ||
    maxRetries < 0 ||
    maxRetryWait < 0
  ) {
    throw new RangeError(
      "timeouts and retry bounds must not be negative (timeout and executeTimeout above 0)",
    );
  }
  return Object.freeze({
    url,
    token: token || null,
    timeout,
    approvalTimeout,
    maxRetries,
    maxRetryWait,
    convId: options.convId ?? null,
    executeTimeout,
  });
}

// ---- request bodies and answers ----

function callBody(
  tool: string,
  args: Args | null | undefined,
  convId: string | null | undefined,
  traceId: string | null | undefined,
  iteration: number | null | undefined,
  approvalId: string | null | undefined,
): Obj {
  if (typeof tool !== "string" || tool === "") {
    throw new TypeError("tool must be a non-empty string");
  }
  const body: Obj = { tool, args: args ?? {} };
  const context: Obj = {};
  if (convId != null) context.conv_id = convId;
  if (traceId != null) context.trace_id = traceId;
  if (iteration != null) context.iter = iteration;
  if (Object.keys(context).length > 0) body.context = context;
  if (approvalId != null) body.approval_id = approvalId;
  return body;
}

function json(answer: Answer): unknown {
  try {
    return JSON.parse(answer.text);
  } catch (e) {
    throw new Unavailable(
      `the sidecar answered HTTP ${answer.status} with a body that is not JSON`,
      { code: "bad_answer", status: answer.status, cause: e },
    );
  }
}

/** Seconds to wait, from a 429's `retry_after` (body) or `Retry-After` (header); else 1. */
function retryAfter(answer: Answer, body: Obj): number {
  const value = "retry_after" in body ? body.retry_after : answer.headers.get("retry-after");
  let seconds = Number.NaN;
  if (typeof value === "number") {
    seconds = value;
  } else if (typeof value === "string" && /^\s*[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*$/i.test(value)) {
    seconds = Number(value);
  }
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : 1;
}

/** Throws for an error answer that is not a decision. */
function raiseForError(answer: Answer, body: unknown): never {
  const status = answer.status;
  const info: Obj = isObject(body) ? body : {};
  const code = str(first(info.error, info.code) ?? `http_${status}`);
  const message = str(first(info.message) ?? `the sidecar answered HTTP ${status}`);
  const suggestion = str(first(info.suggestion) ?? "");
  if (status === 429) throw new RateLimited(info, retryAfter(answer, info));
  if (status >= 500 || status < 400) {
    throw new Unavailable(message, { code, suggestion, status, body });
  }
  throw new RequestRejected(message, { code, suggestion, status, body });
}

/** A value as Python's `repr()` would show a JSON value (for the messages of `bad`). */
function repr(value: unknown): string {
  if (value === undefined || value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string") return `'${value.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  return str(value);
}

function nonEmptyString(value: unknown): value is string {
  return typeof value === "string" && value !== "";
}

/** An answer that is not the API's. */
function bad(status: number, body: unknown, why: string): Unavailable {
  return new Unavailable(`the sidecar's answer (HTTP ${status}) is not the API's: ${why}`, {
    code: "bad_answer",
    status,
    body,
  });
}

/**
 * A decision as the API defines it, or `Unavailable`: only a well-formed `allow` may ever run
 * a tool.
 */
function checkDecision(body: unknown, status: number): Decision {
  if (!isObject(body)) throw bad(status, body, "a decision must be an object");
  const decision = body.decision;
  if (!DECISIONS.includes(decision)) throw bad(status, body, `unknown decision ${repr(decision)}`);
  if (status === 401 && decision !== "deny") throw bad(status, body, "a 401 answer must be a deny");
  if (decision !== "deny" && !nonEmptyString(body.decision_id)) {
    throw bad(status, body, "no decision_id");
  }
  const errors = body.errors;
  if (!Array.isArray(errors) || !errors.every(isObject)) {
    throw bad(status, body, "`errors` must be a list of objects");
  }
  if (!Array.isArray(body.reasons)) throw bad(status, body, "`reasons` must be a list");
  if ("arguments" in body && !isObject(body.arguments)) {
    throw bad(status, body, "`arguments` must be an object");
  }
  if (decision === "pending_approval" && !nonEmptyString(body.approval_id)) {
    throw bad(status, body, "a pending decision without an approval_id");
  }
  return body as unknown as Decision;
}

/** A `/v1/results` answer as the API defines it, or `Unavailable`. */
function checkReport(body: unknown, status: number): ResultReport {
  if (!isObject(body) || !REPORT_DECISIONS.includes(body.decision)) {
    throw bad(status, body, "not a result report");
  }
  if (!("output" in body) || !Array.isArray(body.violations)) {
    throw bad(status, body, "a result report needs `output` and `violations`");
  }
  if (!Number.isInteger(body.dropped_count) || typeof body.truncated !== "boolean") {
    throw bad(status, body, "a result report needs `dropped_count` and `truncated`");
  }
  return body as unknown as ResultReport;
}

/** A `/v1/authorize` answer: a decision (200, 401), or an error. */
function decisionOf(answer: Answer): Decision {
  const body = json(answer);
  const status = answer.status;
  if (status === 429 && isObject(body)) throw new RateLimited(body, retryAfter(answer, body));
  if (status === 200 || status === 401) return checkDecision(body, status);
  if (status === 503 && isObject(body) && body.decision === "deny") {
    const errors = truthy(body.errors) && Array.isArray(body.errors) ? body.errors : [{}];
    const err: Obj = isObject(errors[0]) ? errors[0] : {};
    throw new Unavailable(
      "message" in err ? str(err.message) : "the decision was not recorded",
      { code: "audit_unavailable", status, body },
    );
  }
  raiseForError(answer, body);
}

/** A `/v1/execute` answer: a standard result (200, 202, 403, 409, 422), or an error. */
function execResultOf(answer: Answer): ExecResult {
  const body = json(answer);
  const status = answer.status;
  if (status === 429 && isObject(body)) throw new RateLimited(body, retryAfter(answer, body));
  if ([200, 202, 403, 409, 422].includes(status)) {
    if (!isObject(body) || !RESULT_STATUSES.includes(body.status)) {
      throw bad(status, body, "not a standard result");
    }
    if (body.status === "pending" && !nonEmptyString(body.approval_id)) {
      throw bad(status, body, "a pending result without an approval_id");
    }
    if (status === 200 && body.status === "pending") {
      throw bad(status, body, "a pending result must be HTTP 202");
    }
    return body as unknown as ExecResult;
  }
  if (status === 401 && isObject(body) && body.decision === "deny") {
    throw new Denied(body as unknown as Decision, { status: 401 });
  }
  raiseForError(answer, body);
}

/** Any other answer: a JSON object with HTTP 200, or an error. */
function objectOf(answer: Answer): Obj {
  const body = json(answer);
  if (answer.status !== 200 || !isObject(body)) raiseForError(answer, body);
  return body;
}

function reportOutput(report: ResultReport): unknown {
  if (report.decision === "block") throw new OutputBlocked(report);
  return report.output;
}

/** What a tool returned, as JSON: itself when it is JSON, else its text. */
function jsonable(value: unknown): unknown {
  if (value === undefined) return null;
  try {
    return JSON.stringify(value) === undefined ? String(value) : value;
  } catch {
    return String(value);
  }
}

function waitParam(wait: number | null | undefined): Params {
  if (wait == null) return {};
  return { wait: `${Math.max(0, Math.trunc(wait * 1000))}ms` };
}

/** A path segment, every reserved character escaped (Python's `quote(s, safe="")`). */
function segment(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase(),
  );
}

function approvalPath(approvalId: string): string {
  return "/v1/approvals/" + segment(approvalId);
}

function execOutcome(result: ExecResult, status: number): unknown {
  if (result.status === "success") return result.data;
  const decision = result.decision;
  if (status === 403 && decision) throw new Denied(decision, { status: 403 });
  throw new ToolFailed(result, status);
}

function query(params: Params | undefined): string {
  if (!params) return "";
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    if (Array.isArray(value)) {
      for (const one of value) search.append(key, String(one));
    } else {
      search.append(key, String(value));
    }
  }
  const text = search.toString();
  return text ? "?" + text : "";
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

function now(): number {
  return performance.now() / 1000;
}

/** The longest timer Node.js keeps (a longer one fires at once). */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * Whether a failed `fetch` failed before the request was sent: its code (or its cause's; for
 * several addresses tried, every one's) says the connection was never made. Anything else (a
 * timeout, a dropped connection, a reset, an error of a custom `fetch`) may come after.
 */
function notSent(e: unknown, depth = 0): boolean {
  if (depth > 4 || typeof e !== "object" || e === null) return false;
  const { code, cause, errors } = e as { code?: unknown; cause?: unknown; errors?: unknown };
  if (Array.isArray(errors) && errors.length > 0) {
    return errors.every((x) => notSent(x, depth + 1));
  }
  if (typeof code === "string") return NOT_SENT.has(code);
  // fetch refuses a port it blocks (e.g. 1, 25) before it connects.
  if (depth > 0 && e instanceof Error && e.message === "bad port") return true;
  return notSent(cause, depth + 1);
}

function describe(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  let out = `${e.name}: ${e.message}`;
  const cause = (e as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    out += ` (${typeof code === "string" ? code + ": " : ""}${cause.message})`;
  }
  return out;
}

/**
 * A client of one toolgate sidecar. Every method is async and throws the errors of
 * `./errors.js`; see `ClientOptions` for what it takes.
 */
export class Client {
  readonly settings: Settings;
  readonly #fetch: typeof globalThis.fetch;
  readonly #headers: Record<string, string>;

  constructor(options: ClientOptions = {}) {
    this.settings = makeSettings(options);
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#headers = { Accept: "application/json", "User-Agent": "toolgate-typescript" };
    if (this.settings.token) this.#headers.Authorization = `Bearer ${this.settings.token}`;
  }

  /** The sidecar's URL. */
  get url(): string {
    return this.settings.url;
  }

  async #request(
    method: string,
    path: string,
    options: {
      body?: unknown;
      params?: Params;
      /** Seconds a long poll adds to `timeout`. */
      extraTimeout?: number;
      /** Seconds to wait for the answer instead of `timeout` (`/v1/execute`). */
      readTimeout?: number;
    } = {},
  ): Promise<Answer> {
    const headers: Record<string, string> = { ...this.#headers };
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const url = this.settings.url + path + query(options.params);
    // `fetch` has one timeout for the whole request: connecting (which undici also bounds,
    // by 10 s), the answer and its body.
    const seconds = options.readTimeout || this.settings.timeout + (options.extraTimeout ?? 0);
    const signal = AbortSignal.timeout(Math.min(MAX_TIMER_MS, Math.ceil(seconds * 1000)));
    let response: Response;
    try {
      response = await this.#fetch(url, { method, headers, body, redirect: "manual", signal });
    } catch (e) {
      throw this.#transportError(e, notSent(e));
    }
    try {
      // The body is read under the same timeout.
      const text = await response.text();
      return { status: response.status, headers: response.headers, text };
    } catch (e) {
      throw this.#transportError(e, false);
    }
  }

  /**
   * A request that failed: `unreachable` when it could not be sent (nothing was run),
   * `outcome_unknown` when it may have reached the sidecar and got no answer.
   */
  #transportError(e: unknown, wasNotSent: boolean): Unavailable {
    if (wasNotSent) {
      return new Unavailable(`could not reach toolgate at ${this.settings.url}: ${describe(e)}`, {
        code: "unreachable",
        suggestion:
          "start the sidecar (`toolgate serve`) or check TOOLGATE_URL; nothing was sent, so " +
          "nothing was run",
        cause: e,
      });
    }
    return new Unavailable(
      `no answer from toolgate at ${this.settings.url} after the request was sent: ${describe(e)}`,
      {
        code: "outcome_unknown",
        suggestion:
          "the call may have been decided, and through /v1/execute the tool may have run: " +
          "check the audit log (GET /v1/audit) before trying it again",
        cause: e,
      },
    );
  }

  /** How long to wait before trying a rate-limited call again; null to give up. */
  #retryWait(e: RateLimited, attempt: number): number | null {
    if (attempt >= this.settings.maxRetries || e.retryAfter > this.settings.maxRetryWait) {
      return null;
    }
    return e.retryAfter;
  }

  #convId(convId: string | null | undefined): string | null {
    return convId || this.settings.convId;
  }

  // ---- endpoints ----

  /**
   * `POST /v1/authorize`: the decision (allow, deny or pending_approval). Throws `RateLimited`
   * on 429 and `Unavailable` when no decision could be had.
   */
  async authorize(tool: string, args?: Args | null, options: CallOptions = {}): Promise<Decision> {
    const body = callBody(
      tool,
      args,
      this.#convId(options.convId),
      options.traceId,
      options.iteration,
      options.approvalId,
    );
    return decisionOf(await this.#request("POST", "/v1/authorize", { body }));
  }

  /**
   * `POST /v1/execute`: toolgate decides and runs the tool. Returns the standard result
   * (status `success`, `error` or `pending`); throws `RateLimited` or `Unavailable`.
   */
  async execute(tool: string, args?: Args | null, options: CallOptions = {}): Promise<ExecResult> {
    const body = callBody(
      tool,
      args,
      this.#convId(options.convId),
      options.traceId,
      options.iteration,
      options.approvalId,
    );
    return execResultOf(
      await this.#request("POST", "/v1/execute", {
        body,
        readTimeout: this.settings.executeTimeout,
      }),
    );
  }

  /** `POST /v1/results`: what a tool returned, screened. Use `report.output`. */
  async reportResult(
    tool: string,
    output: unknown,
    options: ReportOptions = {},
  ): Promise<ResultReport> {
    const body: Obj = { tool, output: jsonable(output) };
    if (options.decisionId) body.decision_id = options.decisionId;
    const convId = this.#convId(options.convId);
    if (convId) body.conv_id = convId;
    const answer = await this.#request("POST", "/v1/results", { body });
    return checkReport(objectOf(answer), answer.status);
  }

  /** `POST /v1/gates/{gate}` (`input`, `context`, `output`, `tool_call`). */
  async screen(gate: string, content: unknown, options: ConvOptions = {}): Promise<Screened> {
    const body: Obj = { content };
    const convId = this.#convId(options.convId);
    if (convId) body.conv_id = convId;
    const answer = await this.#request("POST", "/v1/gates/" + segment(gate), { body });
    return objectOf(answer) as unknown as Screened;
  }

  /**
   * `GET /v1/approvals/{id}`; with `wait` (seconds, at most 60) it long-polls until a human
   * decides.
   */
  async getApproval(approvalId: string, options: { wait?: number | null } = {}): Promise<Approval> {
    const answer = await this.#request("GET", approvalPath(approvalId), {
      params: waitParam(options.wait),
      extraTimeout: options.wait || 0,
    });
    return objectOf(answer) as unknown as Approval;
  }

  /**
   * Long-polls until the approval is no longer pending (at most `timeout` seconds, default the
   * client's `approvalTimeout`); throws `ApprovalTimeout`.
   */
  async waitForApproval(approvalId: string, timeout?: number | null): Promise<Approval> {
    const limit = timeout ?? this.settings.approvalTimeout;
    const start = now();
    for (;;) {
      const left = limit - (now() - start);
      const approval = await this.getApproval(approvalId, {
        wait: Math.max(0, Math.min(LONG_POLL_S, left)),
      });
      if (approval.status !== "pending") return approval;
      if (now() - start >= limit) throw new ApprovalTimeout(approvalId, now() - start);
    }
  }

  /** `POST /v1/approvals/{id}/approve` (a human approver's token). */
  async approve(approvalId: string, reason?: string | null): Promise<Approval> {
    const body = reason ? { reason } : {};
    const answer = await this.#request("POST", approvalPath(approvalId) + "/approve", { body });
    return objectOf(answer) as unknown as Approval;
  }

  /** `POST /v1/approvals/{id}/deny` (a human approver's token). */
  async deny(approvalId: string, reason?: string | null): Promise<Approval> {
    const body = reason ? { reason } : {};
    const answer = await this.#request("POST", approvalPath(approvalId) + "/deny", { body });
    return objectOf(answer) as unknown as Approval;
  }

  /** `GET /v1/approvals` (filters as query parameters, e.g. `{status: "pending"}`). */
  async approvals(params?: Params): Promise<Approval[]> {
    const body = objectOf(await this.#request("GET", "/v1/approvals", { params }));
    return (body as Partial<ApprovalList>).approvals ?? [];
  }

  /**
   * `GET /v1/audit` (humans, filters as query parameters): the `records`, newest first, and
   * the `next_cursor` of the next page.
   */
  async audit(params?: Params): Promise<AuditPage> {
    return objectOf(await this.#request("GET", "/v1/audit", { params })) as unknown as AuditPage;
  }

  // ---- the loop ----

  /**
   * Authorize until there is an `allow`: waits out short rate limits and a pending approval,
   * then returns the allowing decision. Throws `Denied` (and its kinds) or `ApprovalTimeout`
   * otherwise.
   */
  async decide(tool: string, args?: Args | null, options: ConvOptions = {}): Promise<Decision> {
    let decision = await this.#authorizeRetrying(tool, args, options.convId, null);
    if (decision.decision === "pending_approval") {
      const approvalId = decision.approval_id;
      if (!approvalId) {
        throw new Unavailable("a pending decision without an approval id", { body: decision });
      }
      const approval = await this.waitForApproval(approvalId);
      if (approval.status !== "approved") throw new ApprovalDenied(decision, approval);
      decision = await this.#authorizeRetrying(tool, args, options.convId, approvalId);
    }
    if (decision.decision !== "allow") throw new Denied(decision);
    return decision;
  }

  async #authorizeRetrying(
    tool: string,
    args: Args | null | undefined,
    convId: string | null | undefined,
    approvalId: string | null,
  ): Promise<Decision> {
    let attempt = 0;
    for (;;) {
      try {
        return await this.authorize(tool, args, { convId, approvalId });
      } catch (e) {
        if (!(e instanceof RateLimited)) throw e;
        const wait = this.#retryWait(e, attempt);
        if (wait === null) throw e;
        attempt += 1;
        await sleep(wait);
      }
    }
  }

  /**
   * The whole loop around a tool you run: `decide`, then `fn(args)` (the masked arguments when
   * the sidecar masks them; `fn` may be sync or async), then `reportResult`. Returns what may
   * reach the model; throws `OutputBlocked` when nothing may.
   */
  async call<A extends Args = Args>(
    tool: string,
    args: A | null | undefined,
    fn: (args: A) => unknown,
    options: ConvOptions = {},
  ): Promise<Outcome> {
    const decision = await this.decide(tool, args, options);
    const runArgs = (decision.arguments !== undefined ? decision.arguments : (args ?? {})) as A;
    const output = await fn(runArgs);
    const report = await this.reportResult(tool, output, {
      decisionId: decision.decision_id,
      convId: options.convId,
    });
    return { output: reportOutput(report), decision, report };
  }

  /**
   * The loop with `/v1/execute`: toolgate runs the tool. Returns the result's `data`; throws
   * `Denied`, `ApprovalDenied`, `ApprovalTimeout` or `ToolFailed`.
   */
  async run(tool: string, args?: Args | null, options: ConvOptions = {}): Promise<unknown> {
    let approvalId: string | null = null;
    let attempt = 0;
    for (;;) {
      let answer: Answer;
      let result: ExecResult;
      try {
        const body = callBody(tool, args, this.#convId(options.convId), null, null, approvalId);
        answer = await this.#request("POST", "/v1/execute", {
          body,
          readTimeout: this.settings.executeTimeout,
        });
        result = execResultOf(answer);
      } catch (e) {
        if (!(e instanceof RateLimited)) throw e;
        const wait = this.#retryWait(e, attempt);
        if (wait === null) throw e;
        attempt += 1;
        await sleep(wait);
        continue;
      }
      if (result.status === "pending" && approvalId !== null) {
        throw bad(answer.status, result, "still pending after its approval");
      }
      if (result.status === "pending") {
        approvalId = result.approval_id ?? null;
        if (!approvalId) {
          throw new Unavailable("a pending result without an approval id", { body: result });
        }
        const approval = await this.waitForApproval(approvalId);
        if (approval.status !== "approved") {
          throw new ApprovalDenied(result.decision ?? ({} as Decision), approval);
        }
        continue;
      }
      return execOutcome(result, answer.status);
    }
  }
}
