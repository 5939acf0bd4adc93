// The official MCP TypeScript client (npm @modelcontextprotocol/client, v2) in its default
// mode against toolgate's /mcp, for tests/it/mcp.rs. Prints one JSON object per line:
//   {"event":"ready","protocolVersion":..}
//   {"step":"tools","names":[..]}                    tools/list
//   {"step":"echo","result":{..}}                    an allowed call
//   {"step":"deny","result":{..}}                    a denied call
//   {"event":"elicitation","message":..}             a pending call tells the user...
//   {"step":"pending","result":{..}}                 ...and ends once a human decided
// Usage: node ts_client.mjs CLIENT_DIR URL TOKEN [default|auto]
//   CLIENT_DIR: where `npm install @modelcontextprotocol/client` ran (.ci/mcp-deps).
//   default: no version option (the client's default, the initialize handshake);
//   auto: `versionNegotiation: {mode: "auto"}` (server/discover, revision 2026-07-28).
const [dir, url, token, mode = "default"] = process.argv.slice(2);
if (!dir || !url || !token || !["default", "auto"].includes(mode)) {
  console.error("usage: ts_client.mjs CLIENT_DIR URL TOKEN [default|auto]");
  process.exit(64);
}
const sdk = await import(`${dir}/node_modules/@modelcontextprotocol/client/dist/index.mjs`);
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const client = new sdk.Client(
  { name: "toolgate-ts-test", version: "1.0.0" },
  {
    capabilities: { elicitation: {} },
    ...(mode === "auto" ? { versionNegotiation: { mode: "auto" } } : {}),
  },
);
client.setRequestHandler("elicitation/create", async (request) => {
  say({ event: "elicitation", message: request.params.message });
  return { action: "accept", content: {} };
});
const transport = new sdk.StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const version =
  typeof client.getNegotiatedProtocolVersion === "function"
    ? client.getNegotiatedProtocolVersion()
    : transport.protocolVersion;
say({ event: "ready", protocolVersion: version ?? null });
const tools = await client.listTools();
say({ step: "tools", names: tools.tools.map((t) => t.name) });
say({
  step: "echo",
  result: await client.callTool({ name: "everything.echo", arguments: { message: "from ts" } }),
});
say({
  step: "deny",
  result: await client.callTool({ name: "fs.read_text_file", arguments: { path: ".env" } }),
});
say({
  step: "pending",
  result: await client.callTool(
    { name: "mutable.wipe", arguments: { target: `ts-${mode}` } },
    { timeout: 120000 },
  ),
});
await client.close();
