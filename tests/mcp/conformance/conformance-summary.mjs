// Summarises one run of the MCP conformance suite in server mode.
// usage: node conformance-summary.mjs RESULTS_DIR SUITE_LOG URL
// The suite writes RESULTS_DIR/server-<scenario>-<timestamp>/checks.json per scenario it finished,
// and prints "Running client scenario '<name>' ..." to SUITE_LOG before each one, so a scenario
// that was started but wrote no checks (crashed, or killed by the time bound) counts as failed.
// A scenario passes when none of its checks has status FAILURE (the suite's own rule).
// Prints "passed N/M ..." then one line per failed check; exits 0 when at least one scenario ran,
// 2 when none did.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [resultsDir, logFile, url] = process.argv.slice(2);
const log = existsSync(logFile) ? readFileSync(logFile, "utf8") : "";

const started = [];
for (const m of log.matchAll(/Running client scenario '([^']+)'/g)) {
  if (!started.includes(m[1])) started.push(m[1]);
}

const byScenario = new Map();
for (const name of existsSync(resultsDir) ? readdirSync(resultsDir).sort() : []) {
  const m = /^server-(.+)-(\d{4}-\d\d-\d\dT[\d-]+Z)$/.exec(name);
  const file = join(resultsDir, name, "checks.json");
  if (!m || !existsSync(file)) continue;
  try {
    byScenario.set(m[1], JSON.parse(readFileSync(file, "utf8")));
  } catch (e) {
    byScenario.set(m[1], [{ id: m[1], status: "FAILURE", errorMessage: `unreadable checks.json: ${e.message}` }]);
  }
  if (!started.includes(m[1])) started.push(m[1]);
}

if (started.length === 0) {
  console.log(`passed 0/0: no scenario ran against ${url}`);
  process.exit(2);
}

let passed = 0;
const count = { SUCCESS: 0, FAILURE: 0, WARNING: 0 };
const failures = [];
for (const scenario of started) {
  const checks = byScenario.get(scenario) ?? [
    { id: scenario, status: "FAILURE", errorMessage: "no results written (scenario crashed or was cut off)" },
  ];
  for (const c of checks) if (c.status in count) count[c.status]++;
  const failed = checks.filter((c) => c.status === "FAILURE");
  if (failed.length === 0) passed++;
  for (const c of failed) {
    const msg = String(c.errorMessage ?? c.description ?? "").replace(/\s+/g, " ").slice(0, 300);
    failures.push(`FAIL ${scenario} [${c.id}]: ${msg}`);
  }
}

console.log(
  `passed ${passed}/${started.length} scenarios against ${url} ` +
    `(checks: ${count.SUCCESS} succeeded, ${count.FAILURE} failed, ${count.WARNING} warnings; results in ${resultsDir})`,
);
for (const line of failures) console.log(line);
process.exit(0);
