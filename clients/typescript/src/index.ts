/**
 * TypeScript client for toolgate, the sidecar that decides whether an agent's tool call may run.
 *
 * ```ts
 * import { Client, guard } from "toolgate";
 *
 * const client = new Client({ url: "http://127.0.0.1:8181", token: "..." });
 * const readFile = guard(({ path }: { path: string }) => fs.readFileSync(path, "utf8"), {
 *   tool: "read_file",
 *   client,
 * });
 * await readFile({ path: "src/main.rs" }); // authorized, run and screened; or throws Denied
 * ```
 *
 * `Client` wraps the HTTP API; `guard`/`tool` wrap a function; the errors derive from
 * `ToolgateError`; the response types are generated from docs/openapi.json.
 */

export {
  Client,
  DEFAULT_URL,
  LONG_POLL_S,
  type Args,
  type CallOptions,
  type ClientOptions,
  type ConvOptions,
  type Outcome,
  type Params,
  type ReportOptions,
  type Settings,
} from "./client.js";
export {
  ApprovalDenied,
  ApprovalTimeout,
  Denied,
  OutputBlocked,
  RateLimited,
  RequestRejected,
  ToolFailed,
  ToolgateError,
  Unavailable,
  type DeniedOptions,
  type ErrorOptions,
} from "./errors.js";
export { defaultClient, guard, tool, type GuardOptions, type Guarded } from "./guard.js";
export type * from "./models.js";

export const VERSION = "0.1.0";
