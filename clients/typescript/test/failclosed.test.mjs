// Fail closed: no sidecar, or a server that does not answer as the API does, is Unavailable
// (or the error its status names), and the guarded function never runs. A request that could
// not be sent is `unreachable`; one sent that got no answer, `outcome_unknown`.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import {
  Client,
  RateLimited,
  RequestRejected,
  Unavailable,
  guard,
} from "../dist/index.js";
import { freePort } from "../test-support/sidecar.mjs";

const T = { timeout: 10_000 };
const JSON_TYPE = { "content-type": "application/json" };

/** A well-formed allow, and the same with one field changed (`undefined` leaves it out). */
const ALLOW = { decision: "allow", decision_id: "d1", reasons: ["p"], errors: [], stage: "policy" };
function allowWith(fields) {
  return JSON.stringify({ ...ALLOW, ...fields });
}
const REPORT = { result_id: "r1", decision: "allow", output: "screened", violations: [],
  found: 0, truncated: false, bytes: 3, dropped: [], dropped_count: 0, errors: [] };
const SUCCESS = JSON.stringify({ status: "success", data: "ran", error: null,
  metadata: { decision_id: "d" } });

let server;
let base;
let closedPort;

/** What the fake sidecar answers, by the first segment of the path. */
const MODES = {
  text: [200, { "content-type": "text/plain" }, "this is not JSON"],
  empty: [200, {}, ""],
  html500: [500, { "content-type": "text/html" }, "<h1>Internal Server Error</h1>"],
  json500: [500, { "content-type": "application/json" }, '{"error":"boom","message":"it broke"}'],
  json502: [502, { "content-type": "application/json" }, '{"decision":"allow","decision_id":"x"}'],
  object: [200, { "content-type": "application/json" }, "{}"],
  array: [200, { "content-type": "application/json" }, "[]"],
  maybe: [200, { "content-type": "application/json" }, '{"decision":"maybe"}'],
  pendingnoid: [200, { "content-type": "application/json" }, '{"decision":"pending_approval"}'],
  // Decisions that are not the API's: never an allow.
  allow401: [401, JSON_TYPE, allowWith({})],
  pending401: [401, JSON_TYPE, allowWith({ decision: "pending_approval", approval_id: "a1" })],
  noid: [200, JSON_TYPE, allowWith({ decision_id: undefined })],
  emptyid: [200, JSON_TYPE, allowWith({ decision_id: "" })],
  numid: [200, JSON_TYPE, allowWith({ decision_id: 7 })],
  errorsstring: [200, JSON_TYPE, allowWith({ errors: "none" })],
  errorsnumbers: [200, JSON_TYPE, allowWith({ errors: [1, 2] })],
  noerrors: [200, JSON_TYPE, allowWith({ errors: undefined })],
  reasonsstring: [200, JSON_TYPE, allowWith({ reasons: "p" })],
  argslist: [200, JSON_TYPE, allowWith({ arguments: ["README.md"] })],
  argsnull: [200, JSON_TYPE, allowWith({ arguments: null })],
  pendingemptyid: [200, JSON_TYPE, allowWith({ decision: "pending_approval", approval_id: "" })],
  // By endpoint: a good allow, then a result report that is not the API's.
  nooutput: {
    "/v1/authorize": [200, JSON_TYPE, allowWith({})],
    "/v1/results": [200, JSON_TYPE, JSON.stringify({ ...REPORT, output: undefined })],
  },
  nocounts: {
    "/v1/authorize": [200, JSON_TYPE, allowWith({})],
    "/v1/results": [200, JSON_TYPE, '{"decision":"allow","output":"raw","violations":[]}'],
  },
  reportdecision: {
    "/v1/authorize": [200, JSON_TYPE, allowWith({})],
    "/v1/results": [200, JSON_TYPE, JSON.stringify({ ...REPORT, decision: "maybe" })],
  },
  truncatedstring: {
    "/v1/authorize": [200, JSON_TYPE, allowWith({})],
    "/v1/results": [200, JSON_TYPE, JSON.stringify({ ...REPORT, truncated: "no" })],
  },
  // Standard results that are not the API's.
  exec200pending: [200, JSON_TYPE, '{"status":"pending","approval_id":"a1"}'],
  exec202noid: [202, JSON_TYPE, '{"status":"pending"}'],
  execstatus: [200, JSON_TYPE, '{"status":"done","data":"ran"}'],
  // Pending, approved, and pending again.
  approvedrun: {
    "/v1/approvals/a1": [200, JSON_TYPE, '{"id":"a1","status":"approved","decided_by":"bob"}'],
  },
  pendingagain: {
    "/v1/execute": [202, JSON_TYPE, '{"status":"pending","approval_id":"a1","data":null}'],
    "/v1/approvals/a1": [200, JSON_TYPE, '{"id":"a1","status":"approved","decided_by":"bob"}'],
  },
  // Every answer 1.5 s late: /v1/execute waits `executeTimeout`, the others `timeout`.
  late: {
    delay: 1500,
    "/v1/execute": [200, JSON_TYPE, SUCCESS],
    "/v1/authorize": [200, JSON_TYPE, allowWith({})],
  },
  audit503: [
    503,
    { "content-type": "application/json" },
    '{"decision":"deny","stage":"audit","errors":[{"code":"audit_unavailable","message":"the audit log is down"}]}',
  ],
  ratelimit: [429, { "content-type": "application/json", "retry-after": "7" }, '{"error":"rate_limited"}'],
  badrequest: [400, { "content-type": "application/json" }, '{"error":"invalid_body","message":"no"}'],
};

