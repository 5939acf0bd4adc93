// The approver console (/ui) in a real browser: Debian's Chromium driven by Playwright, against
// a real sidecar (the shipped policies, the demo tokens). An agent's calls are real HTTP calls
// made beside the browser. Screenshots of each screen go to $TOOLGATE_SCREENSHOTS (default
// <repo>/target/ui-screenshots), kept as the run's artifacts.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { REPO, startSidecar } from "../../clients/typescript/test-support/sidecar.mjs";

const CHROMIUM = process.env.TOOLGATE_CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.TOOLGATE_SCREENSHOTS || join(REPO, "target", "ui-screenshots");
const AGENT = "demo-dev-token";
const BOB = "demo-bob-token"; // an approver
const ALICE = "demo-alice-token"; // a director: kill switch, quarantine, held policies
const GRACE = "demo-grace-token"; // an auditor: explains, reads the audit log, decides nothing
const WAIT = 15_000;

let sidecar;
let browser;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  sidecar = await startSidecar("toolgate.toml");
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  await sidecar?.stop();
});

/** A call to the sidecar's API with a bearer token (an agent's or a human's). */
async function api(token, method, path, body) {
  const resp = await fetch(sidecar.url + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(40_000),
  });
  return { status: resp.status, body: await resp.json() };
}

const authorize = (args, extra = {}) =>
  api(AGENT, "POST", "/v1/authorize", { tool: "write_file", args, ...extra });

/**
 * The agent's loop for one call: authorize; while pending, wait for the human (long poll);
 * once approved, send the call again with the approval and run the tool. Resolves with what
 * happened: `{ran, decision, approval}`.
 */
async function agentCall(args, run) {
  const first = await authorize(args);
  assert.equal(first.status, 200, JSON.stringify(first.body));
  if (first.body.decision !== "pending_approval") return { ran: false, decision: first.body };
  const id = first.body.approval_id;
  let approval;
  for (;;) {
    approval = (await api(AGENT, "GET", `/v1/approvals/${id}?wait=30s`)).body;
    if (approval.status !== "pending") break;
  }
  if (approval.status !== "approved") return { ran: false, approval };
  const retried = await authorize(args, { approval_id: id });
  if (retried.body.decision !== "allow") return { ran: false, decision: retried.body, approval };
  await run();
  return { ran: true, decision: retried.body, approval };
}

async function signIn(token) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    // A 401/403/409 the page shows is expected; a script error or CSP violation is not.
    if (m.type() === "error" && !/status of 40[139]/.test(m.text())) problems.push(m.text());
  });
  await page.goto(`${sidecar.url}/ui`);
  await page.getByLabel("Token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("#principal").filter({ hasText: "Human::" }).waitFor({ timeout: WAIT });
  return { context, page, problems };
}

