// src/models.ts is what clients/gen_models.py generates from docs/openapi.json.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";

import { PACKAGE_DIR } from "../test-support/sidecar.mjs";

test("src/models.ts is current (gen_models.py --check)", { timeout: 30_000 }, () => {
  const run = spawnSync("python3", ["../gen_models.py", "--check"], {
    cwd: PACKAGE_DIR,
    encoding: "utf8",
    timeout: 25_000,
  });
  assert.equal(run.error, undefined, `could not run python3: ${run.error}`);
  assert.equal(run.status, 0, `gen_models.py --check failed:\n${run.stdout}${run.stderr}`);
});