before(async () => {
  closedPort = await freePort(); // nothing listens there
  server = createServer((req, res) => {
    const mode = req.url.split("/")[1];
    if (mode === "approvedrun" && req.url.endsWith("/v1/execute")) {
      // Pending until the call comes back with its approval, then a success.
      let text = "";
      req.on("data", (chunk) => (text += chunk));
      req.on("end", () => {
        const approved = JSON.parse(text).approval_id === "a1";
        res.writeHead(approved ? 200 : 202, JSON_TYPE);
        res.end(approved ? SUCCESS : '{"status":"pending","approval_id":"a1","data":null}');
      });
      return;
    }
    req.resume();
    if (mode === "slow") return; // never answers
    if (mode === "hangup") return req.socket.destroy();
    if (mode === "halfbody") {
      // Headers, part of the body, then the connection drops.
      res.writeHead(200, { "content-type": "application/json", "content-length": "100" });
      res.write('{"decision":');
      return setTimeout(() => req.socket.destroy(), 50);
    }
    if (mode === "redirect") {
      res.writeHead(302, { location: `http://127.0.0.1:${closedPort}/v1/authorize` });
      return res.end();
    }
    let route = MODES[mode];
    if (route && !Array.isArray(route)) {
      const endpoint = req.url.slice(mode.length + 1).split("?")[0];
      const found = route[endpoint];
      const delay = route.delay ?? 0;
      route = found;
      if (delay > 0 && found) {
        const timer = setTimeout(() => {
          res.writeHead(found[0], found[1]);
          res.end(found[2]);
        }, delay);
        res.on("close", () => clearTimeout(timer));
        return;
      }
    }
    const [status, headers, body] = route ?? [404, {}, ""];
    res.writeHead(status, headers);
    res.end(body);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** A guarded tool against `url`; `ran()` counts its runs. */
function guarded(url, options = {}) {
  let runs = 0;
  const client = new Client({ url, token: "t", ...options });
  const fn = guard(
    function read_file() {
      runs += 1;
      return "ran";
    },
    { client },
  );
  return { fn, client, ran: () => runs };
}

async function unavailable(promise, code) {
  const err = await promise.then(
    (v) => assert.fail(`resolved with ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(err instanceof Unavailable, `${err?.name}: ${err}`);
  if (code) assert.equal(err.code, code);
  return err;
}

test("a closed port: Unavailable (unreachable), the function never runs", T, async () => {
  const { fn, client, ran } = guarded(`http://127.0.0.1:${closedPort}`);
  const err = await unavailable(fn({ path: "README.md" }), "unreachable");
  assert.match(err.message, /could not reach toolgate at http:\/\/127\.0\.0\.1:\d+/);
  assert.equal(
    err.suggestion,
    "start the sidecar (`toolgate serve`) or check TOOLGATE_URL; nothing was sent, so nothing " +
      "was run",
  );
  assert.ok(err.cause instanceof Error);
  await unavailable(client.run("read_file", { path: "README.md" }), "unreachable");
  await unavailable(client.execute("read_file", { path: "README.md" }), "unreachable");
  await unavailable(client.authorize("read_file", {}), "unreachable");
  await unavailable(client.approvals(), "unreachable");
  assert.equal(ran(), 0);
  // `localhost` (tried on every address it has) and a port fetch refuses: nothing was sent.
  await unavailable(guarded(`http://localhost:${closedPort}`).fn({}), "unreachable");
  await unavailable(guarded("http://127.0.0.1:1").fn({}), "unreachable");
});

test("a 200 that is not JSON, or empty: Unavailable (bad_answer)", T, async () => {
  for (const mode of ["text", "empty"]) {
    const { fn, client, ran } = guarded(`${base}/${mode}`);
    const err = await unavailable(fn({ path: "README.md" }), "bad_answer");
    assert.equal(err.status, 200);
    await unavailable(client.run("read_file", {}), "bad_answer");
    await unavailable(client.screen("output", "x"), "bad_answer");
    assert.equal(ran(), 0);
  }
});

test("a 5xx: Unavailable, with the body's code when it is JSON", T, async () => {
  const html = guarded(`${base}/html500`);
  await unavailable(html.fn({}), "bad_answer");
  const json = guarded(`${base}/json500`);
  const err = await unavailable(json.fn({}), "boom");
  assert.equal(err.status, 500);
  assert.equal(err.message, "it broke");
  // Even a 502 that looks like an allow is not one.
  const lying = guarded(`${base}/json502`);
  await unavailable(lying.fn({}));
  await unavailable(lying.client.reportResult("read_file", "x"));
  assert.equal(html.ran() + json.ran() + lying.ran(), 0);
});

test("a 200 JSON answer that is not a decision: Unavailable", T, async () => {
  for (const mode of ["object", "array", "maybe"]) {
    const { fn, client, ran } = guarded(`${base}/${mode}`);
    const err = await unavailable(fn({}), "bad_answer");
    assert.equal(err.status, 200);
    await unavailable(client.run("read_file", {}), "bad_answer");
    assert.equal(ran(), 0, mode);
  }
  const maybe = await unavailable(guarded(`${base}/maybe`).client.authorize("read_file"));
  assert.equal(
    maybe.message,
    "the sidecar's answer (HTTP 200) is not the API's: unknown decision 'maybe'",
  );
  // An array where an object is expected (a 200 that is not an object: its code is http_200).
  await unavailable(new Client({ url: `${base}/array` }).getApproval("a"), "http_200");
  // A pending decision without an approval id.
  const { fn, ran } = guarded(`${base}/pendingnoid`);
  await unavailable(fn({}), "bad_answer");
  assert.equal(ran(), 0);
});

test("a decision that is not the API's: Unavailable (bad_answer), never an allow", T, async () => {
  const why = {
    allow401: "a 401 answer must be a deny",
    pending401: "a 401 answer must be a deny",
    noid: "no decision_id",
    emptyid: "no decision_id",
    numid: "no decision_id",
    errorsstring: "`errors` must be a list of objects",
    errorsnumbers: "`errors` must be a list of objects",
    noerrors: "`errors` must be a list of objects",
    reasonsstring: "`reasons` must be a list",
    argslist: "`arguments` must be an object",
    argsnull: "`arguments` must be an object",
    pendingemptyid: "a pending decision without an approval_id",
  };
  for (const [mode, reason] of Object.entries(why)) {
    const { fn, client, ran } = guarded(`${base}/${mode}`);
    const err = await unavailable(fn({ path: "README.md" }), "bad_answer");
    const status = mode.endsWith("401") ? 401 : 200;
    assert.equal(err.message, `the sidecar's answer (HTTP ${status}) is not the API's: ${reason}`);
    assert.equal(err.status, status);
    assert.ok(err.body && typeof err.body === "object", mode);
    await unavailable(client.authorize("read_file", {}), "bad_answer");
    await unavailable(client.decide("read_file", {}), "bad_answer");
    assert.equal(ran(), 0, mode);
  }
});

test("a result report that is not the API's: Unavailable (bad_answer), the output withheld", T, async () => {
  const why = {
    nooutput: "a result report needs `output` and `violations`",
    nocounts: "a result report needs `dropped_count` and `truncated`",
    reportdecision: "not a result report",
    truncatedstring: "a result report needs `dropped_count` and `truncated`",
  };
  for (const [mode, reason] of Object.entries(why)) {
    const { fn, client, ran } = guarded(`${base}/${mode}`);
    const err = await unavailable(fn({ path: "README.md" }), "bad_answer");
    assert.equal(err.message, `the sidecar's answer (HTTP 200) is not the API's: ${reason}`);
    // The function ran (the report comes after it), but nothing of its output passed.
    assert.equal(ran(), 1, mode);
    await unavailable(client.reportResult("read_file", "raw", { decisionId: "d1" }), "bad_answer");
  }
});

test("a standard result that is not the API's: Unavailable (bad_answer)", T, async () => {
  const why = {
    exec200pending: [200, "a pending result must be HTTP 202"],
    exec202noid: [202, "a pending result without an approval_id"],
    execstatus: [200, "not a standard result"],
    object: [200, "not a standard result"],
  };
  for (const [mode, [status, reason]] of Object.entries(why)) {
    const client = new Client({ url: `${base}/${mode}`, token: "t", approvalTimeout: 1 });
    for (const call of [() => client.run("read_file", {}), () => client.execute("read_file", {})]) {
      const err = await unavailable(call(), "bad_answer");
      assert.equal(err.message, `the sidecar's answer (HTTP ${status}) is not the API's: ${reason}`);
      assert.equal(err.status, status);
    }
  }
});

test("run(): pending again after the approval is Unavailable (bad_answer)", T, async () => {
  const client = new Client({ url: `${base}/pendingagain`, token: "t", approvalTimeout: 5 });
  const err = await unavailable(client.run("write_file", {}), "bad_answer");
  assert.equal(
    err.message,
    "the sidecar's answer (HTTP 202) is not the API's: still pending after its approval",
  );
  assert.equal(err.status, 202);
  // Once: the call sent again with its approval runs.
  const approved = new Client({ url: `${base}/approvedrun`, token: "t", approvalTimeout: 5 });
  assert.equal(await approved.run("write_file", {}), "ran");
});

test("a 503 deny (audit down): Unavailable (audit_unavailable)", T, async () => {
  const { fn, ran } = guarded(`${base}/audit503`);
  const err = await unavailable(fn({}), "audit_unavailable");
  assert.equal(err.message, "the audit log is down");
  assert.equal(err.status, 503);
  assert.equal(ran(), 0);
});

test("no answer after the request was sent: Unavailable (outcome_unknown) after `timeout`", T, async () => {
  const { fn, client, ran } = guarded(`${base}/slow`, { timeout: 0.3, executeTimeout: 0.3 });
  const started = performance.now();
  const err = await unavailable(fn({}), "outcome_unknown");
  const took = performance.now() - started;
  assert.ok(took >= 250 && took < 3000, `took ${took} ms`);
  assert.match(
    err.message,
    /^no answer from toolgate at http:\/\/127\.0\.0\.1:\d+\/slow after the request was sent: TimeoutError/,
  );
  assert.equal(
    err.suggestion,
    "the call may have been decided, and through /v1/execute the tool may have run: check " +
      "the audit log (GET /v1/audit) before trying it again",
  );
  assert.match(err.forModel(), /^toolgate did not run this tool \(outcome_unknown\): no answer/);
  await unavailable(client.run("read_file", {}), "outcome_unknown");
  await unavailable(client.execute("read_file", {}), "outcome_unknown");
  // A long poll adds its wait to the timeout.
  const pollStarted = performance.now();
  await unavailable(client.getApproval("a", { wait: 0.4 }), "outcome_unknown");
  assert.ok(performance.now() - pollStarted >= 650);
  assert.equal(ran(), 0);
});

test("executeTimeout: /v1/execute waits for it, every other request for `timeout`", T, async () => {
  // The sidecar answers 1.5 s late: within executeTimeout, past timeout.
  const patient = new Client({ url: `${base}/late`, token: "t", timeout: 1, executeTimeout: 5 });
  const [data, result] = await Promise.all([
    patient.run("read_file", { path: "README.md" }),
    patient.execute("read_file", { path: "README.md" }),
    unavailable(patient.authorize("read_file", {}), "outcome_unknown"),
  ]);
  assert.equal(data, "ran");
  assert.equal(result.data, "ran");
  // An executeTimeout shorter than the tool takes: the outcome is unknown.
  const hasty = new Client({ url: `${base}/late`, token: "t", timeout: 10, executeTimeout: 0.5 });
  const started = performance.now();
  await unavailable(hasty.run("read_file", { path: "README.md" }), "outcome_unknown");
  const took = performance.now() - started;
  assert.ok(took >= 450 && took < 1400, `took ${took} ms`);
});

test("a dropped connection or a redirect: Unavailable", T, async () => {
  // Dropped after the request was received, or in the middle of the answer's body.
  const hangup = guarded(`${base}/hangup`);
  const dropped = await unavailable(hangup.fn({}), "outcome_unknown");
  assert.match(dropped.message, /after the request was sent/);
  const half = guarded(`${base}/halfbody`);
  await unavailable(half.fn({}), "outcome_unknown");
  await unavailable(half.client.run("read_file", {}), "outcome_unknown");
  assert.equal(half.ran(), 0);
  // Redirects are not followed: a 3xx is not an answer.
  const redirect = guarded(`${base}/redirect`);
  const err = await unavailable(redirect.fn({}));
  assert.equal(err.status, 302);
  assert.equal(hangup.ran() + redirect.ran(), 0);
});

test("a custom fetch that throws: Unavailable, unreachable only when nothing was sent", T, async () => {
  let ran = 0;
  const throwing = (error) =>
    guard(() => ran++, {
      tool: "read_file",
      client: new Client({
        url: base,
        fetch: async () => {
          throw error;
        },
      }),
    });
  // Not known to have failed before sending: the outcome is unknown.
  const err = await unavailable(throwing(new Error("no network here"))({}), "outcome_unknown");
  assert.match(err.message, /no network here/);
  const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
  await unavailable(throwing(new TypeError("fetch failed", { cause: reset }))({}), "outcome_unknown");
  const socket = Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" });
  await unavailable(throwing(new TypeError("fetch failed", { cause: socket }))({}), "outcome_unknown");
  // A connection that was never made: nothing was sent.
  for (const code of [
    "ECONNREFUSED",
    "ENOTFOUND",
    "EAI_AGAIN",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "UND_ERR_CONNECT_TIMEOUT",
  ]) {
    const cause = Object.assign(new Error(code), { code });
    const e = await unavailable(
      throwing(new TypeError("fetch failed", { cause }))({}),
      "unreachable",
    );
    assert.match(e.message, new RegExp(`^could not reach toolgate at .*fetch failed \\(${code}: `));
  }
  // Several addresses tried: unreachable only when every one refused.
  const refused = Object.assign(new Error("refused"), { code: "ECONNREFUSED" });
  const all = new AggregateError([refused, refused]);
  await unavailable(throwing(new TypeError("fetch failed", { cause: all }))({}), "unreachable");
  const mixed = new AggregateError([refused, reset]);
  await unavailable(throwing(new TypeError("fetch failed", { cause: mixed }))({}), "outcome_unknown");
  assert.equal(ran, 0);
});

test("a 429 with only a Retry-After header: RateLimited, retryAfter from the header", T, async () => {
  const { fn, ran } = guarded(`${base}/ratelimit`, { maxRetries: 1, maxRetryWait: 5 });
  const err = await fn({}).then(assert.fail, (e) => e);
  assert.ok(err instanceof RateLimited, String(err));
  assert.equal(err.retryAfter, 7); // over maxRetryWait: not waited out
  assert.equal(err.code, "rate_limited");
  assert.equal(ran(), 0);
});

test("a 4xx error body: RequestRejected with its code", T, async () => {
  const { fn, ran } = guarded(`${base}/badrequest`);
  const err = await fn({}).then(assert.fail, (e) => e);
  assert.ok(err instanceof RequestRejected, String(err));
  assert.equal(err.code, "invalid_body");
  assert.equal(err.status, 400);
  assert.equal(ran(), 0);
});
