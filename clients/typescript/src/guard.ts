/**
 * `guard` and `tool`: wrap a function so every call of it goes through toolgate.
 *
 * JavaScript has no named parameters, so a guarded function takes ONE argument: the call's
 * `args` object, as the model sends it. It runs only when the sidecar allows the call (after a
 * human's approval when one is needed), with the masked arguments when the sidecar masks them,
 * and the wrapper resolves to what the output gate lets through, not to what the function
 * returned.
 */

import { Client, type Args } from "./client.js";

let defaultInstance: Client | undefined;

/** The client used when none is given: `$TOOLGATE_URL` and `$TOOLGATE_TOKEN`, made once. */
export function defaultClient(): Client {
  defaultInstance ??= new Client();
  return defaultInstance;
}

/** What `guard` takes besides the function. */
export interface GuardOptions {
  /** The registered tool name (default: the function's name). */
  tool?: string;
  /** The client to use (default: `defaultClient()`, made on the first call). */
  client?: Client;
  /** The conversation the calls belong to (default: the client's `convId`). */
  convId?: string | null;
}

/**
 * A guarded function: takes the args object, resolves to the screened output. `toolgateTool`
 * is the tool name it is authorized as.
 */
export type Guarded<A extends Args = Args> = ((args?: A) => Promise<unknown>) & {
  readonly toolgateTool: string;
};

/**
 * Wraps `fn` so that calling it runs toolgate's loop (see `Client.call`): authorize (waiting
 * for a human when needed), run `fn(args)` only on allow, report its output and resolve to the
 * screened output. `fn` may be sync or async. Throws (rejects with) the errors of
 * `./errors.js`; on any of them `fn` has not run, except `OutputBlocked` and an `Unavailable`
 * from the report of its output (then it ran, and nothing of its output passes).
 */
export function guard<A extends Args = Args>(
  fn: (args: A) => unknown,
  options: GuardOptions = {},
): Guarded<A> {
  if (typeof fn !== "function") throw new TypeError("guard needs a function");
  const name = options.tool || fn.name;
  if (!name) {
    throw new TypeError("an anonymous function needs a tool name: guard(fn, {tool: \"...\"})");
  }
  const { client, convId } = options;
  const guarded = async (args?: A): Promise<unknown> => {
    const c = client ?? defaultClient();
    const outcome = await c.call<A>(name, args ?? ({} as A), fn, { convId });
    return outcome.output;
  };
  Object.defineProperty(guarded, "name", { value: fn.name || name });
  Object.defineProperty(guarded, "toolgateTool", { value: name, enumerable: true });
  return guarded as Guarded<A>;
}

/** `guard` with the tool name first: `tool("read_file", readFile, {client})`. */
export function tool<A extends Args = Args>(
  name: string,
  fn: (args: A) => unknown,
  options: Omit<GuardOptions, "tool"> = {},
): Guarded<A> {
  return guard(fn, { ...options, tool: name });
}
