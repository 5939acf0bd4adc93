// The client against a real sidecar on the shipped policies (clients/testdata/toolgate.toml).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ApprovalDenied,
  ApprovalTimeout,
  Client,
  Denied,
  OutputBlocked,
  RequestRejected,
  ToolFailed,
  ToolgateError,
  guard,
  tool,
} from "../dist/index.js";
import { AGENT_TOKEN, BOB_TOKEN, sleep, startSidecar } from "../test-support/sidecar.mjs";

const T = { timeout: 20_000 };

let sidecar;
let agent;
let bob;
let nonce = 0;

before(
  async () => {
    sidecar = await startSidecar("toolgate.toml");
    agent = new Client({ url: sidecar.url, token: AGENT_TOKEN });
    bob = new Client({ url: sidecar.url, token: BOB_TOKEN });
  },
  { timeout: 45_000 },
);

after(async () => {
  await sidecar?.stop();
});

/** write_file arguments no other test sends (an open approval is reused for the same call). */
function writeArgs(label) {
  nonce += 1;
  return { path: "src/lib.rs", content: `// ${label} test number ${nonce}\n` };
}

/** A tool function that records its calls. */
function recorder(name, result) {
  const calls = [];
  const fns = {
    [name](args) {
      calls.push(args);
      return typeof result === "function" ? result(args) : result;
    },
  };
  return { fn: fns[name], calls };
}

/** Bob finds the pending approval of the call with `args` and decides it. */
async function human(decision, args, reason) {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const pending = await bob.approvals({ status: "pending" });
    const found = pending.find(
      (a) =>
        a.tool === "write_file" &&
        (a.args_preview + JSON.stringify(a.arguments ?? null)).includes(args.content.trim()),
    );
    if (found) {
      return decision === "approve" ? bob.approve(found.id, reason) : bob.deny(found.id, reason);
    }
    await sleep(50);
  }
  throw new Error("no pending approval for the call appeared within 10 s");
}

test("allow: the guarded function runs and its output comes back screened", T, async () => {
  const { fn, calls } = recorder("read_file", (a) => `contents of ${a.path}`);
  const readFile = guard(fn, { client: agent });
  assert.equal(readFile.toolgateTool, "read_file");
  assert.equal(readFile.name, "read_file");
  const out = await readFile({ path: "README.md" });
  assert.equal(out, "contents of README.md");
  assert.deepEqual(calls, [{ path: "README.md" }]);

  const outcome = await agent.call("read_file", { path: "README.md" }, (a) => ({ path: a.path }));
  assert.deepEqual(outcome.output, { path: "README.md" });
  assert.equal(outcome.decision.decision, "allow");
  assert.deepEqual(outcome.decision.reasons, ["developers-read-write"]);
  assert.equal(outcome.report.decision, "allow");
  assert.match(outcome.report.result_id, /^[0-9a-f-]{36}$/);
});

test("allow: an async function, and tool() naming the tool", T, async () => {
  const readIt = tool("read_file", async ({ path }) => {
    await sleep(10);
    return `async ${path}`;
  }, { client: agent });
  assert.equal(readIt.toolgateTool, "read_file");
  assert.equal(await readIt({ path: "README.md" }), "async README.md");
});

test("deny: Denied with the decision's reasons, and the function never runs", T, async () => {
  const { fn, calls } = recorder("read_file", "secret");
  const readFile = guard(fn, { client: agent });
  const err = await readFile({ path: ".env" }).then(
    () => assert.fail("a denied call resolved"),
    (e) => e,
  );
  assert.ok(err instanceof Denied);
  assert.ok(err instanceof ToolgateError);
  assert.ok(err instanceof Error);
  assert.equal(err.name, "Denied");
  assert.equal(err.stage, "policy");
  assert.deepEqual(err.reasons, ["deny-listed-paths"]);
  assert.equal(err.code, "forbidden");
  assert.match(err.message, /deny-listed-paths/);
  assert.ok(err.suggestion.length > 0);
  assert.match(err.decisionId, /^[0-9a-f-]{36}$/);
  assert.equal(err.decision.decision, "deny");
  assert.equal(err.errors[0].code, "forbidden");
  assert.equal(
    err.forModel(),
    `toolgate did not run this tool (forbidden): ${err.message}. Next: ${err.suggestion}`,
  );
  assert.equal(calls.length, 0);
});

