// A real OpenID provider for toolgate's OAuth tests: panva's `oidc-provider` (the certified
// Node implementation), on loopback, issuing JWT access tokens (RFC 9068) for the resource a
// client names (RFC 8707 `resource`), to clients that sign in with client_credentials.
//
// usage: node oidc_provider.mjs --port N --keys FILE --resource URL [--rotate]
//   --port N        listen on 127.0.0.1:N (0: any free port); the issuer is http://127.0.0.1:N
//   --keys FILE     the provider's signing keys (private JWKs); made when missing, so a
//                   restart on the same file keeps its keys
//   --rotate        replace the keys in FILE with a new one first (a key rotation)
//   --resource URL  the resource indicator used when a client names none
// Prints one JSON line when listening: {"issuer": .., "kid": ..}; then serves until killed.
//
// Clients (client_secret_basic; secret = "<id>-secret"):
//   agent-a          a token for agent-a itself (sub = agent-a)
//   pay-agent-alice  a delegation token (RFC 8693 shape): sub = alice, act = {sub: pay-agent}
//   pay-agent-bob    the same for bob
//   agent-short      like agent-a, but the token lives 2 seconds
import { createRequire } from "node:module";
import { generateKeyPairSync, randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

const require = createRequire(process.env.OIDC_PROVIDER_FROM || import.meta.url);
const Provider = (await import(require.resolve("oidc-provider"))).default;

const { values } = parseArgs({
  options: {
    port: { type: "string", default: "0" },
    keys: { type: "string" },
    resource: { type: "string" },
    rotate: { type: "boolean", default: false },
  },
});
if (!values.keys || !values.resource) {
  console.error("usage: oidc_provider.mjs --port N --keys FILE --resource URL [--rotate]");
  process.exit(64);
}

function newKey() {
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { ...privateKey.export({ format: "jwk" }), kid: randomUUID(), alg: "RS256", use: "sig" };
}
if (values.rotate || !existsSync(values.keys)) {
  writeFileSync(values.keys, JSON.stringify({ keys: [newKey()] }), { mode: 0o600 });
}
const jwks = JSON.parse(readFileSync(values.keys, "utf8"));

const delegations = { "pay-agent-alice": "alice", "pay-agent-bob": "bob" };
const client = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ["client_credentials"],
  redirect_uris: [],
  response_types: [],
  token_endpoint_auth_method: "client_secret_basic",
  scope: "toolgate",
});

async function start(port) {
  const server = createServer();
  await new Promise((ok, fail) => {
    server.once("listening", ok);
    server.once("error", fail);
    server.listen(port, "127.0.0.1");
  });
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: ["agent-a", "pay-agent-alice", "pay-agent-bob", "agent-short"].map(client),
    jwks,
    scopes: ["toolgate"],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => values.resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource, c) => ({
          scope: "toolgate",
          audience: resource,
          accessTokenTTL: c.clientId === "agent-short" ? 2 : 600,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "RS256" } },
        }),
      },
    },
    formats: {
      customizers: {
        jwt: async (_ctx, token, jwt) => {
          const human = delegations[token.clientId];
          if (human) {
            jwt.payload.sub = human;
            jwt.payload.act = { sub: "pay-agent" };
          }
        },
      },
    },
  });
  server.on("request", provider.callback());
  return server;
}

const server = await start(Number(values.port));
const port = server.address().port;
process.stdout.write(
  JSON.stringify({ issuer: `http://127.0.0.1:${port}`, kid: jwks.keys[0].kid }) + "\n",
);
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
