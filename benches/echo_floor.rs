//! The floor for HTTP benchmarks: an axum endpoint that accepts the same `POST /v1/authorize`
//! and returns a fixed JSON decision without deciding anything, and `POST /v1/gates/output`
//! that answers with the body it got (what a gate costs at least: read and write it back).
//! `cargo run --release --example echo_floor -- 127.0.0.1:18182`
#![allow(missing_docs)]

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;

const ANSWER: &str = r#"{"decision":"allow","decision_id":"00000000-0000-7000-8000-000000000000","policy_revision":"sha256:0000000000000000","tool":"read_file","risk":"low","stage":"policy","reasons":["developers-read-write"],"errors":[],"limits":{"timeout_ms":5000,"max_output_bytes":10000000}}"#;

async fn answer(_body: Bytes) -> ([(header::HeaderName, &'static str); 1], &'static str) {
    ([(header::CONTENT_TYPE, "application/json")], ANSWER)
}

async fn echo(body: Bytes) -> ([(header::HeaderName, &'static str); 1], Bytes) {
    ([(header::CONTENT_TYPE, "application/json")], body)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18182".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let app = Router::new()
        .route("/v1/authorize", post(answer))
        .route("/v1/gates/output", post(echo))
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20));
    axum::serve(listener, app).await
}
