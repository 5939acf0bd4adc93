// The toolgate console. Every view and action is a call to the sidecar's HTTP API, made with
// the session cookie and the session's token (X-Toolgate-CSRF), which this page keeps in
// sessionStorage: unlike the cookie, no other port of this host ever sees it. Text from the
// sidecar (arguments, reasons, names) is only ever set as text, never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY = "toolgate.session-token";
let csrf = sessionStorage.getItem(KEY);
let events = null;
let queue = [];
const VIEWS = ["queue", "explain", "audit", "operations"];

class ApiError extends Error {
  constructor(status, body) {
    // An error body ({error, message, suggestion}) or a decision ({errors: [{code, message}]}).
    const first = body && Array.isArray(body.errors) ? body.errors[0] : null;
    super((body && (body.message || (first && first.message) || body.error)) || `HTTP ${status}`);
    this.code = (body && body.error) || (first && first.code) || null;
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (csrf) headers["X-Toolgate-CSRF"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try {
    data = await resp.json();
  } catch (_) {
    data = null;
  }
  if (resp.status === 401 && !(method === "POST" && path === "/ui/session")) signedOut();
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function banner(text, kind) {
  const b = $("banner");
  b.textContent = text;
  b.className = kind || "info";
  b.hidden = !text;
}

function errorText(e) {
  if (e instanceof ApiError) {
    const code = e.code ? `${e.code}: ` : "";
    const hint = e.body && e.body.suggestion ? ` (${e.body.suggestion})` : "";
    return `${code}${e.message}${hint}`;
  }
  return String(e && e.message ? e.message : e);
}

function when(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

function left(ms) {
  const s = Math.max(0, Math.round((ms - Date.now()) / 1000));
  if (s === 0) return "expired";
  const m = Math.floor(s / 60);
  return m > 0 ? `${m} min ${s % 60} s left` : `${s} s left`;
}

// ---- session ----

function signedOut() {
  csrf = null;
  sessionStorage.removeItem(KEY);
  if (events) events.abort();
  events = null;
  $("nav").hidden = true;
  $("who").hidden = true;
  show("sign-in");
}

async function start() {
  if (!csrf) return signedOut();
  try {
    signedIn(await api("GET", "/ui/session"));
  } catch (_) {
    signedOut();
  }
}

function signedIn(s) {
  if (s.csrf) {
    csrf = s.csrf;
    sessionStorage.setItem(KEY, csrf);
  }
  $("principal").textContent = s.principal;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("sign-in-error").textContent = "";
  openQueue();
  route();
}

$("sign-in-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = $("token").value;
  $("token").value = "";
  try {
    signedIn(await api("POST", "/ui/session", { token }));
  } catch (e) {
    $("sign-in-error").textContent = errorText(e);
  }
});

$("sign-out").addEventListener("click", async () => {
  try {
    await api("DELETE", "/ui/session");
  } catch (_) {
    // Signed out either way.
  }
  signedOut();
});

// ---- views ----

function show(name) {
  for (const v of ["sign-in", ...VIEWS]) $(`view-${v}`).hidden = v !== name;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

function route() {
  if (!csrf) return;
  const name = (location.hash.slice(1).split("/")[0] || "queue").toLowerCase();
  const view = VIEWS.includes(name) ? name : "queue";
  show(view);
  if (view === "audit") searchAudit(false);
  if (view === "operations") loadOperations();
}
window.addEventListener("hashchange", route);

// ---- queue ----

// The queue's event stream, read with fetch (EventSource cannot send the session's token).
// It reconnects with a growing pause; a refusal (signed out, token revoked) signs out.
function openQueue() {
  if (events) events.abort();
  const ctl = new AbortController();
  events = ctl;
  let pause = 1000;
  const reconnect = () => {
    if (events !== ctl) return;
    setLive("reconnecting…", "warn");
    setTimeout(() => events === ctl && read(), pause);
    pause = Math.min(pause * 2, 30000);
  };
  const read = async () => {
    let resp;
    try {
      resp = await fetch("/v1/approvals/events", {
        headers: { Accept: "text/event-stream", "X-Toolgate-CSRF": csrf || "" },
        credentials: "same-origin",
        signal: ctl.signal,
      });
    } catch (_) {
      return reconnect();
    }
    if (resp.status === 401 || resp.status === 403) return start();
    if (!resp.ok || !resp.body) return reconnect();
    setLive("live", "ok");
    pause = 1000;
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let name = "message";
          let data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trimStart();
          }
          if (name === "queue") {
            queue = JSON.parse(data).approvals || [];
            renderQueue();
          } else if (name === "queue-error") {
            setLive(data, "bad");
          }
        }
      }
    } catch (_) {
      // Aborted or cut: reconnect below, unless this stream was replaced.
    }
    reconnect();
  };
  read();
}

