// Starts a real toolgate sidecar for the test suites: the binary from $TOOLGATE_BIN (default
// <repo>/target/debug/toolgate), a config of clients/testdata, a free port on 127.0.0.1 and a
// fresh data directory. Kept out of test/ so that `node --test test/` does not run it as a
// test file.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** clients/typescript */
export const PACKAGE_DIR = fileURLToPath(new URL("..", import.meta.url));
/** The repository's root. */
export const REPO = resolve(PACKAGE_DIR, "..", "..");
export const TESTDATA = join(REPO, "clients", "testdata");

/** Demo tokens (docs/policies.md#demo-principals): never use them outside a local demo. */
export const AGENT_TOKEN = "demo-dev-token";
export const BOB_TOKEN = "demo-bob-token";

const READY_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 5_000;

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

export function toolgateBin() {
  const bin = process.env.TOOLGATE_BIN || join(REPO, "target", "debug", "toolgate");
  if (!existsSync(bin)) {
    throw new Error(
      `toolgate binary not found at ${bin}: build it (cargo build) or set TOOLGATE_BIN ` +
        "to the path of a toolgate binary",
    );
  }
  return bin;
}

/** A port that was free a moment ago (the sidecar is retried on another when it is not). */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

async function startOnce(bin, config, port) {
  const dataDir = mkdtempSync(join(tmpdir(), "toolgate-ts-"));
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith("TOOLGATE_")) delete env[name];
  const args = [
    "serve",
    "--config",
    config,
    "--listen",
    `127.0.0.1:${port}`,
    "--data-dir",
    dataDir,
  ];
  const child = spawn(bin, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let log = "";
  const keep = (chunk) => {
    log = (log + chunk.toString()).slice(-16_384);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  let exited = null;
  const exit = new Promise((r) =>
    child.on("exit", (code, signal) => {
      exited = { code, signal };
      running.delete(child);
      r(exited);
    }),
  );
  child.on("error", (e) => keep(`spawn error: ${e.message}\n`));

  const url = `http://127.0.0.1:${port}`;
  const sidecar = {
    url,
    port,
    dataDir,
    config,
    logs: () => log,
    async stop() {
      if (exited === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
        await exit;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exited !== null) {
      rmSync(dataDir, { recursive: true, force: true });
      return { sidecar: null, log, exited };
    }
    try {
      const response = await fetch(url + "/readyz", { signal: AbortSignal.timeout(1000) });
      await response.arrayBuffer();
      if (response.status === 200) return { sidecar };
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  await sidecar.stop();
  throw new Error(
    `toolgate (${bin} ${args.join(" ")}) was not ready within ${READY_TIMEOUT_MS / 1000} s; ` +
      `its output:\n${log}`,
  );
}

/**
 * Starts `toolgate serve --config clients/testdata/<configName> --listen 127.0.0.1:<free port>
 * --data-dir <fresh temp dir>` and waits until GET /readyz answers 200. Returns
 * `{url, port, dataDir, logs(), stop()}`.
 */
export async function startSidecar(configName = "toolgate.toml") {
  const bin = toolgateBin();
  const config = join(TESTDATA, configName);
  let last = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    const { sidecar, log, exited } = await startOnce(bin, config, await freePort());
    if (sidecar) return sidecar;
    last = { log, exited }; // most likely the port was taken in between: try another
  }
  throw new Error(
    `toolgate (${bin}) exited before it was ready (code ${last.exited.code}, signal ` +
      `${last.exited.signal}); its output:\n${last.log}`,
  );
}