const shot = (page, name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

test("signing in: a human's token gives an HttpOnly SameSite=Strict cookie; an agent's is refused", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${sidecar.url}/ui`);
  await shot(page, "01-sign-in");
  await page.getByLabel("Token").fill(AGENT);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByText("only humans sign in to the console").waitFor({ timeout: WAIT });
  await page.getByLabel("Token").fill("not-a-token");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByText("unauthenticated").waitFor({ timeout: WAIT });
  await page.getByLabel("Token").fill(BOB);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("#principal").filter({ hasText: 'Human::"bob"' }).waitFor({ timeout: WAIT });
  const [cookie] = await context.cookies();
  assert.equal(cookie.name, "toolgate_session");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Strict");
  // The human's token is kept nowhere the page can read; the page holds only the session's
  // own token, in sessionStorage (which no other port of this host sees).
  assert.equal(await page.evaluate(() => document.cookie), "");
  const stored = await page.evaluate(() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage));
  assert.ok(!stored.includes(BOB), stored);
  assert.deepEqual(await page.evaluate(() => Object.keys(sessionStorage)), ["toolgate.session-token"]);
  assert.equal(await page.evaluate(() => localStorage.length), 0);

  // The cookie alone is worth nothing: a server on another port of this host receives it
  // (cookies ignore ports), but without the session's token it opens nothing, reads included.
  const jar = `toolgate_session=${cookie.value}`;
  for (const [method, path] of [
    ["GET", "/ui/session"],
    ["GET", "/v1/approvals"],
    ["GET", "/v1/audit/export"],
    ["GET", "/v1/approvals/events"],
  ]) {
    const r = await fetch(sidecar.url + path, { method, headers: { Cookie: jar } });
    assert.ok([401, 403].includes(r.status), `${method} ${path} with the cookie alone: ${r.status}`);
    await r.arrayBuffer();
  }
  const replay = await fetch(sidecar.url + "/v1/admin/kill-switch", {
    method: "POST",
    headers: { Cookie: jar, "Content-Type": "application/json" },
    body: JSON.stringify({ on: true }),
  });
  assert.equal(replay.status, 403);
  assert.equal((await replay.json()).error, "csrf_rejected");
  // The page survives a reload signed in; signing out ends the session on the server.
  await page.reload();
  await page.locator("#principal").filter({ hasText: 'Human::"bob"' }).waitFor({ timeout: WAIT });
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("Token").waitFor({ timeout: WAIT });
  const after = await page.evaluate(async () => (await fetch("/v1/approvals")).status);
  assert.equal(after, 401);
  await context.close();
});

test("a pending call appears live, is approved, and the agent's retried call runs; another is denied", async () => {
  const bob = await signIn(BOB);
  const grace = await signIn(GRACE);
  const { page } = bob;
  await page.getByText("Nothing is waiting for you.").waitFor({ timeout: WAIT });
  await grace.page.getByText("Nothing is waiting for you.").waitFor({ timeout: WAIT });

  // An argument that would run script if it were ever parsed as HTML.
  const hostile = `<img src=x onerror="document.title='pwned'">`;
  let wrote = null;
  const first = agentCall({ path: "console/notes.txt", content: `hello ${hostile}` }, async () => {
    wrote = "hello";
  });
  const card = page.locator("li.card", { hasText: "console/notes.txt" });
  await card.waitFor({ timeout: WAIT }); // no reload: it arrives over SSE
  await card.getByText("tier-high-needs-approval").waitFor();
  await card.getByText(/\d+ min \d+ s left|\d+ s left/).waitFor();
  assert.match(await card.locator("pre.args").textContent(), /onerror/);
  assert.equal(await page.locator("li.card img").count(), 0, "arguments are text, never HTML");
  assert.notEqual(await page.title(), "pwned");
  await shot(page, "02-queue");

  // Grace may not decide it (Cedar): she does not see it.
  await grace.page.waitForTimeout(1500);
  assert.equal(await grace.page.locator("li.card").count(), 0);
  await grace.context.close();

  await card.getByRole("textbox").fill("looks fine");
  await card.getByRole("button", { name: "Approve" }).click();
  await card.waitFor({ state: "detached", timeout: WAIT });
  const done = await first;
  assert.equal(done.ran, true, JSON.stringify(done));
  assert.equal(wrote, "hello");
  assert.equal(done.approval.decided_by, 'Human::"bob"');
  assert.equal(done.approval.reason, "looks fine");
  assert.equal(done.decision.stage, "approval");

  const second = agentCall({ path: "console/other.txt", content: "no" }, async () => {
    throw new Error("a denied call must not run");
  });
  const other = page.locator("li.card", { hasText: "console/other.txt" });
  await other.waitFor({ timeout: WAIT });
  await other.getByRole("textbox").fill("not this one");
  await other.getByRole("button", { name: "Deny" }).click();
  await other.waitFor({ state: "detached", timeout: WAIT });
  const denied = await second;
  assert.equal(denied.ran, false);
  assert.equal(denied.approval.status, "denied");
  assert.equal(denied.approval.reason, "not this one");
  assert.deepEqual(bob.problems, []);
  await bob.context.close();
});

test("explain and the audit log, as an auditor", async () => {
  const { page, context, problems } = await signIn(GRACE);
  await page.getByRole("link", { name: "Explain" }).click();
  const form = page.locator("#explain-form");
  await form.getByLabel("Agent").fill("dev-agent");
  await form.getByLabel("Tool").fill("write_file");
  await form.getByLabel("Arguments (JSON object)").fill('{"path": "notes.txt", "content": "hi"}');
  await page.getByRole("button", { name: "Explain" }).click();
  await page.locator("#explain-decision").filter({ hasText: "pending_approval" }).waitFor({ timeout: WAIT });
  await page.getByText("Who may approve:").waitFor();
  await shot(page, "03-explain");

  await page.getByRole("link", { name: "Audit" }).click();
  await page.locator("#audit-table tbody tr").first().waitFor({ timeout: WAIT });
  await page.locator("#audit-form").getByLabel("Decision").selectOption("pending_approval");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForFunction(
    () =>
      [...document.querySelectorAll("#audit-table tbody tr td:nth-child(6)")].every(
        (td) => td.textContent === "pending_approval",
      ) && document.querySelectorAll("#audit-table tbody tr").length >= 2,
    null,
    { timeout: WAIT },
  );
  await page.getByRole("button", { name: "Verify the chain" }).click();
  await page.locator("#chain-state").filter({ hasText: /^intact: \d+ records/ }).waitFor({ timeout: WAIT });
  await shot(page, "04-audit");
  // The export is the filtered log as JSON Lines, downloaded with the session.
  const [download] = await Promise.all([
    page.waitForEvent("download", { timeout: WAIT }),
    page.getByRole("button", { name: "Export (JSON Lines)" }).click(),
  ]);
  const saved = join(SHOTS, "export.jsonl");
  await download.saveAs(saved);
  const lines = readFileSync(saved, "utf8").trim().split("\n");
  assert.ok(lines.length >= 2);
  for (const line of lines) assert.equal(JSON.parse(line).entry.decision, "pending_approval");
  // Grace (an auditor) may not flip the kill switch: Cedar refuses, the page says so.
  await page.getByRole("link", { name: "Operations" }).click();
  await page.getByRole("button", { name: "Turn the kill switch on" }).click();
  await page.locator("#ops-error").filter({ hasText: "not_eligible" }).waitFor({ timeout: WAIT });
  assert.equal((await api(GRACE, "GET", "/v1/admin/kill-switch")).body.on, false);
  assert.deepEqual(problems, []);
  await context.close();
});

test("operations: the kill switch on and off, as a director", async () => {
  const { page, context, problems } = await signIn(ALICE);
  await page.getByRole("link", { name: "Operations" }).click();
  await page.locator("#kill-state").filter({ hasText: "off" }).waitFor({ timeout: WAIT });
  await page.locator("#kill-form").getByLabel("Reason").fill("incident drill");
  await page.getByRole("button", { name: "Turn the kill switch on" }).click();
  await page.locator("#kill-state").filter({ hasText: "ON" }).waitFor({ timeout: WAIT });
  await shot(page, "05-operations");
  const stopped = await api(AGENT, "POST", "/v1/authorize", { tool: "read_file", args: { path: "README.md" } });
  assert.equal(stopped.body.decision, "deny");
  assert.equal(stopped.body.stage, "kill_switch");
  await page.getByRole("button", { name: "Turn the kill switch off" }).click();
  await page.locator("#kill-state").filter({ hasText: "off" }).waitFor({ timeout: WAIT });
  const runs = await api(AGENT, "POST", "/v1/authorize", { tool: "read_file", args: { path: "README.md" } });
  assert.equal(runs.body.decision, "allow");

  // Quarantine an agent, and release it.
  const quarantine = page.locator("#quarantine-form");
  await quarantine.getByLabel("Agent").fill("dev-agent");
  await quarantine.getByLabel("Reason").fill("odd reads");
  await quarantine.getByRole("button", { name: "Quarantine" }).click();
  const row = page.locator("#quarantine-list li", { hasText: 'Agent::"dev-agent"' });
  await row.waitFor({ timeout: WAIT });
  const held = await api(AGENT, "POST", "/v1/authorize", { tool: "read_file", args: { path: "README.md" } });
  assert.equal(held.body.stage, "quarantine");
  await row.getByRole("button", { name: "Release" }).click();
  await row.waitFor({ state: "detached", timeout: WAIT });

  // Grant an agent a tool for a while, and revoke it.
  const grant = page.locator("#grant-form");
  await grant.getByLabel("Template").fill("grant-tool-access");
  await grant.getByLabel("Principal (Type::id)").fill("Agent::dev-agent");
  await grant.getByLabel("Resource (Type::id)").fill("Tool::write_file");
  await grant.getByLabel("Time to live (s)").fill("600");
  await grant.getByLabel("Reason").fill("one-off migration");
  await grant.getByRole("button", { name: "Grant" }).click();
  const granted = page.locator("#grant-list li", { hasText: "grant-tool-access" });
  await granted.waitFor({ timeout: WAIT });
  assert.equal((await api(ALICE, "GET", "/v1/grants")).body.grants.length, 1);
  await shot(page, "06-grants");
  await granted.getByRole("button", { name: "Revoke" }).click();
  await granted.waitFor({ state: "detached", timeout: WAIT });
  assert.equal((await api(ALICE, "GET", "/v1/grants")).body.grants.length, 0);

  // The policy state is shown, and no change is held.
  await page.getByText("No policy change is held.").waitFor();
  assert.match(await page.locator("#policy-state").textContent(), /sha256:/);
  assert.deepEqual(problems, []);
  await context.close();
});

test("CSRF: a change without the session's token, or from another origin, is refused", async () => {
  const { page, context } = await signIn(ALICE);
  // From the console's own page, without the header.
  const bare = await page.evaluate(async () => {
    const r = await fetch("/v1/admin/kill-switch", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ on: true }),
    });
    return { status: r.status, body: await r.json() };
  });
  assert.equal(bare.status, 403);
  assert.equal(bare.body.error, "csrf_rejected");

  // From another origin on the same host (same site, so the Strict cookie is sent): a page
  // that posts a form and a fetch at the sidecar.
  const evil = createServer((req, res) => {
    res.setHeader("Content-Type", "text/html");
    res.end(`<!doctype html><form id=f method=post action="${sidecar.url}/v1/admin/kill-switch"
      enctype="text/plain"><input name='{"on":true,"x":"' value='"}'></form>
      <script>
        fetch("${sidecar.url}/v1/admin/kill-switch", {method: "POST", credentials: "include",
          mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: '{"on":true}'});
        setTimeout(() => document.getElementById("f").submit(), 300);
      </script>`);
  });
  await new Promise((r) => evil.listen(0, "127.0.0.1", r));
  const evilPage = await context.newPage();
  const answers = [];
  evilPage.on("response", (r) => {
    if (r.url().includes("/v1/admin/kill-switch")) answers.push(r.status());
  });
  await evilPage.goto(`http://127.0.0.1:${evil.address().port}/`);
  await evilPage.waitForTimeout(1500);
  evil.close();
  assert.ok(answers.length >= 1, "the attack reached the sidecar");
  for (const status of answers) assert.notEqual(status, 200);
  const k = await api(ALICE, "GET", "/v1/admin/kill-switch");
  assert.equal(k.body.on, false, "no state changed");
  await context.close();
});