function setLive(text, kind) {
  const s = $("live-state");
  s.textContent = text;
  s.className = `badge ${kind}`;
}

function renderQueue() {
  const list = $("queue-list");
  const focused = document.activeElement && document.activeElement.id;
  const reasons = {};
  for (const input of list.querySelectorAll("input[data-id]")) reasons[input.dataset.id] = input.value;
  list.replaceChildren(...queue.map((a) => card(a, reasons[a.id] || "")));
  $("queue-empty").hidden = queue.length > 0;
  $("queue-count").textContent = queue.length ? `(${queue.length})` : "";
  if (focused && $(focused)) $(focused).focus();
}

function card(a, reason) {
  const args = a.arguments !== undefined ? JSON.stringify(a.arguments, null, 2) : a.args_preview;
  const provenance = Object.entries(a.provenance || {});
  const result = el("p", { class: "result", role: "status", id: `result-${a.id}` });
  const reasonInput = el("input", {
    id: `reason-${a.id}`,
    "data-id": a.id,
    "aria-label": `Reason for the decision on ${a.tool}`,
    placeholder: "reason (recorded)",
  });
  reasonInput.value = reason;
  const decide = (approve) => async () => {
    const verb = approve ? "approve" : "deny";
    try {
      const r = await api("POST", `/v1/approvals/${encodeURIComponent(a.id)}/${verb}`, {
        reason: reasonInput.value || undefined,
      });
      banner(`${a.tool} for ${a.principal}: ${r.status || verb}`, "ok");
    } catch (e) {
      result.textContent = errorText(e);
      result.className = "result error";
    }
  };
  return el(
    "li",
    { class: "card", id: `approval-${a.id}`, "data-tool": a.tool },
    el("h3", {}, el("span", { class: "agent", text: a.principal }), " wants ", el("code", { text: a.tool })),
    el(
      "dl",
      { class: "facts" },
      el("dt", { text: "Risk" }),
      el("dd", { text: a.risk || "—" }),
      el("dt", { text: "Waiting on" }),
      el("dd", { text: (a.waiting_on || []).join(", ") || "—" }),
      el("dt", { text: "Time left" }),
      el("dd", { class: "ttl", "data-expires": String(a.expires_ms), text: left(a.expires_ms) }),
      el("dt", { text: "Approval" }),
      el("dd", {}, el("code", { text: a.id })),
    ),
    el("h4", { text: "Arguments" }),
    el("pre", { class: "args", text: args }),
    provenance.length
      ? el(
          "div",
          {},
          el("h4", { text: "Where the arguments came from" }),
          el("ul", { class: "provenance" }, ...provenance.map(([k, v]) => el("li", {}, el("code", { text: k }), `: ${v}`))),
        )
      : null,
    el(
      "div",
      { class: "actions" },
      reasonInput,
      el("button", { type: "button", class: "approve", onclick: decide(true) }, `Approve`),
      el("button", { type: "button", class: "deny", onclick: decide(false) }, `Deny`),
    ),
    result,
  );
}

setInterval(() => {
  for (const dd of document.querySelectorAll("dd.ttl")) dd.textContent = left(Number(dd.dataset.expires));
}, 1000);

// ---- explain ----

$("explain-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("explain-error").textContent = "";
  let args;
  try {
    args = JSON.parse($("explain-args").value || "{}");
  } catch (e) {
    $("explain-error").textContent = `The arguments are not JSON: ${e.message}`;
    return;
  }
  try {
    const r = await api("POST", "/v1/explain", {
      agent: $("explain-agent").value.trim(),
      tool: $("explain-tool").value.trim(),
      args,
    });
    const out = $("explain-result");
    const policies = (r.policies || []).map((p) =>
      el(
        "tr",
        {},
        el("td", {}, el("code", { text: p.id })),
        el("td", { text: p.permit ? "permit" : "forbid" }),
        el("td", { text: p.as_is || "" }),
        el("td", { text: p.if_approved || "" }),
      ),
    );
    out.replaceChildren(
      el("p", {}, "Decision: ", el("strong", { id: "explain-decision", text: r.decision }), ` at stage ${r.stage || "—"}`),
      el("p", { text: `Reasons: ${(r.reasons || []).join(", ") || "—"}` }),
      r.approval
        ? el("p", { text: `Who may approve: ${(r.approval.humans || []).join(", ") || "nobody"}` })
        : null,
      policies.length
        ? el(
            "table",
            {},
            el("thead", {}, el("tr", {}, ...["Policy", "Effect", "As is", "If approved"].map((h) => el("th", { scope: "col", text: h })))),
            el("tbody", {}, ...policies),
          )
        : null,
      el("details", {}, el("summary", { text: "The whole answer" }), el("pre", { text: JSON.stringify(r, null, 2) })),
    );
  } catch (e) {
    $("explain-error").textContent = errorText(e);
  }
});