test("pending, then a human approves: the function runs once", T, async () => {
  const args = writeArgs("approve");
  const { fn, calls } = recorder("write_file", (a) => `wrote ${a.content.length} bytes`);
  const [outcome, approval] = await Promise.all([
    agent.call("write_file", args, fn),
    human("approve", args, "looks fine"),
  ]);
  assert.equal(approval.status, "approved");
  assert.equal(approval.decided_by, 'Human::"bob"');
  assert.deepEqual(calls, [args]);
  assert.equal(outcome.output, `wrote ${args.content.length} bytes`);
  assert.equal(outcome.decision.decision, "allow");
  assert.equal(outcome.decision.stage, "approval");
  assert.equal(outcome.decision.approval_id, approval.id);
  // Single use: the approval is spent.
  assert.equal((await agent.getApproval(approval.id)).status, "used");

  // The same through guard().
  const args2 = writeArgs("approve-guard");
  const rec = recorder("write_file", "ok");
  const writeFile = guard(rec.fn, { client: agent });
  const [out] = await Promise.all([writeFile(args2), human("approve", args2)]);
  assert.equal(out, "ok");
  assert.deepEqual(rec.calls, [args2]);
});

test("pending, then a human denies: ApprovalDenied, the function never runs", T, async () => {
  const args = writeArgs("deny");
  const { fn, calls } = recorder("write_file", "never");
  const writeFile = guard(fn, { client: agent });
  const [result, approval] = await Promise.allSettled([
    writeFile(args),
    human("deny", args, "not today"),
  ]);
  assert.equal(approval.status, "fulfilled");
  assert.equal(result.status, "rejected");
  const err = result.reason;
  assert.ok(err instanceof ApprovalDenied);
  assert.ok(err instanceof Denied);
  assert.equal(err.code, "approval_denied");
  assert.equal(err.approval.status, "denied");
  assert.equal(err.approval.id, approval.value.id);
  assert.equal(err.approval.reason, "not today");
  assert.equal(err.message, `approval ${approval.value.id} was denied by Human::"bob": not today`);
  assert.equal(err.decision.decision, "pending_approval");
  assert.equal(err.stage, "approval");
  assert.equal(calls.length, 0);
});

test("approval timeout: ApprovalTimeout after approvalTimeout, the function never runs", T, async () => {
  const impatient = new Client({ url: sidecar.url, token: AGENT_TOKEN, approvalTimeout: 1 });
  const args = writeArgs("timeout");
  const { fn, calls } = recorder("write_file", "never");
  const started = performance.now();
  const err = await guard(fn, { client: impatient })(args).then(
    () => assert.fail("resolved without an approval"),
    (e) => e,
  );
  const waited = (performance.now() - started) / 1000;
  assert.ok(err instanceof ApprovalTimeout, String(err));
  assert.equal(err.code, "approval_timeout");
  assert.ok(waited >= 0.9 && waited < 8, `waited ${waited} s`);
  assert.equal(calls.length, 0);
  const approval = await agent.getApproval(err.approvalId);
  assert.equal(approval.status, "pending");
  assert.equal(approval.tool, "write_file");
  // waitForApproval with its own bound, then clean up.
  await assert.rejects(agent.waitForApproval(err.approvalId, 0.3), ApprovalTimeout);
  assert.equal((await bob.deny(err.approvalId, "cleanup")).status, "denied");
});

test("getApproval long-polls for `wait` seconds, and returns at once when decided", T, async () => {
  const decision = await agent.authorize("write_file", writeArgs("long-poll"));
  assert.equal(decision.decision, "pending_approval");
  const id = decision.approval_id;
  let started = performance.now();
  const pending = await agent.getApproval(id, { wait: 0.5 });
  assert.equal(pending.status, "pending");
  assert.ok(performance.now() - started >= 400);

  started = performance.now();
  const [decided] = await Promise.all([
    agent.getApproval(id, { wait: 10 }),
    sleep(200).then(() => bob.approve(id, "fine")),
  ]);
  assert.equal(decided.status, "approved");
  assert.ok(performance.now() - started < 5000);
});

