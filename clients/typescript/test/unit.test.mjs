// What needs no sidecar: settings, the error classes, guard's naming.

import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import * as toolgate from "../dist/index.js";

const {
  ApprovalDenied,
  ApprovalTimeout,
  Client,
  Denied,
  OutputBlocked,
  RateLimited,
  RequestRejected,
  ToolFailed,
  ToolgateError,
  Unavailable,
  guard,
  tool,
} = toolgate;

const T = { timeout: 5_000 };
let saved;

beforeEach(() => {
  saved = { url: process.env.TOOLGATE_URL, token: process.env.TOOLGATE_TOKEN };
  delete process.env.TOOLGATE_URL;
  delete process.env.TOOLGATE_TOKEN;
});

afterEach(() => {
  for (const [key, name] of [["url", "TOOLGATE_URL"], ["token", "TOOLGATE_TOKEN"]]) {
    if (saved[key] === undefined) delete process.env[name];
    else process.env[name] = saved[key];
  }
});

test("settings: defaults, environment, validation", T, () => {
  const c = new Client();
  assert.equal(c.url, "http://127.0.0.1:8181");
  assert.deepEqual(c.settings, {
    url: "http://127.0.0.1:8181",
    token: null,
    timeout: 10,
    approvalTimeout: 300,
    maxRetries: 2,
    maxRetryWait: 30,
    convId: null,
    executeTimeout: 3700,
  });
  assert.equal(new Client({ executeTimeout: 5 }).settings.executeTimeout, 5);
  process.env.TOOLGATE_URL = "http://localhost:9999/";
  process.env.TOOLGATE_TOKEN = "from-env";
  const env = new Client();
  assert.equal(env.url, "http://localhost:9999");
  assert.equal(env.settings.token, "from-env");
  assert.equal(new Client({ token: null }).settings.token, null);
  assert.equal(new Client({ url: "https://x.example/", token: "t" }).url, "https://x.example");

  assert.throws(() => new Client({ url: "localhost:8181" }), TypeError);
  assert.throws(() => new Client({ timeout: 0 }), RangeError);
  assert.throws(() => new Client({ approvalTimeout: -1 }), RangeError);
  assert.throws(() => new Client({ maxRetries: -1 }), RangeError);
  assert.throws(() => new Client({ maxRetryWait: Number.NaN }), RangeError);
  assert.throws(() => new Client({ executeTimeout: 0 }), RangeError);
  assert.throws(() => new Client({ executeTimeout: -1 }), RangeError);
  assert.throws(() => new Client({ executeTimeout: Number.NaN }), RangeError);
  assert.throws(
    () => new Client({ executeTimeout: 0 }),
    /timeout and executeTimeout above 0/,
  );
});

test("errors: the hierarchy and fields", T, () => {
  const decision = {
    decision: "deny",
    decision_id: "d1",
    stage: "policy",
    reasons: ["p1"],
    errors: [{ code: "forbidden", message: "no", suggestion: "don't" }],
  };
  const denied = new Denied(decision, { status: 403 });
  assert.ok(denied instanceof ToolgateError && denied instanceof Error);
  assert.equal(denied.name, "Denied");
  assert.equal(denied.code, "forbidden");
  assert.equal(denied.message, "no");
  assert.equal(denied.suggestion, "don't");
  assert.equal(denied.status, 403);
  assert.equal(denied.decisionId, "d1");
  assert.equal(denied.stage, "policy");
  assert.deepEqual(denied.reasons, ["p1"]);
  assert.equal(denied.body, decision);
  assert.equal(String(denied), "forbidden: no (don't)");
  assert.equal(new Denied({}).message, "the call was denied");
  assert.equal(new Denied({}).code, "denied");

  const limited = new RateLimited({ error: "rate_limited", message: "slow down" }, 2);
  assert.ok(limited instanceof Denied);
  assert.equal(limited.retryAfter, 2);
  assert.equal(limited.status, 429);
  assert.equal(limited.code, "rate_limited");

  const approval = { id: "a1", status: "expired" };
  const ad = new ApprovalDenied(decision, approval);
  assert.ok(ad instanceof Denied);
  assert.equal(ad.code, "approval_expired");
  assert.equal(ad.message, "approval a1 was expired");
  assert.equal(ad.approval, approval);

  const timeout = new ApprovalTimeout("a2", 3.4);
  assert.equal(timeout.approvalId, "a2");
  assert.equal(timeout.message, "no decision on approval a2 after 3 s");
  assert.equal(timeout.code, "approval_timeout");

  const blocked = new OutputBlocked({
    decision: "block",
    violations: [{ kind: "jwt" }, { kind: "email" }, { kind: "jwt" }],
    errors: [],
  });
  assert.equal(blocked.message, "the output gate blocked the tool's output (email, jwt)");
  assert.equal(blocked.code, "output_blocked");
  assert.equal(
    blocked.suggestion,
    "the tool ran, but its output may not be shown; do not run it again to see it",
  );

  const failed = new ToolFailed(
    { status: "error", error: { code: "timeout", message: "too slow", suggestion: "less" } },
    200,
  );
  assert.equal(failed.code, "timeout");
  assert.equal(failed.status, 200);
  assert.equal(failed.result.error.message, "too slow");

  const plain = new Unavailable("down");
  assert.equal(plain.code, "error");
  assert.equal(plain.suggestion, "");
  assert.equal(plain.status, null);
  assert.equal(plain.body, null);
  assert.ok(new RequestRejected("x") instanceof ToolgateError);
});

