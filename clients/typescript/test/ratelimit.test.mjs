// 429s from a real sidecar with a global rate limit of burst 2, 1 call a second
// (clients/testdata/ratelimited.toml): the third call in a row answers 429, retry-after: 1.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, Denied, RateLimited, guard } from "../dist/index.js";
import { AGENT_TOKEN, startSidecar } from "../test-support/sidecar.mjs";

const T = { timeout: 20_000 };
const README = { path: "README.md" };

let sidecar;

before(
  async () => {
    sidecar = await startSidecar("ratelimited.toml");
  },
  { timeout: 45_000 },
);

after(async () => {
  await sidecar?.stop();
});

function client(options = {}) {
  return new Client({ url: sidecar.url, token: AGENT_TOKEN, ...options });
}

/** Authorizes until the sidecar answers 429; returns that error. */
async function exhaust() {
  const c = client({ maxRetries: 0 });
  for (let i = 0; i < 10; i++) {
    try {
      await c.authorize("read_file", README);
    } catch (e) {
      if (e instanceof RateLimited) return e;
      throw e;
    }
  }
  throw new Error("the rate limit never answered 429");
}

test("authorize() does not retry: RateLimited with the 429's fields", T, async () => {
  const err = await exhaust();
  assert.ok(err instanceof Denied);
  assert.equal(err.name, "RateLimited");
  assert.equal(err.status, 429);
  assert.equal(err.code, "rate_limited");
  assert.equal(err.stage, "rate_limit");
  assert.ok(err.retryAfter >= 1, `retryAfter ${err.retryAfter}`);
  assert.match(err.message, /rate limit reached/);
  assert.ok(err.suggestion.length > 0);
});

test("429 retried: a guarded call waits retry_after and then succeeds", T, async () => {
  await exhaust();
  const calls = [];
  const readFile = guard(
    function read_file(args) {
      calls.push(args);
      return "hello";
    },
    { client: client({ maxRetries: 3, maxRetryWait: 5 }) },
  );
  const started = performance.now();
  assert.equal(await readFile(README), "hello");
  const waited = (performance.now() - started) / 1000;
  assert.ok(waited >= 0.9, `answered after ${waited} s: it did not wait out the 429`);
  assert.deepEqual(calls, [README]);
});

test("429 not retried with maxRetries: 0: RateLimited, the function never runs", T, async () => {
  await exhaust();
  let ran = 0;
  const readFile = guard(() => ran++, { tool: "read_file", client: client({ maxRetries: 0 }) });
  const err = await readFile(README).then(assert.fail, (e) => e);
  assert.ok(err instanceof RateLimited, String(err));
  assert.ok(err.retryAfter >= 1);
  assert.equal(err.status, 429);
  assert.equal(ran, 0);
});

test("429 not retried when Retry-After is over maxRetryWait", T, async () => {
  await exhaust();
  let ran = 0;
  const c = client({ maxRetries: 5, maxRetryWait: 0.5 });
  const started = performance.now();
  const err = await c
    .call("read_file", README, () => ran++)
    .then(assert.fail, (e) => e);
  assert.ok(err instanceof RateLimited, String(err));
  assert.ok(performance.now() - started < 900, "it waited although Retry-After > maxRetryWait");
  assert.equal(ran, 0);
});

test("run() waits out a 429 too", T, async () => {
  await exhaust();
  const data = await client({ maxRetries: 3, maxRetryWait: 5 }).run("read_file", README);
  assert.equal(data.content, "hello from the client test workspace\n");
});
