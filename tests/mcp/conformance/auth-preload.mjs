// Preload for the MCP conformance suite (node --import): the suite has no option for HTTP
// headers, so this adds the headers in $MCP_CONF_HEADERS (JSON object, e.g.
// {"Authorization":"Bearer xyz"}) to every HTTP request whose origin equals $MCP_CONF_ORIGIN.
// It does so in the process-wide undici dispatcher, which both the global fetch() (used by the
// SDK's StreamableHTTPClientTransport and the SSE scenarios) and undici's request() (used by the
// dns-rebinding scenario) go through. A header the request already carries is left as it is.
import { createRequire } from "node:module";

const raw = process.env.MCP_CONF_HEADERS;
const origin = process.env.MCP_CONF_ORIGIN;
const undiciFrom = process.env.MCP_CONF_UNDICI_FROM; // a file path inside the suite's install
if (raw && origin) {
  const extra = Object.entries(JSON.parse(raw));
  const require = createRequire(undiciFrom || import.meta.url);
  const { Agent, setGlobalDispatcher } = require("undici");

  const names = (headers) => {
    const seen = new Set();
    if (!headers) return seen;
    if (Array.isArray(headers)) {
      if (headers.length && Array.isArray(headers[0])) headers.forEach(([k]) => seen.add(String(k).toLowerCase()));
      else for (let i = 0; i < headers.length; i += 2) seen.add(String(headers[i]).toLowerCase());
    } else if (typeof headers[Symbol.iterator] === "function") {
      for (const [k] of headers) seen.add(String(k).toLowerCase());
    } else {
      Object.keys(headers).forEach((k) => seen.add(k.toLowerCase()));
    }
    return seen;
  };

  const withExtra = (headers) => {
    const seen = names(headers);
    const add = extra.filter(([k]) => !seen.has(k.toLowerCase()));
    if (add.length === 0) return headers;
    if (!headers) return Object.fromEntries(add);
    if (Array.isArray(headers)) {
      if (headers.length && Array.isArray(headers[0])) return [...headers, ...add];
      return [...headers, ...add.flat()];
    }
    if (typeof headers[Symbol.iterator] === "function") return [...headers, ...add];
    return { ...headers, ...Object.fromEntries(add) };
  };

  const sameOrigin = (o) => {
    try {
      return new URL(String(o)).origin === origin;
    } catch {
      return false;
    }
  };

  const inject = (dispatch) => (opts, handler) =>
    dispatch(sameOrigin(opts.origin) ? { ...opts, headers: withExtra(opts.headers) } : opts, handler);

  setGlobalDispatcher(new Agent().compose(inject));
}