test("forModel: what to tell the model instead of the tool's output", T, () => {
  const gone = new Unavailable("gone", { code: "unreachable", suggestion: "start it" });
  assert.equal(gone.forModel(), "toolgate did not run this tool (unreachable): gone. Next: start it");
  assert.equal(
    new Unavailable("down").forModel(),
    "toolgate did not run this tool (error): down",
  );
  const denied = new Denied({
    decision: "deny",
    decision_id: "d1",
    reasons: ["p1"],
    errors: [{ code: "forbidden", message: "no", suggestion: "don't" }],
  });
  assert.equal(denied.forModel(), "toolgate did not run this tool (forbidden): no. Next: don't");
  assert.equal(
    new ApprovalTimeout("a2", 3).forModel(),
    "toolgate did not run this tool (approval_timeout): no decision on approval a2 after 3 s. " +
      "Next: wait again, or tell the user the call is waiting for a human",
  );
  const blocked = new OutputBlocked({ decision: "block", violations: [{ kind: "jwt" }] });
  assert.equal(
    blocked.forModel(),
    "toolgate withheld this tool's output: the output gate blocked the tool's output (jwt). " +
      "Next: the tool ran, but its output may not be shown; do not run it again to see it",
  );
});

test("Denied: tolerant of a malformed decision", T, () => {
  const odd = new Denied({
    decision: "deny",
    decision_id: 7,
    stage: null,
    reasons: "p1",
    errors: ["not an object", { code: "forbidden", message: "no" }, 3],
  });
  assert.equal(odd.code, "forbidden");
  assert.equal(odd.message, "no");
  assert.equal(odd.suggestion, "");
  assert.deepEqual(odd.errors, [{ code: "forbidden", message: "no" }]);
  assert.deepEqual(odd.reasons, []);
  assert.equal(odd.decisionId, "7");
  assert.equal(odd.stage, "null");
  const strings = new Denied({ errors: "boom", reasons: ["a", 1, { b: 2 }] });
  assert.equal(strings.code, "denied");
  assert.equal(strings.message, "the call was denied");
  assert.deepEqual(strings.errors, []);
  assert.deepEqual(strings.reasons, ["a", "1", '{"b":2}']);
  assert.equal(strings.decisionId, "");
  for (const decision of [null, "deny", [], 42]) {
    const d = new Denied(decision);
    assert.equal(d.code, "denied");
    assert.deepEqual(d.errors, []);
    assert.deepEqual(d.reasons, []);
  }
});

test("guard: the tool name defaults to the function's name", T, async () => {
  const client = new Client({ url: "http://127.0.0.1:1" });
  function list_files() {}
  assert.equal(guard(list_files, { client }).toolgateTool, "list_files");
  assert.equal(guard(list_files, { tool: "read_file", client }).toolgateTool, "read_file");
  assert.equal(tool("read_file", list_files, { client }).toolgateTool, "read_file");
  assert.throws(() => guard(() => 1), TypeError);
  assert.throws(() => guard("not a function"), TypeError);
});
