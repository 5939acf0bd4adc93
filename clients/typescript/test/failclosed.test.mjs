// Fail closed: no sidecar, or a server that does not answer as the API does, is Unavailable
// (or the error its status names), and the guarded function never runs.

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
    req.resume();
    const mode = req.url.split("/")[1];
    if (mode === "slow") return; // never answers
    if (mode === "hangup") return req.socket.destroy();
    if (mode === "redirect") {
      res.writeHead(302, { location: `http://127.0.0.1:${closedPort}/v1/authorize` });
      return res.end();
    }
    const [status, headers, body] = MODES[mode] ?? [404, {}, ""];
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
  assert.match(err.suggestion, /nothing was run/);
  assert.ok(err.cause instanceof Error);
  await unavailable(client.run("read_file", { path: "README.md" }), "unreachable");
  await unavailable(client.authorize("read_file", {}), "unreachable");
  await unavailable(client.approvals(), "unreachable");
  assert.equal(ran(), 0);
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
    const err = await unavailable(fn({}));
    assert.equal(err.status, 200);
    await unavailable(client.run("read_file", {}));
    assert.equal(ran(), 0, mode);
  }
  // An array where an object is expected.
  await unavailable(new Client({ url: `${base}/array` }).getApproval("a"));
  // A pending decision without an approval id.
  const { fn, ran } = guarded(`${base}/pendingnoid`);
  await unavailable(fn({}));
  assert.equal(ran(), 0);
});

test("a 503 deny (audit down): Unavailable (audit_unavailable)", T, async () => {
  const { fn, ran } = guarded(`${base}/audit503`);
  const err = await unavailable(fn({}), "audit_unavailable");
  assert.equal(err.message, "the audit log is down");
  assert.equal(err.status, 503);
  assert.equal(ran(), 0);
});

test("a timeout: Unavailable after `timeout` seconds", T, async () => {
  const { fn, client, ran } = guarded(`${base}/slow`, { timeout: 0.3 });
  const started = performance.now();
  const err = await unavailable(fn({}), "unreachable");
  const took = performance.now() - started;
  assert.ok(took >= 250 && took < 3000, `took ${took} ms`);
  assert.match(err.message, /TimeoutError/);
  // A long poll adds its wait to the timeout.
  const pollStarted = performance.now();
  await unavailable(client.getApproval("a", { wait: 0.4 }), "unreachable");
  assert.ok(performance.now() - pollStarted >= 650);
  assert.equal(ran(), 0);
});

test("a dropped connection or a redirect: Unavailable", T, async () => {
  const hangup = guarded(`${base}/hangup`);
  await unavailable(hangup.fn({}), "unreachable");
  // Redirects are not followed: a 3xx is not an answer.
  const redirect = guarded(`${base}/redirect`);
  const err = await unavailable(redirect.fn({}));
  assert.equal(err.status, 302);
  assert.equal(hangup.ran() + redirect.ran(), 0);
});

test("a custom fetch that throws: Unavailable", T, async () => {
  let ran = 0;
  const client = new Client({
    url: base,
    fetch: async () => {
      throw new Error("no network here");
    },
  });
  const fn = guard(() => ran++, { tool: "read_file", client });
  const err = await unavailable(fn({}), "unreachable");
  assert.match(err.message, /no network here/);
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
