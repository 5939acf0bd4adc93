//! `docs/openapi.json` against the sidecar. The router serves every documented operation and no
//! other; and a real `toolgate serve` answers a scenario that reaches every documented
//! operation and nearly every documented status, each answer checked against the document: its
//! status is documented for that operation, its media type is, its body validates against the
//! response schema (JSON Schema 2020-12, `$ref`s resolved into `components`), it holds no field
//! the schema does not name, and each documented header it carries has the documented type.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::process::{Server, start_configured, start_with, start_with_env};
use toolgate::api::ROUTES;

const BOB: &str = "demo-bob-token";
const GRACE: &str = "demo-grace-token";

/// (method, documented path, status).
type Triple = (String, String, u16);

fn documented() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/openapi.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.insert((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

#[tokio::test]
async fn routes_match_the_openapi_document() {
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(routes, documented());
    let app = app();
    for (method, path) in &routes {
        let body = (method == "POST").then_some("{}");
        let (status, answer) = send(&app, method, path, Some(DEV), body).await;
        // A route may answer 404 about a resource (no approval `{id}`), never "no such route".
        assert_ne!(answer["error"], "not_found", "{method} {path}");
        assert!(
            status != StatusCode::NOT_FOUND
                || [
                    "approval_not_found",
                    "unknown_gate",
                    "not_a_protected_resource"
                ]
                .contains(&answer["error"].as_str().unwrap_or("")),
            "{method} {path}"
        );
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
}

// The document as a checker of answers.

/// `docs/openapi.json`, and what its response schemas are resolved against.
struct Spec {
    doc: Value,
    /// `{"components": …}`: the root every `#/components/…` reference points into.
    root: Value,
}

/// One request as sent and its answer as received.
struct Exchange {
    method: String,
    uri: String,
    /// The request body.
    sent: Vec<u8>,
    status: u16,
    /// Lower-case names.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Spec {
    fn load() -> Spec {
        let text = std::fs::read_to_string(repo().join("docs/openapi.json")).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let root = json!({"components": doc["components"]});
        Spec { doc, root }
    }

    /// Every documented (method, path, status).
    fn documented(&self) -> BTreeSet<Triple> {
        let mut all = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for status in op["responses"].as_object().unwrap().keys() {
                    all.insert((method.to_uppercase(), path.clone(), status.parse().unwrap()));
                }
            }
        }
        all
    }

    /// The documented path `path` (no query) is an instance of: segments equal, or `{name}`.
    fn template(&self, path: &str) -> Option<&str> {
        let parts: Vec<&str> = path.split('/').collect();
        self.doc["paths"].as_object()?.keys().find_map(|t| {
            let pattern: Vec<&str> = t.split('/').collect();
            let fits = pattern.len() == parts.len()
                && pattern.iter().zip(&parts).all(|(p, s)| {
                    p == s || (p.starts_with('{') && p.ends_with('}') && !s.is_empty())
                });
            fits.then_some(t.as_str())
        })
    }

    /// What the document says `ex` may be; `Err` names what it does not allow.
    fn check(&self, ex: &Exchange) -> Result<Triple, String> {
        let path = ex.uri.split('?').next().unwrap_or_default();
        let template = self
            .template(path)
            .ok_or_else(|| format!("no documented path is `{path}`"))?;
        let op = &self.doc["paths"][template][ex.method.to_lowercase()];
        if op.is_null() {
            return Err(format!("{} {template} is not documented", ex.method));
        }
        let triple = (ex.method.clone(), template.to_owned(), ex.status);
        let response = op["responses"].get(ex.status.to_string()).ok_or_else(|| {
            let listed: Vec<&String> = op["responses"].as_object().unwrap().keys().collect();
            format!(
                "status {} is not documented (documented: {listed:?})",
                ex.status
            )
        })?;
        let response = match response["$ref"].as_str() {
            Some(r) => self.target(r),
            None => response,
        };
        let mut problems = Vec::new();
        // A request the server took must be one the document allows.
        let request = &op["requestBody"]["content"]["application/json"]["schema"];
        if (200..300).contains(&ex.status) && !request.is_null() {
            match serde_json::from_slice::<Value>(&ex.sent) {
                Ok(sent) => problems.extend(
                    self.violations(request, &sent)
                        .into_iter()
                        .map(|p| format!("the request, {p}")),
                ),
                Err(e) => problems.push(format!("the request body is not JSON: {e}")),
            }
        }
        if let Some(headers) = response["headers"].as_object() {
            for (name, header) in headers {
                let value = ex.headers.get(&name.to_lowercase());
                if header["required"] == true && value.is_none() {
                    problems.push(format!("header {name} is required and missing"));
                }
                if let Some(value) = value {
                    let instance = if header["schema"]["type"] == "integer" {
                        serde_json::from_str(value).unwrap_or(Value::String(value.clone()))
                    } else {
                        Value::String(value.clone())
                    };
                    for p in self.violations(&header["schema"], &instance) {
                        problems.push(format!("header {name}: {p}"));
                    }
                }
            }
        }
        match response.get("content") {
            None if ex.body.is_empty() => {}
            None => problems.push("a body, where the document gives no content".to_owned()),
            Some(content) => {
                let media = ex
                    .headers
                    .get("content-type")
                    .map(|c| c.split(';').next().unwrap_or_default().trim().to_owned())
                    .unwrap_or_default();
                match content.get(&media) {
                    None => {
                        let listed: Vec<&String> = content.as_object().unwrap().keys().collect();
                        problems.push(format!(
                            "media type `{media}` is not documented (documented: {listed:?})"
                        ));
                    }
                    Some(media_type) => {
                        let instance = if media == "application/json" {
                            serde_json::from_slice(&ex.body)
                                .map_err(|e| format!("the body is not JSON: {e}"))
                        } else {
                            Ok(Value::String(
                                String::from_utf8_lossy(&ex.body).into_owned(),
                            ))
                        };
                        match instance {
                            Ok(instance) => {
                                problems.extend(self.violations(&media_type["schema"], &instance))
                            }
                            Err(e) => problems.push(e),
                        }
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(triple)
        } else {
            Err(problems.join("\n    "))
        }
    }

    /// A validator for `schema`, its references resolved in the document.
    fn validator(&self, schema: &Value) -> jsonschema::Validator {
        let mut wrapped = self.root.clone();
        wrapped["allOf"] = json!([schema]);
        jsonschema::draft202012::new(&wrapped)
            .unwrap_or_else(|e| panic!("the document's schema {schema} does not compile: {e}"))
    }

    /// Everything wrong with `instance` under `schema`: validation errors, then fields the
    /// schema names nowhere.
    fn violations(&self, schema: &Value, instance: &Value) -> Vec<String> {
        let mut out: Vec<String> = self
            .validator(schema)
            .iter_errors(instance)
            .map(|e| format!("at `{}`: {e}", e.instance_path()))
            .collect();
        if out.is_empty() {
            self.unnamed(schema, instance, "", &mut out);
        }
        out
    }

    /// The schema a `$ref` points to.
    fn target(&self, reference: &str) -> &Value {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("not a local reference: {reference}"));
        self.root
            .pointer(pointer)
            .unwrap_or_else(|| panic!("dangling reference: {reference}"))
    }

    /// `schema` and every schema that applies with it to `instance`: references, `allOf`, and
    /// the `oneOf`/`anyOf` branches `instance` is valid against.
    fn applicable<'s>(&'s self, schema: &'s Value, instance: &Value, out: &mut Vec<&'s Value>) {
        out.push(schema);
        if let Some(r) = schema["$ref"].as_str() {
            self.applicable(self.target(r), instance, out);
        }
        for s in schema["allOf"].as_array().into_iter().flatten() {
            self.applicable(s, instance, out);
        }
        for key in ["oneOf", "anyOf"] {
            for s in schema[key].as_array().into_iter().flatten() {
                if self.validator(s).is_valid(instance) {
                    self.applicable(s, instance, out);
                }
            }
        }
    }

    /// Fields of `instance` (at JSON pointer `at`) that no applicable schema names. An object
    /// schema that lists no `properties`, or that allows `additionalProperties`, is free-form.
    fn unnamed(&self, schema: &Value, instance: &Value, at: &str, out: &mut Vec<String>) {
        let mut schemas = Vec::new();
        self.applicable(schema, instance, &mut schemas);
        match instance {
            Value::Object(fields) => {
                let open = schemas
                    .iter()
                    .any(|s| s.get("additionalProperties").is_some_and(|a| a != false))
                    || schemas.iter().all(|s| s.get("properties").is_none());
                for (name, value) in fields {
                    let here = format!("{at}/{name}");
                    let named: Vec<&Value> = schemas
                        .iter()
                        .filter_map(|s| s["properties"].get(name))
                        .collect();
                    let subs: Vec<&Value> = if named.is_empty() {
                        schemas
                            .iter()
                            .filter_map(|s| s.get("additionalProperties"))
                            .filter(|a| a.is_object())
                            .collect()
                    } else {
                        named
                    };
                    if subs.is_empty() && !open {
                        out.push(format!("at `{here}`: a field the document does not name"));
                    }
                    for sub in subs {
                        self.unnamed(sub, value, &here, out);
                    }
                }
            }
            Value::Array(items) => {
                for s in schemas.iter().filter_map(|s| s.get("items")) {
                    for (i, item) in items.iter().enumerate() {
                        self.unnamed(s, item, &format!("{at}/{i}"), out);
                    }
                }
            }
            _ => {}
        }
    }
}

#[test]
fn the_checker_refuses_answers_the_document_does_not_allow() {
    let spec = Spec::load();
    let answer = |method: &str, uri: &str, status: u16, media: &str, body: Value| Exchange {
        method: method.to_owned(),
        uri: uri.to_owned(),
        sent: Vec::new(),
        status,
        headers: BTreeMap::from([("content-type".to_owned(), media.to_owned())]),
        body: body.to_string().into_bytes(),
    };
    let json = "application/json";
    let ok = answer("GET", "/healthz", 200, json, json!({"status": "ok"}));
    assert_eq!(
        spec.check(&ok),
        Ok(("GET".to_owned(), "/healthz".to_owned(), 200))
    );
    let refused = [
        (
            answer("GET", "/healthz", 200, json, json!({"status": "up"})),
            "at `/status`",
        ),
        (
            answer(
                "GET",
                "/healthz",
                200,
                json,
                json!({"status": "ok", "x": 1}),
            ),
            "at `/x`: a field the document does not name",
        ),
        (
            answer("GET", "/healthz", 418, json, json!({"status": "ok"})),
            "status 418 is not documented",
        ),
        (
            answer("GET", "/healthz", 200, "text/html", json!("ok")),
            "media type `text/html` is not documented",
        ),
        (
            answer("GET", "/v1/nope", 200, json, json!({})),
            "no documented path is `/v1/nope`",
        ),
        (
            answer("DELETE", "/healthz", 200, json, json!({})),
            "DELETE /healthz is not documented",
        ),
        (
            // Checked through a `$ref` to a shared response, then one to a schema.
            answer(
                "GET",
                "/v1/approvals/a1?wait=1s",
                404,
                json,
                json!({"error": 7, "message": "m", "suggestion": "s"}),
            ),
            "at `/error`",
        ),
        (
            answer(
                "GET",
                "/v1/admin/kill-switch",
                200,
                json,
                json!({"on": false, "forced_by": null, "set": {"on": false, "at_ms": 0, "who": "x"}}),
            ),
            "at `/set/who`: a field the document does not name",
        ),
    ];
    // A request the server took, which the document's request schema does not allow.
    let mut took = answer(
        "POST",
        "/v1/admin/kill-switch",
        200,
        json,
        json!({"on": true, "forced_by": null, "set": {"on": true, "at_ms": 1}}),
    );
    took.sent = json!({"on": "yes"}).to_string().into_bytes();
    let err = spec.check(&took).unwrap_err();
    assert!(err.contains("the request, at `/on`"), "{err}");
    for (exchange, expected) in refused {
        let err = spec.check(&exchange).unwrap_err();
        assert!(
            err.contains(expected),
            "{} {}: {err}",
            exchange.method,
            exchange.uri
        );
    }
}

// A plain HTTP/1.1 client that keeps what the checker needs (headers, raw body).

/// Sends one request on a fresh connection; the answer. The body is written from a second
/// thread, so an answer sent before the body was read (413) is still received.
fn exchange(
    port: u16,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Exchange {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {uri} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let sent = body.clone();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        // The server may answer and close before reading it all: not an error here.
        let _ = writer.write_all(&body);
    });
    let mut raw = Vec::new();
    let read = stream.read_to_end(&mut raw);
    sender.join().unwrap();
    if raw.is_empty() {
        read.unwrap();
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {uri}: no complete answer"));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        dechunk(rest)
    } else {
        let len = headers
            .get("content-length")
            .map_or(rest.len(), |l| l.parse().unwrap());
        rest[..len].to_vec()
    };
    Exchange {
        method: method.to_owned(),
        uri: uri.to_owned(),
        sent,
        status,
        headers,
        body,
    }
}

/// A chunked body, decoded.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = String::from_utf8_lossy(&rest[..end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        rest = &rest[end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

// The scenario.

/// Requests sent to the running sidecar, every answer checked against the document.
struct Session {
    spec: Spec,
    port: u16,
    seen: BTreeSet<Triple>,
    failures: Vec<String>,
}

impl Session {
    /// Sends `method uri` as `token` with a JSON `body`; checks that the answer's status is
    /// `expect` and that the document allows the answer, and returns its JSON body (Null if
    /// none). Failures are collected: the test fails at its end, listing them all.
    fn ask(
        &mut self,
        expect: u16,
        method: &str,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Value {
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let ex = self.raw(expect, method, uri, token, "application/json", body);
        serde_json::from_slice(&ex.body).unwrap_or(Value::Null)
    }

    /// Like [`Session::ask`] with a raw body of media type `media`; the whole answer.
    fn raw(
        &mut self,
        expect: u16,
        method: &str,
        uri: &str,
        token: Option<&str>,
        media: &str,
        body: Vec<u8>,
    ) -> Exchange {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("Content-Type", media)];
        if let Some(auth) = &auth {
            headers.push(("Authorization", auth));
        }
        let ex = exchange(self.port, method, uri, &headers, body);
        let text: String = String::from_utf8_lossy(&ex.body)
            .chars()
            .take(600)
            .collect();
        let mut problems = Vec::new();
        if ex.status != expect {
            problems.push(format!("expected status {expect}"));
        }
        match self.spec.check(&ex) {
            Ok(triple) => {
                self.seen.insert(triple);
            }
            Err(e) => problems.push(e),
        }
        if !problems.is_empty() {
            let failure = format!(
                "{method} {uri} → {}:\n    {}\n    body: {text}",
                ex.status,
                problems.join("\n    ")
            );
            // Shown at once too: a later step may depend on this one.
            eprintln!("{failure}");
            self.failures.push(failure);
        }
        ex
    }
}

/// A policy letting product owners install dependencies: a widening of the shipped set.
const PO_INSTALLS: &str = "\n@id(\"po-install-deps\")\npermit (principal in Role::\"product_owner\", action == Action::\"install_deps\", resource);\n";

/// SIGHUP: the server reloads its policy files.
fn hang_up(server: &Server) {
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
}

/// Polls `done` (every 20 ms, at most 10 s).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Documented answers the scenario does not provoke, and why. Kept exact: exercising one of
/// them, or documenting a new status, fails the test until this list says so.
const NOT_EXERCISED: &[(&str, &str, u16, &str)] = &[
    (
        "GET",
        "/.well-known/oauth-protected-resource",
        404,
        "only where `auth.jwt.audience` is not a URL: routes_match_the_openapi_document",
    ),
    (
        "GET",
        "/v1/approvals/events",
        200,
        "an event stream never ends: tests/it/console.rs reads its events",
    ),
    (
        "GET",
        "/v1/audit/verify",
        503,
        "a store that fails to read; the route shares GET /v1/audit's read path",
    ),
    (
        "GET",
        "/v1/audit/export",
        503,
        "a store that fails to read; the route shares GET /v1/audit's read path",
    ),
    (
        "POST",
        "/v1/grants",
        409,
        "too_many_grants needs 1000 grants alive: minutes of audited links",
    ),
    // The MCP transport's answers to real MCP clients (SSE streams, sessions) and the
    // descriptor approvals of real upstreams: tests/it/mcp.rs drives them.
    (
        "POST",
        "/mcp",
        200,
        "an MCP client's exchange: tests/it/mcp.rs",
    ),
    (
        "POST",
        "/mcp",
        202,
        "an MCP client's notification: tests/it/mcp.rs",
    ),
    (
        "POST",
        "/mcp",
        400,
        "a malformed JSON-RPC message under the SDK",
    ),
    ("POST", "/mcp", 404, "an ended session: tests/it/mcp.rs"),
    ("POST", "/mcp", 413, "the SDK's own body limit"),
    ("POST", "/mcp", 415, "the SDK's media-type check"),
    (
        "GET",
        "/mcp",
        200,
        "an MCP client's stream: tests/it/mcp.rs",
    ),
    ("GET", "/mcp", 400, "a stream without a session"),
    ("GET", "/mcp", 404, "an ended session"),
    (
        "DELETE",
        "/mcp",
        202,
        "an MCP client closing: tests/it/mcp.rs",
    ),
    ("DELETE", "/mcp", 404, "an ended session"),
    // The bounds on what one caller holds need floods or many open streams (issue 39).
    (
        "POST",
        "/mcp",
        429,
        "a principal past its sessions: tests/it/bounds.rs",
    ),
    (
        "GET",
        "/mcp",
        429,
        "a principal past its streams: tests/it/bounds.rs",
    ),
    (
        "GET",
        "/mcp",
        503,
        "agents holding every connection they may: the same rule as tests/it/bounds.rs's long polls",
    ),
    (
        "GET",
        "/v1/approvals/{id}",
        429,
        "a principal past its long polls: tests/it/bounds.rs",
    ),
    (
        "GET",
        "/v1/approvals/{id}",
        503,
        "agents holding every connection they may: tests/it/bounds.rs",
    ),
    (
        "GET",
        "/v1/approvals/events",
        429,
        "a human past their streams: tests/it/bounds.rs",
    ),
    (
        "POST",
        "/v1/mcp/descriptors/approve",
        200,
        "needs a changed upstream descriptor: tests/it/mcp.rs",
    ),
    (
        "POST",
        "/v1/mcp/descriptors/approve",
        409,
        "needs an MCP upstream: tests/it/mcp.rs",
    ),
    (
        "POST",
        "/v1/mcp/descriptors/approve",
        503,
        "a store failure while approving",
    ),
];

#[test]
fn every_documented_operation_answers_as_the_document_says() {
    let spec = Spec::load();
    let documented = spec.documented();
    let set = TempSet::new();
    let work = set.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("notes.txt"), "alpha\nbeta\n").unwrap();
    // A program tool whose bucket holds one call and refills once in ~17 minutes: each
    // principal's second call is refused.
    let shout = json!({
        "name": "shout",
        "description": "Prints its text in brackets.",
        "inputSchema": {"type": "object", "additionalProperties": false,
                        "properties": {"text": {"type": "string"}}},
        "risk": "low",
        "classification": "read",
        "limits": {"timeout_ms": 5000, "max_output_bytes": 4096,
                   "rate": {"per_second": 0.001, "burst": 1}},
        "executor": {"program": "printf", "argv": ["[%s]", "{text}"]},
    });
    set.write("schemas/tools/shout.json", &shout.to_string());
    set.regenerate_schema();
    // JWTs for an OAuth resource: its metadata is served.
    let config = format!(
        "[exec]\nroot = \"work\"\n[approvals]\nmax_pending_per_agent = 2\n\
         [gates.stream]\nblock = [\"secret\"]\n[auth.jwt]\nissuer = \"https://issuer.test\"\n\
         audience = \"https://toolgate.test/mcp\"\nscopes_supported = [\"toolgate\"]\n\
         hs256_secret_file = \"{}\"\n",
        repo().join("tests/fixtures/jwt/hs256.secret").display()
    );
    let server = start_configured(&set, &config, "widening = \"hold\"", &[]);
    let mut s = Session {
        spec,
        port: server.port,
        seen: BTreeSet::new(),
        failures: Vec::new(),
    };

    // OAuth protected resource metadata, at the resource's path and the bare one.
    let meta = s.ask(
        200,
        "GET",
        "/.well-known/oauth-protected-resource/mcp",
        None,
        None,
    );
    assert_eq!(meta["resource"], "https://toolgate.test/mcp", "{meta}");
    s.ask(
        200,
        "GET",
        "/.well-known/oauth-protected-resource",
        None,
        None,
    );
    let other = s.ask(
        404,
        "GET",
        "/.well-known/oauth-protected-resource/other",
        None,
        None,
    );
    assert_eq!(other["error"], "not_a_protected_resource", "{other}");

    // Liveness, readiness, metrics.
    s.ask(200, "GET", "/healthz", None, None);
    s.ask(200, "GET", "/readyz", None, None);
    s.raw(200, "GET", "/metrics", None, "text/plain", Vec::new());

    let echo = json!({"tool": "echo", "args": {"message": "hi"}, "context": {"conv_id": "c1"}});
    // Without a credential, every /v1 operation answers 401.
    for (method, path) in documented_operations(&s.spec) {
        if path.starts_with("/v1/") {
            let uri = path.replace("{id}", "x").replace("{gate}", "input");
            // Even an empty body: the credential is checked before the body is read.
            let body = (method == "POST").then(|| json!({}));
            s.ask(401, &method, &uri, None, body);
        }
    }

    // Bodies no route takes: malformed JSON, another media type, over `max_body_bytes`.
    for (method, path) in documented_operations(&s.spec) {
        // `/mcp` is the MCP SDK's transport, driven by real MCP clients in tests/it/mcp.rs.
        if method != "POST" || path == "/mcp" {
            continue;
        }
        let uri = path.replace("{id}", "x").replace("{gate}", "input");
        let agents = [
            "/v1/authorize",
            "/v1/execute",
            "/v1/results",
            "/v1/gates/{gate}",
        ];
        let token = match path.as_str() {
            p if agents.contains(&p) => DEV,
            "/v1/explain" => GRACE,
            _ => ALICE,
        };
        let json = "application/json";
        s.raw(400, "POST", &uri, Some(token), json, b"{".to_vec());
        if path == "/v1/grants/{id}/revoke" {
            // Taken as no body: a revocation without a reason, of no grant.
            s.raw(404, "POST", &uri, Some(token), "text/plain", b"{}".to_vec());
        } else {
            s.raw(415, "POST", &uri, Some(token), "text/plain", b"{}".to_vec());
        }
        let limit = if path == "/v1/results" {
            16 << 20
        } else {
            64 << 10
        };
        let big = json!({"x": "y".repeat(limit)}).to_string().into_bytes();
        s.raw(413, "POST", &uri, Some(token), json, big);
    }

    // The tools and the policy set.
    s.ask(200, "GET", "/v1/tools", Some(DEV), None);
    s.ask(200, "GET", "/v1/tools?summary=true", Some(DEV), None);
    s.ask(400, "GET", "/v1/tools?bogus=1", Some(DEV), None);
    s.ask(200, "GET", "/v1/policies", Some(ALICE), None);
    s.ask(403, "GET", "/v1/policies", Some(DEV), None);

    // Decisions: allow, deny, pending; an identity in the body; rate limited; a full queue.
    s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(echo.clone()));
    let secret = json!({"tool": "read_file", "args": {"path": ".env"}});
    s.ask(
        200,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(secret.clone()),
    );
    s.ask(
        200,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(json!({"tool": "nope"})),
    );
    let with_key = json!({"tool": "echo", "args": {"message": format!("key {AWS}")}});
    s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(with_key));
    let write = |n: u32| json!({"tool": "write_file", "args": {"path": format!("w{n}.txt"), "content": "x"}});
    let pending = s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(write(1)));
    assert_eq!(pending["decision"], "pending_approval", "{pending}");
    let first = pending["approval_id"].as_str().unwrap().to_owned();
    s.ask(
        400,
        "POST",
        "/v1/authorize",
        Some(DEV),
        Some(json!({"tool": "echo", "principal": "x"})),
    );
    // A human's credential, and one nobody holds: denied at stage `auth`.
    s.ask(
        200,
        "POST",
        "/v1/authorize",
        Some(ALICE),
        Some(echo.clone()),
    );
    s.ask(
        401,
        "POST",
        "/v1/authorize",
        Some("nope"),
        Some(echo.clone()),
    );
    let shout = |text: &str| json!({"tool": "shout", "args": {"text": text}});
    s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(shout("a")));
    let limited = s.ask(429, "POST", "/v1/authorize", Some(DEV), Some(shout("b")));
    assert_eq!(limited["error"], "rate_limited", "{limited}");
    // The release agent may open two pending approvals; the third is refused.
    for branch in ["a", "b"] {
        let push = json!({"tool": "git_push", "args": {"remote": "origin", "branch": branch}});
        let d = s.ask(200, "POST", "/v1/authorize", Some(RELEASE), Some(push));
        assert_eq!(d["decision"], "pending_approval", "{d}");
    }
    let push = json!({"tool": "git_push", "args": {"remote": "origin", "branch": "c"}});
    let full = s.ask(
        429,
        "POST",
        "/v1/authorize",
        Some(RELEASE),
        Some(push.clone()),
    );
    assert_eq!(full["error"], "too_many_pending_approvals", "{full}");

    // Approvals: listed, read (long-polled), approved, denied, refused.
    s.ask(200, "GET", "/v1/approvals", Some(ALICE), None);
    s.ask(
        200,
        "GET",
        "/v1/approvals?status=pending&limit=5",
        Some(DEV),
        None,
    );
    s.ask(400, "GET", "/v1/approvals?status=bogus", Some(ALICE), None);
    s.ask(
        200,
        "GET",
        &format!("/v1/approvals/{first}?wait=50ms"),
        Some(DEV),
        None,
    );
    s.ask(404, "GET", "/v1/approvals/nope", Some(DEV), None);
    let forever = format!("/v1/approvals/{first}?wait=forever");
    s.ask(400, "GET", &forever, Some(DEV), None);
    let approve = format!("/v1/approvals/{first}/approve");
    s.ask(403, "POST", &approve, Some(DEV), Some(json!({})));
    s.ask(
        200,
        "POST",
        &approve,
        Some(BOB),
        Some(json!({"reason": "reviewed"})),
    );
    s.ask(409, "POST", &approve, Some(BOB), Some(json!({})));
    s.ask(
        404,
        "POST",
        "/v1/approvals/nope/approve",
        Some(BOB),
        Some(json!({})),
    );
    s.ask(
        200,
        "GET",
        &format!("/v1/approvals/{first}"),
        Some(BOB),
        None,
    );
    let second = s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(write(2)));
    let deny = format!(
        "/v1/approvals/{}/deny",
        second["approval_id"].as_str().unwrap()
    );
    s.ask(403, "POST", &deny, Some(DEV), Some(json!({})));
    s.ask(200, "POST", &deny, Some(BOB), Some(json!({"reason": "no"})));
    s.ask(409, "POST", &deny, Some(BOB), Some(json!({})));
    s.ask(
        404,
        "POST",
        "/v1/approvals/nope/deny",
        Some(BOB),
        Some(json!({})),
    );
    // The approved call, sent back with its approval.
    let mut approved = write(1);
    approved["approval_id"] = json!(first);
    s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(approved));

    // Execution: built-in file tools and a program; pending, denied, not executable,
    // refused arguments, rate limited.
    s.ask(200, "POST", "/v1/execute", Some(DEV), Some(echo.clone()));
    for call in [
        json!({"tool": "read_file", "args": {"path": "notes.txt"}}),
        json!({"tool": "read_file", "args": {"path": "missing.txt"}}),
        json!({"tool": "list_files", "args": {"path": "."}}),
        json!({"tool": "search_files", "args": {"path": ".", "regex": "al"}}),
        json!({"tool": "count_matches", "args": {"path": "notes.txt", "regex": "a"}}),
    ] {
        s.ask(200, "POST", "/v1/execute", Some(DEV), Some(call));
    }
    let run = s.ask(202, "POST", "/v1/execute", Some(DEV), Some(write(3)));
    s.ask(403, "POST", "/v1/execute", Some(DEV), Some(secret));
    s.ask(403, "POST", "/v1/execute", Some(ALICE), Some(echo.clone()));
    let outside = json!({"tool": "read_file", "args": {"path": "/etc/passwd"}});
    s.ask(403, "POST", "/v1/execute", Some(DEV), Some(outside));
    let fetch = json!({"tool": "http_fetch", "args": {"url": "https://example.com/"}});
    s.ask(409, "POST", "/v1/execute", Some(DEV), Some(fetch));
    s.ask(
        422,
        "POST",
        "/v1/execute",
        Some(RELEASE),
        Some(shout("--exec=id")),
    );
    s.ask(200, "POST", "/v1/execute", Some(SRE), Some(shout("hello")));
    s.ask(429, "POST", "/v1/execute", Some(SRE), Some(shout("again")));
    // The pending run, approved and sent again: it runs.
    let id = run["approval_id"].as_str().unwrap().to_owned();
    s.ask(
        200,
        "POST",
        &format!("/v1/approvals/{id}/approve"),
        Some(BOB),
        Some(json!({})),
    );
    let mut again = write(3);
    again["approval_id"] = json!(id);
    let ran = s.ask(200, "POST", "/v1/execute", Some(DEV), Some(again));
    let ran_decision = ran["metadata"]["decision_id"].clone();

    // Results reported by an agent.
    let result = |output: Value| json!({"tool": "read_file", "output": output});
    s.ask(
        200,
        "POST",
        "/v1/results",
        Some(DEV),
        Some(result(json!("fine"))),
    );
    s.ask(
        200,
        "POST",
        "/v1/results",
        Some(DEV),
        Some(result(json!({"k": AWS, "n": 1}))),
    );
    s.ask(
        403,
        "POST",
        "/v1/results",
        Some(ALICE),
        Some(result(json!("fine"))),
    );
    s.ask(
        400,
        "POST",
        "/v1/results",
        Some(DEV),
        Some(json!({"tool": "nope", "output": ""})),
    );
    let mut unknown = result(json!("fine"));
    unknown["decision_id"] = json!("0190aaaa-0000-7000-8000-000000000000");
    s.ask(404, "POST", "/v1/results", Some(DEV), Some(unknown));
    let mut other_tool = json!({"tool": "search_files", "output": "x"});
    other_tool["decision_id"] = ran_decision;
    s.ask(409, "POST", "/v1/results", Some(DEV), Some(other_tool));

    // The gates, and the stream gate's chunks.
    s.ask(
        200,
        "POST",
        "/v1/gates/input",
        Some(DEV),
        Some(json!({"content": "hello"})),
    );
    let leaky = json!({"content": {"password": "hunter2", "note": format!("id {AWS}")}});
    s.ask(200, "POST", "/v1/gates/output", Some(DEV), Some(leaky));
    s.ask(
        404,
        "POST",
        "/v1/gates/nope",
        Some(DEV),
        Some(json!({"content": ""})),
    );
    s.ask(
        400,
        "POST",
        "/v1/gates/input",
        Some(DEV),
        Some(json!({"text": ""})),
    );
    let chunk = |id: &str, content: &str, last: bool| json!({"stream_id": id, "content": content, "final": last});
    s.ask(
        200,
        "POST",
        "/v1/gates/stream",
        Some(DEV),
        Some(chunk("s1", "part one ", false)),
    );
    s.ask(
        200,
        "POST",
        "/v1/gates/stream",
        Some(DEV),
        Some(chunk("s1", "end", true)),
    );
    s.ask(
        200,
        "POST",
        "/v1/gates/stream",
        Some(DEV),
        Some(chunk("s2", &format!("k {AWS}"), true)),
    );
    s.ask(
        409,
        "POST",
        "/v1/gates/stream",
        Some(DEV),
        Some(chunk("s2", "more", false)),
    );
    let mut opened = 0;
    loop {
        let ex = exchange(
            s.port,
            "POST",
            "/v1/gates/stream",
            &[
                ("Content-Type", "application/json"),
                ("Authorization", "Bearer demo-sre-token"),
            ],
            chunk(&format!("o{opened}"), "text ", false)
                .to_string()
                .into_bytes(),
        );
        if ex.status != 200 {
            break;
        }
        opened += 1;
        assert!(opened < 100, "streams are not bounded");
    }
    s.ask(
        429,
        "POST",
        "/v1/gates/stream",
        Some(SRE),
        Some(chunk("one-more", "x", false)),
    );

    // Explanations.
    let explain = json!({"agent": "dev-agent", "tool": "write_file", "args": {"path": "w.txt", "content": "x"}});
    s.ask(
        200,
        "POST",
        "/v1/explain",
        Some(GRACE),
        Some(explain.clone()),
    );
    let early = json!({"agent": "dev-agent", "tool": "nope"});
    s.ask(200, "POST", "/v1/explain", Some(GRACE), Some(early));
    s.ask(403, "POST", "/v1/explain", Some(DEV), Some(explain.clone()));
    s.ask(
        400,
        "POST",
        "/v1/explain",
        Some(GRACE),
        Some(json!({"agent": "", "tool": "echo"})),
    );

    // Grants.
    let grant = |ttl: u64, template: &str| {
        json!({"template": template, "principal": {"type": "Agent", "id": "po-agent"},
               "resource": {"type": "Tool", "id": "run_tests"}, "ttl_s": ttl, "reason": "incident 42"})
    };
    let g = s.ask(
        201,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(grant(3600, "grant-tool-access")),
    );
    let kept = s.ask(
        201,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(grant(7200, "grant-tool-access")),
    );
    s.ask(
        400,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(grant(0, "grant-tool-access")),
    );
    s.ask(
        403,
        "POST",
        "/v1/grants",
        Some(DEV),
        Some(grant(60, "grant-tool-access")),
    );
    s.ask(
        422,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(grant(60, "no-such-template")),
    );
    s.ask(200, "GET", "/v1/grants", Some(ALICE), None);
    s.ask(403, "GET", "/v1/grants", Some(DEV), None);
    let revoke = format!("/v1/grants/{}/revoke", g["id"].as_str().unwrap());
    s.ask(403, "POST", &revoke, Some(DEV), Some(json!({})));
    s.ask(400, "POST", &revoke, Some(ALICE), Some(json!({"why": "x"})));
    s.ask(
        200,
        "POST",
        &revoke,
        Some(ALICE),
        Some(json!({"reason": "done"})),
    );
    s.ask(404, "POST", &revoke, Some(ALICE), Some(json!({})));

    // The kill switch and quarantine.
    s.ask(200, "GET", "/v1/admin/kill-switch", Some(DEV), None);
    let switch = "/v1/admin/kill-switch";
    s.ask(
        200,
        "POST",
        switch,
        Some(ALICE),
        Some(json!({"on": true, "reason": "drill"})),
    );
    s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(echo.clone()));
    s.ask(200, "GET", "/readyz", None, None);
    s.ask(200, "POST", switch, Some(ALICE), Some(json!({"on": false})));
    s.ask(403, "POST", switch, Some(DEV), Some(json!({"on": true})));
    s.ask(400, "POST", switch, Some(ALICE), Some(json!({"on": "yes"})));
    let quarantine = "/v1/admin/quarantine";
    let hold = |on: bool| json!({"agent": "sre-agent", "on": on, "reason": "looks odd"});
    s.ask(200, "GET", quarantine, Some(ALICE), None);
    s.ask(200, "POST", quarantine, Some(ALICE), Some(hold(true)));
    s.ask(200, "GET", quarantine, Some(ALICE), None);
    s.ask(200, "POST", "/v1/authorize", Some(SRE), Some(echo.clone()));
    s.ask(200, "POST", quarantine, Some(ALICE), Some(hold(false)));
    s.ask(404, "POST", quarantine, Some(ALICE), Some(hold(false)));
    s.ask(
        400,
        "POST",
        quarantine,
        Some(ALICE),
        Some(json!({"agent": "Human::\"bob\"", "on": true})),
    );
    s.ask(403, "POST", quarantine, Some(DEV), Some(hold(true)));
    s.ask(403, "GET", quarantine, Some(DEV), None);

    // A widening policy edit, held until a director approves that revision.
    set.append("policies/roles.cedar", PO_RUNS_TESTS);
    hang_up(&server);
    let mut held = String::new();
    wait_until("the widening edit was not held", || {
        let p = s.ask(200, "GET", "/v1/policies", Some(ALICE), None);
        held = p["held"]["revision"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        !held.is_empty()
    });
    s.ask(200, "GET", "/readyz", None, None);
    let held_approve = "/v1/policies/held/approve";
    s.ask(
        403,
        "POST",
        held_approve,
        Some(BOB),
        Some(json!({"revision": held})),
    );
    let other = json!({"revision": "sha256:0000000000000000"});
    s.ask(409, "POST", held_approve, Some(ALICE), Some(other));
    s.ask(
        200,
        "POST",
        held_approve,
        Some(ALICE),
        Some(json!({"revision": held})),
    );
    s.ask(
        404,
        "POST",
        held_approve,
        Some(ALICE),
        Some(json!({"revision": held})),
    );
    s.ask(200, "GET", "/v1/policies", Some(ALICE), None);
    // A broken edit: refused, the last good set keeps serving, degraded.
    set.append("policies/tiers.cedar", BROKEN_POLICY);
    hang_up(&server);
    wait_until("the broken edit was not refused", || {
        let p = s.ask(200, "GET", "/v1/policies", Some(ALICE), None);
        !p["last_reload_error"].is_null()
    });
    let ready = s.ask(200, "GET", "/readyz", None, None);
    assert_eq!(ready["degraded"], true, "{ready}");

    // The audit log, read last: it holds a record of every kind of event above.
    s.ask(200, "GET", "/v1/audit?limit=1000", Some(ALICE), None);
    s.ask(
        200,
        "GET",
        "/v1/audit?stage=policy&tool=echo&limit=2&cursor=1000000",
        Some(GRACE),
        None,
    );
    s.ask(403, "GET", "/v1/audit", Some(DEV), None);
    s.ask(400, "GET", "/v1/audit?limit=abc", Some(ALICE), None);
    s.ask(200, "GET", "/v1/audit/head", Some(ALICE), None);
    s.ask(403, "GET", "/v1/audit/head", Some(DEV), None);
    let verdict = s.ask(200, "GET", "/v1/audit/verify", Some(ALICE), None);
    assert_eq!(verdict["result"], "intact", "{verdict}");
    s.ask(403, "GET", "/v1/audit/verify", Some(DEV), None);
    s.ask(
        200,
        "GET",
        "/v1/audit/export?decision=allow",
        Some(ALICE),
        None,
    );
    s.ask(400, "GET", "/v1/audit/export?nope=1", Some(ALICE), None);
    s.ask(403, "GET", "/v1/audit/export", Some(DEV), None);
    s.ask(403, "GET", "/v1/approvals/events", Some(DEV), None);
    s.ask(200, "GET", "/metrics", None, None);

    // Left for the next server: a pending approval and a live grant.
    let left = s.ask(200, "POST", "/v1/authorize", Some(DEV), Some(write(4)));
    let left = left["approval_id"].as_str().unwrap().to_owned();
    let kept = kept["id"].as_str().unwrap().to_owned();
    drop(server);

    // The same data on a disk with less free space than the store keeps in reserve (1 TiB):
    // nothing can be recorded, so nothing is answered or changed.
    let server = start_with(
        &set,
        "[exec]\nroot = \"work\"\n[audit]\nreserve_mb = 1048576\n",
    );
    s.port = server.port;
    s.ask(
        503,
        "POST",
        &format!("/v1/approvals/{left}/approve"),
        Some(BOB),
        Some(json!({})),
    );
    s.ask(
        503,
        "POST",
        &format!("/v1/approvals/{left}/deny"),
        Some(BOB),
        Some(json!({})),
    );
    s.ask(503, "POST", switch, Some(ALICE), Some(json!({"on": true})));
    s.ask(503, "POST", quarantine, Some(ALICE), Some(hold(true)));
    s.ask(
        503,
        "POST",
        "/v1/grants",
        Some(ALICE),
        Some(grant(60, "grant-tool-access")),
    );
    s.ask(
        503,
        "POST",
        &format!("/v1/grants/{kept}/revoke"),
        Some(ALICE),
        Some(json!({})),
    );
    let refused = s.ask(503, "POST", "/v1/execute", Some(DEV), Some(echo.clone()));
    assert_eq!(refused["stage"], "audit", "{refused}");
    s.ask(503, "POST", "/v1/authorize", Some(DEV), Some(echo.clone()));
    s.ask(503, "GET", "/readyz", None, None);
    s.ask(
        503,
        "POST",
        "/v1/results",
        Some(DEV),
        Some(result(json!("fine"))),
    );
    s.ask(503, "POST", "/v1/explain", Some(GRACE), Some(explain));
    // The files do not load: the remembered set serves.
    let p = s.ask(200, "GET", "/v1/policies", Some(ALICE), None);
    assert_eq!(p["origin"], "remembered", "{p}");
    let blocked = json!({"content": format!("key {AWS}")});
    s.ask(503, "POST", "/v1/gates/input", Some(DEV), Some(blocked));
    // The files fixed, plus another widening edit: held, and its approval cannot be recorded.
    let tiers = std::fs::read_to_string(repo().join("policies/tiers.cedar")).unwrap();
    set.write("policies/tiers.cedar", &tiers);
    set.append("policies/roles.cedar", PO_INSTALLS);
    hang_up(&server);
    let mut held = String::new();
    wait_until("the second widening edit was not held", || {
        let p = s.ask(200, "GET", "/v1/policies", Some(ALICE), None);
        held = p["held"]["revision"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        !held.is_empty()
    });
    s.ask(
        503,
        "POST",
        held_approve,
        Some(ALICE),
        Some(json!({"revision": held})),
    );
    drop(server);

    // Forced on by the environment: the API cannot turn it off.
    let server = start_with_env(&set, "", &[("TOOLGATE_KILL_SWITCH", "1")]);
    s.port = server.port;
    s.ask(409, "POST", switch, Some(ALICE), Some(json!({"on": false})));
    s.ask(200, "GET", "/readyz", None, None);
    // MCP: the transport refuses a client that does not take both JSON and SSE; no token is
    // a recorded 401; descriptor reviews are for humans.
    s.ask(401, "POST", "/mcp", None, Some(json!({})));
    s.ask(406, "POST", "/mcp", Some(DEV), Some(json!({})));
    s.ask(406, "GET", "/mcp", Some(DEV), None);
    s.ask(401, "GET", "/mcp", None, None);
    s.ask(400, "DELETE", "/mcp", Some(DEV), None);
    s.ask(401, "DELETE", "/mcp", None, None);
    s.ask(200, "GET", "/v1/mcp/descriptors", Some(ALICE), None);
    s.ask(403, "GET", "/v1/mcp/descriptors", Some(DEV), None);
    let approve = "/v1/mcp/descriptors/approve";
    let ask = json!({"tool": "echo", "pin": "sha256:00", "reason": "reviewed"});
    let not_mcp = s.ask(404, "POST", approve, Some(ALICE), Some(ask));
    assert_eq!(not_mcp["error"], "not_an_mcp_tool", "{not_mcp}");
    let empty = json!({"tool": "echo", "pin": "sha256:00", "reason": " "});
    s.ask(400, "POST", approve, Some(ALICE), Some(empty));
    let agent = json!({"tool": "echo", "pin": "sha256:00", "reason": "x"});
    s.ask(403, "POST", approve, Some(DEV), Some(agent));
    // No `[exec]`: execution is off.
    let off = s.ask(503, "POST", "/v1/execute", Some(DEV), Some(echo.clone()));
    assert_eq!(off["error"]["code"], "execution_off", "{off}");
    drop(server);

    assert!(
        s.failures.is_empty(),
        "{} answers do not match docs/openapi.json:\n{}",
        s.failures.len(),
        s.failures.join("\n")
    );
    let operations: BTreeSet<(String, String)> = s
        .seen
        .iter()
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    assert_eq!(
        operations,
        documented_operations(&s.spec),
        "operations reached"
    );
    let left_out: BTreeSet<Triple> = NOT_EXERCISED
        .iter()
        .map(|(m, p, status, _)| ((*m).to_owned(), (*p).to_owned(), *status))
        .collect();
    let unseen: BTreeSet<Triple> = documented.difference(&s.seen).cloned().collect();
    assert_eq!(
        unseen, left_out,
        "documented answers the scenario did not provoke"
    );
}

/// Every documented (method, path).
fn documented_operations(spec: &Spec) -> BTreeSet<(String, String)> {
    spec.documented()
        .into_iter()
        .map(|(m, p, _)| (m, p))
        .collect()
}