test("output redacted: an e-mail address and an AWS key are masked", T, async () => {
  const { fn, calls } = recorder(
    "read_file",
    "mail ops@example.com, key AKIAQWERTYUIOPASDFGH",
  );
  const outcome = await agent.call("read_file", { path: "README.md" }, fn);
  assert.equal(calls.length, 1);
  assert.equal(outcome.output, "mail <redacted:email>, key <redacted:aws-access-key>");
  assert.equal(outcome.report.decision, "mask");
  assert.deepEqual(outcome.report.violations.map((v) => v.kind).sort(), [
    "aws-access-key",
    "email",
  ]);
  // JSON output keeps its shape.
  const readFile = guard(() => ({ body: "write to ops@example.com" }), {
    tool: "read_file",
    client: agent,
  });
  assert.deepEqual(await readFile({ path: "README.md" }), { body: "write to <redacted:email>" });
});

test("output blocked: OutputBlocked when the output breaks the tool's outputSchema", T, async () => {
  const { fn, calls } = recorder("http_fetch", "not the object http_fetch must return");
  const fetchUrl = guard(fn, { client: agent });
  const err = await fetchUrl({ url: "https://example.com/" }).then(
    () => assert.fail("blocked output resolved"),
    (e) => e,
  );
  assert.ok(err instanceof OutputBlocked, String(err));
  assert.equal(err.code, "output_blocked");
  assert.equal(calls.length, 1); // it ran: the gate blocked what it returned
  assert.equal(err.report.decision, "block");
  assert.equal(err.report.output, null);
  assert.equal(err.report.errors[0].code, "output_schema_mismatch");
  assert.match(err.message, /must be of type `object`/);
  assert.equal(
    err.forModel(),
    `toolgate withheld this tool's output: ${err.message}. Next: the tool ran, but its output ` +
      "may not be shown; do not run it again to see it",
  );
});

test("run(): /v1/execute reads README.md of the test workspace", T, async () => {
  const data = await agent.run("read_file", { path: "README.md" });
  assert.equal(data.path, "README.md");
  assert.equal(data.content, "hello from the client test workspace\n");

  const result = await agent.execute("read_file", { path: "README.md" });
  assert.equal(result.status, "success");
  assert.equal(result.output.decision, "allow");

  // executeTimeout bounds /v1/execute; the sidecar's real answers pass the client's checks.
  const quick = new Client({ url: sidecar.url, token: AGENT_TOKEN, timeout: 5, executeTimeout: 20 });
  assert.equal(quick.settings.executeTimeout, 20);
  assert.equal((await quick.run("read_file", { path: "README.md" })).path, "README.md");
});

test("run(): denied, failed and not executable calls", T, async () => {
  const denied = await agent.run("read_file", { path: ".env" }).then(assert.fail, (e) => e);
  assert.ok(denied instanceof Denied);
  assert.equal(denied.status, 403);
  assert.deepEqual(denied.reasons, ["deny-listed-paths"]);

  const missing = await agent.run("read_file", { path: "missing.txt" }).then(assert.fail, (e) => e);
  assert.ok(missing instanceof ToolFailed);
  assert.equal(missing.code, "file_not_found");
  assert.equal(missing.status, 200);
  assert.equal(missing.result.status, "error");

  const notExec = await agent
    .run("http_fetch", { url: "https://example.com/" })
    .then(assert.fail, (e) => e);
  assert.ok(notExec instanceof ToolFailed);
  assert.equal(notExec.code, "not_executable");
  assert.equal(notExec.status, 409);
});

test("run(): pending, then a human denies: ApprovalDenied (nothing is written)", T, async () => {
  const args = writeArgs("run-deny");
  const [result] = await Promise.allSettled([
    agent.run("write_file", args),
    human("deny", args, "no writes in tests"),
  ]);
  assert.equal(result.status, "rejected");
  assert.ok(result.reason instanceof ApprovalDenied, String(result.reason));
  assert.equal(result.reason.approval.status, "denied");
});

test("authorize(): the three decisions, and a 401 decision without a token", T, async () => {
  const allow = await agent.authorize("read_file", { path: "README.md" });
  assert.equal(allow.decision, "allow");
  const deny = await agent.authorize("read_file", { path: ".env" });
  assert.equal(deny.decision, "deny");
  assert.deepEqual(deny.reasons, ["deny-listed-paths"]);
  const pending = await agent.authorize("write_file", writeArgs("authorize"));
  assert.equal(pending.decision, "pending_approval");
  assert.match(pending.approval_id, /^[0-9a-f-]{36}$/);
  await bob.deny(pending.approval_id);

  const anonymous = new Client({ url: sidecar.url, token: null });
  const noAuth = await anonymous.authorize("read_file", { path: "README.md" });
  assert.equal(noAuth.decision, "deny");
  assert.equal(noAuth.stage, "auth");
  assert.equal(noAuth.errors[0].code, "unauthenticated");
  // /v1/execute answers 401 with a decision: Denied.
  const err = await anonymous.execute("read_file", { path: "README.md" }).then(assert.fail, (e) => e);
  assert.ok(err instanceof Denied);
  assert.equal(err.status, 401);
  assert.equal(err.code, "unauthenticated");
  // decide() turns a deny into Denied
  await assert.rejects(anonymous.decide("read_file", { path: "README.md" }), Denied);

  await assert.rejects(agent.authorize("", {}), TypeError);
});