// ---- audit ----

let cursor = null;
let exportQuery = "";

// The export is fetched with the session's token, then saved from memory.
$("audit-export").addEventListener("click", async () => {
  $("audit-error").textContent = "";
  try {
    const resp = await fetch(`/v1/audit/export?${exportQuery}`, {
      headers: { "X-Toolgate-CSRF": csrf || "" },
      credentials: "same-origin",
    });
    if (!resp.ok) throw new ApiError(resp.status, await resp.json().catch(() => null));
    const url = URL.createObjectURL(await resp.blob());
    const a = el("a", { href: url, download: "toolgate-audit.jsonl" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    $("audit-error").textContent = errorText(e);
  }
});

function auditParams() {
  const p = new URLSearchParams();
  for (const name of ["principal", "tool", "decision"]) {
    const v = $(`audit-${name}`).value.trim();
    if (v) p.set(name, v);
  }
  for (const name of ["since", "until"]) {
    const v = $(`audit-${name}`).value;
    if (v) p.set(name, String(new Date(v).getTime()));
  }
  return p;
}

async function searchAudit(more) {
  $("audit-error").textContent = "";
  const p = auditParams();
  exportQuery = p.toString();
  p.set("limit", "50");
  if (more && cursor) p.set("cursor", String(cursor));
  try {
    const r = await api("GET", `/v1/audit?${p}`);
    const rows = r.records.map((rec) => {
      const e = rec.entry || {};
      return el(
        "tr",
        {},
        el("td", { text: String(rec.seq) }),
        el("td", { text: when(e.at_ms || rec.at_ms) }),
        el("td", { text: e.kind || "" }),
        el("td", { text: e.principal || "" }),
        el("td", { text: e.tool || "" }),
        el("td", { text: e.decision || "" }),
        el("td", { text: e.stage || "" }),
        el("td", { text: (e.reasons || []).join(", ") }),
      );
    });
    const body = $("audit-table").tBodies[0];
    if (more) body.append(...rows);
    else body.replaceChildren(...rows);
    cursor = r.next_cursor;
    $("audit-more").hidden = !cursor;
  } catch (e) {
    $("audit-error").textContent = errorText(e);
  }
}

$("audit-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  searchAudit(false);
});
$("audit-more").addEventListener("click", () => searchAudit(true));
$("verify-chain").addEventListener("click", async () => {
  const s = $("chain-state");
  s.textContent = "checking…";
  try {
    const v = await api("GET", "/v1/audit/verify");
    if (v.result === "intact") {
      s.textContent = `intact: ${v.records} records, head ${v.head.seq}`;
      s.className = "badge ok";
    } else {
      s.textContent = `BROKEN at record ${v.seq}: ${v.why}`;
      s.className = "badge bad";
    }
  } catch (e) {
    s.textContent = errorText(e);
    s.className = "badge bad";
  }
});

// ---- operations ----

async function loadOperations() {
  $("ops-error").textContent = "";
  await Promise.all([loadKillSwitch(), loadQuarantine(), loadPolicies(), loadGrants()]);
}

function opsFailed(e) {
  $("ops-error").textContent = errorText(e);
}

let killOn = false;
async function loadKillSwitch() {
  try {
    const k = await api("GET", "/v1/admin/kill-switch");
    killOn = k.on;
    const s = $("kill-state");
    s.textContent = k.on ? "ON: every tool call is denied" : "off";
    s.className = `badge ${k.on ? "bad" : "ok"}`;
    const set = k.set || {};
    $("kill-detail").textContent = k.forced_by
      ? `forced by ${k.forced_by}`
      : set.by
        ? `last set by ${set.by}${set.reason ? `: ${set.reason}` : ""} (${when(set.at_ms)})`
        : "";
    $("kill-toggle").textContent = k.on ? "Turn the kill switch off" : "Turn the kill switch on";
  } catch (e) {
    opsFailed(e);
  }
}

$("kill-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    await api("POST", "/v1/admin/kill-switch", { on: !killOn, reason: $("kill-reason").value || undefined });
    $("kill-reason").value = "";
    banner(`Kill switch ${killOn ? "off" : "on"}`, "ok");
  } catch (e) {
    opsFailed(e);
  }
  loadKillSwitch();
});

