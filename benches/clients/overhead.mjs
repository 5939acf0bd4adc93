#!/usr/bin/env node
// What the TypeScript client adds over plain fetch, measured against its floor in the same run.
//
// Starts a sidecar (--toolgate BIN, default target/release/toolgate) with the client tests'
// config on a free port, then times, interleaved in rounds: `authorize` (Client.authorize vs
// the same POST /v1/authorize with a bare fetch, JSON parsed) and `call` (the whole loop of a
// guarded no-op tool vs the same two POSTs sent bare). Prints median and p99 per call and the
// ratios. Usage (build the client first: cd clients/typescript && npm ci && npm run build):
//
//   node benches/clients/overhead.mjs [--toolgate BIN] [--calls 2000]
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { Client } = await import(join(repo, "clients/typescript/dist/index.js"));
const { values } = parseArgs({
  options: {
    toolgate: { type: "string", default: join(repo, "target/release/toolgate") },
    calls: { type: "string", default: "2000" },
    rounds: { type: "string", default: "5" },
  },
});
const TOKEN = "demo-dev-token";
const ARGS = { path: "src/main.rs" };

const port = await new Promise((ok) => {
  const s = createServer().listen(0, "127.0.0.1", () => {
    const p = s.address().port;
    s.close(() => ok(p));
  });
});
const url = `http://127.0.0.1:${port}`;
const data = mkdtempSync(join(tmpdir(), "toolgate-bench-"));
const proc = spawn(
  values.toolgate,
  ["serve", "--config", join(repo, "clients/testdata/toolgate.toml"), "--listen",
    `127.0.0.1:${port}`, "--data-dir", join(data, "d")],
  { stdio: "ignore" },
);
try {
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(url + "/readyz")).ok) break;
    } catch {}
    if (i > 600) throw new Error("toolgate did not become ready");
    await new Promise((r) => setTimeout(r, 50));
  }
  const headers = { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" };
  const post = async (path, body) =>
    (await fetch(url + path, { method: "POST", headers, body: JSON.stringify(body) })).json();
  const rawAuthorize = () => post("/v1/authorize", { tool: "read_file", args: ARGS });
  const rawCall = async () => {
    const d = await rawAuthorize();
    if (d.decision !== "allow") throw new Error(JSON.stringify(d));
    return (await post("/v1/results", { tool: "read_file", output: "ok", decision_id: d.decision_id }))
      .output;
  };
  const client = new Client({ url, token: TOKEN });
  const clientAuthorize = () => client.authorize("read_file", ARGS);
  const clientCall = async () => (await client.call("read_file", ARGS, () => "ok")).output;

  const timed = async (fn, n) => {
    const out = [];
    for (let i = 0; i < n; i++) {
      const t = process.hrtime.bigint();
      await fn();
      out.push(Number(process.hrtime.bigint() - t) / 1000);
    }
    return out;
  };
  for (const f of [rawAuthorize, rawCall, clientAuthorize, clientCall]) await timed(f, 50);
  const rounds = Number(values.rounds);
  const per = Math.max(1, Math.floor(Number(values.calls) / rounds));
  const got = { ra: [], ca: [], rc: [], cc: [] };
  for (let r = 0; r < rounds; r++) {
    got.ra.push(...(await timed(rawAuthorize, per)));
    got.ca.push(...(await timed(clientAuthorize, per)));
    got.rc.push(...(await timed(rawCall, per)));
    got.cc.push(...(await timed(clientCall, per)));
  }
  const stats = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return [s[Math.floor(s.length / 2)], s[Math.min(s.length - 1, Math.floor(s.length * 0.99))]];
  };
  console.log(`${per * rounds} calls each, ${rounds} interleaved rounds; µs per call`);
  for (const [name, floor, mine] of [
    ["authorize", got.ra, got.ca],
    ["call (authorize + tool + report)", got.rc, got.cc],
  ]) {
    const [fm, fp] = stats(floor);
    const [cm, cp] = stats(mine);
    console.log(
      `${name.padEnd(34)} floor (bare fetch) median ${fm.toFixed(0).padStart(6)} p99 ${fp.toFixed(0).padStart(6)} | ` +
        `client median ${cm.toFixed(0).padStart(6)} p99 ${cp.toFixed(0).padStart(6)} | ratio ${(cm / fm).toFixed(2)}`,
    );
  }
} finally {
  proc.kill();
  rmSync(data, { recursive: true, force: true });
}