test("context: convId, traceId and iteration reach the audit log", T, async () => {
  const convId = `conv-${Date.now()}`;
  const withConv = new Client({ url: sidecar.url, token: AGENT_TOKEN, convId });
  await withConv.authorize("read_file", { path: "README.md" }, { traceId: "trace-1", iteration: 4 });
  const page = await bob.audit({ conv_id: convId });
  assert.ok(Array.isArray(page.records));
  assert.ok("next_cursor" in page);
  assert.ok(page.next_cursor === null || Number.isInteger(page.next_cursor));
  for (const record of page.records) {
    assert.ok(Number.isInteger(record.seq) && typeof record.hash === "string");
  }
  const entry = page.records.map((r) => r.entry).find((e) => e.kind === "decision");
  assert.ok(entry, JSON.stringify(page));
  assert.equal(entry.conv_id, convId);
  assert.equal(entry.trace_id, "trace-1");
  assert.equal(entry.iter, 4);
  assert.equal(entry.decision, "allow");
  // The audit log is for humans.
  const err = await agent.audit({ limit: 1 }).then(assert.fail, (e) => e);
  assert.ok(err instanceof RequestRejected);
  assert.equal(err.status, 403);
  assert.equal(err.code, "wrong_principal_kind");
});

test("reportResult() and screen()", T, async () => {
  const report = await agent.reportResult("read_file", "mail ops@example.com");
  assert.equal(report.output, "mail <redacted:email>");
  assert.equal(report.decision, "mask");
  // Nothing returned (undefined) is reported as null.
  assert.equal((await agent.reportResult("read_file", undefined)).output, null);

  const screened = await agent.screen("output", { note: "mail ops@example.com" });
  assert.deepEqual(screened.content, { note: "mail <redacted:email>" });
  assert.equal(screened.decision, "mask");

  const humanReport = await bob.reportResult("read_file", "x").then(assert.fail, (e) => e);
  assert.ok(humanReport instanceof RequestRejected);
  assert.equal(humanReport.status, 403);
  assert.equal(humanReport.code, "wrong_principal_kind");

  const unknownTool = await agent.reportResult("no_such_tool", "x").then(assert.fail, (e) => e);
  assert.ok(unknownTool instanceof RequestRejected);
  assert.equal(unknownTool.status, 400);
  assert.equal(unknownTool.code, "unknown_tool");

  const badGate = await agent.screen("bogus", "x").then(assert.fail, (e) => e);
  assert.ok(badGate instanceof RequestRejected);
  assert.equal(badGate.status, 404);
  assert.equal(badGate.code, "unknown_gate");
});

test("approvals: list, approve/deny errors, unknown ids", T, async () => {
  const pending = await agent.authorize("write_file", writeArgs("approvals"));
  const id = pending.approval_id;
  const mine = await agent.approvals({ status: "pending" });
  assert.ok(mine.some((a) => a.id === id));

  const byAgent = await agent.approve(id).then(assert.fail, (e) => e);
  assert.ok(byAgent instanceof RequestRejected);
  assert.equal(byAgent.status, 403);
  assert.equal(byAgent.code, "wrong_principal_kind");

  const denied = await bob.deny(id, "no");
  assert.equal(denied.status, "denied");
  const again = await bob.approve(id, "changed my mind").then(assert.fail, (e) => e);
  assert.ok(again instanceof RequestRejected);
  assert.equal(again.status, 409);
  assert.equal(again.code, "approval_already_decided");

  const unknown = await agent.getApproval("no-such-approval").then(assert.fail, (e) => e);
  assert.ok(unknown instanceof RequestRejected);
  assert.equal(unknown.status, 404);
  assert.equal(unknown.code, "approval_not_found");
  assert.ok(unknown.suggestion.length > 0);
});