async function loadQuarantine() {
  try {
    const q = await api("GET", "/v1/admin/quarantine");
    const items = (q.quarantined || q.agents || []).map((a) =>
      el(
        "li",
        {},
        el("code", { text: a.principal }),
        ` by ${a.by} (${a.cause}): ${a.reason} `,
        el("button", { type: "button", onclick: () => setQuarantine(a.principal, false, "released from the console") }, "Release"),
      ),
    );
    $("quarantine-list").replaceChildren(...(items.length ? items : [el("li", { text: "None." })]));
  } catch (e) {
    opsFailed(e);
  }
}

async function setQuarantine(agent, on, reason) {
  try {
    await api("POST", "/v1/admin/quarantine", { agent, on, reason: reason || undefined });
  } catch (e) {
    opsFailed(e);
  }
  loadQuarantine();
}

$("quarantine-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  setQuarantine($("quarantine-agent").value.trim(), true, $("quarantine-reason").value);
});

async function loadPolicies() {
  try {
    const p = await api("GET", "/v1/policies");
    const facts = [
      ["Revision", p.revision],
      ["Loaded", when(p.loaded_at_unix_ms)],
      ["Policies / tools", `${p.policies} / ${p.tools}`],
      ["Source", `${p.origin}${p.stale ? " (stale: not what the files say)" : ""}`],
      ["Last reload", p.last_reload_error ? `failed: ${p.last_reload_error.message}` : "ok"],
      ["Solver", p.solver ? p.solver.effect : ""],
    ];
    $("policy-state").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    const held = $("held");
    if (p.held) {
      held.replaceChildren(
        el("p", {}, el("span", { class: "badge warn", text: "held" }), ` Revision ${p.held.revision} waits for approval (it would replace ${p.held.from}).`),
        el("pre", { text: JSON.stringify(p.held.review, null, 2) }),
        el("button", { type: "button", onclick: () => approveHeld(p.held.revision) }, "Approve the held change"),
      );
    } else {
      held.replaceChildren(el("p", { text: "No policy change is held." }));
    }
  } catch (e) {
    opsFailed(e);
  }
}

async function approveHeld(revision) {
  try {
    await api("POST", "/v1/policies/held/approve", { revision });
    banner(`Policy revision ${revision} is now in force`, "ok");
  } catch (e) {
    opsFailed(e);
  }
  loadPolicies();
}

function entity(text) {
  const i = text.indexOf("::");
  if (i < 1) throw new Error(`"${text}" is not Type::id`);
  return { type: text.slice(0, i), id: text.slice(i + 2).replace(/^"(.*)"$/, "$1") };
}

async function loadGrants() {
  try {
    const g = await api("GET", "/v1/grants");
    const items = (g.grants || []).map((x) =>
      el(
        "li",
        {},
        el("code", { text: x.template }),
        ` ${x.principal.type}::${x.principal.id} → ${x.resource.type}::${x.resource.id}, by ${x.granted_by}, until ${when(x.expires_ms)}${x.active ? "" : ` (inactive: ${x.problem || "?"})`} `,
        el("button", { type: "button", onclick: () => revokeGrant(x.id) }, "Revoke"),
      ),
    );
    $("grant-list").replaceChildren(...(items.length ? items : [el("li", { text: "None." })]));
  } catch (e) {
    opsFailed(e);
  }
}

async function revokeGrant(id) {
  try {
    await api("POST", `/v1/grants/${encodeURIComponent(id)}/revoke`, { reason: "revoked from the console" });
  } catch (e) {
    opsFailed(e);
  }
  loadGrants();
}

$("grant-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    await api("POST", "/v1/grants", {
      template: $("grant-template").value.trim(),
      principal: entity($("grant-principal").value.trim()),
      resource: entity($("grant-resource").value.trim()),
      ttl_s: Number($("grant-ttl").value),
      reason: $("grant-reason").value || undefined,
    });
    banner("Grant created", "ok");
  } catch (e) {
    opsFailed(e);
  }
  loadGrants();
});

start();
