//! What toolgate's MCP gateway adds to a `tools/call`: the same upstream tool called straight
//! (an MCP client → server-everything over streamable HTTP) and through toolgate (client →
//! `/mcp` → decision, durable audit record, forward, output screen, result record → the same
//! upstream), alternating call by call at one connection each, in one run.
//! `cargo run --release --example mcp_overhead -- DIRECT_URL TOOLGATE_URL TOKEN [CALLS]`
//! (benches/mcp.sh starts both and runs this.) `MCP_REVISION`: `2026-07-28` (default: the
//! revision today's SDKs use by default, `server/discover` and no sessions) or `legacy` (the
//! `initialize` handshake and a session).
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(direct), Some(gate), Some(token)) = (args.get(1), args.get(2), args.get(3)) else {
        return Err("usage: mcp_overhead DIRECT_URL TOOLGATE_URL TOKEN [CALLS]".into());
    };
    let calls: usize = args.get(4).map_or(Ok(2000), |s| s.parse())?;
    // reqwest under rmcp uses rustls without a default provider: ring, as toolgate does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let modern = std::env::var("MCP_REVISION").as_deref() != Ok("legacy");
    let connect = |uri: &str, auth: Option<&String>| {
        let mut config = StreamableHttpClientTransportConfig::with_uri(uri.to_owned());
        if let Some(token) = auth {
            config = config.auth_header(token.clone());
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        async move {
            let running: RunningService<RoleClient, ()> = if modern {
                ().serve_with_lifecycle(
                    transport,
                    // The upstream may speak only the handshake (server-everything
                    // 2026.8.31 does): it is then reached the way it can be.
                    ClientLifecycleMode::Auto {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                        legacy_version: None,
                    },
                )
                .await?
            } else {
                ().serve(transport).await?
            };
            Ok::<_, Box<dyn std::error::Error>>(running)
        }
    };
    let direct_client = connect(direct, None).await?;
    let gate_client = connect(gate, Some(token)).await?;
    let revision = |c: &RunningService<RoleClient, ()>| {
        c.peer().peer_info().map_or_else(
            || "2026-07-28".to_owned(),
            |i| i.protocol_version.to_string(),
        )
    };
    println!(
        "revision: direct {}, through toolgate {}",
        revision(&direct_client),
        revision(&gate_client)
    );
    let call = |name: &str| {
        let mut p = CallToolRequestParams::new(name.to_owned());
        p.arguments = serde_json::json!({"message": "bench"}).as_object().cloned();
        p
    };
    // Warm up both paths (connections, caches, the upstream's JIT).
    for _ in 0..200 {
        direct_client.call_tool(call("echo")).await?;
        gate_client.call_tool(call("web.echo")).await?;
    }
    let mut a = Vec::with_capacity(calls);
    let mut b = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let r = direct_client.call_tool(call("echo")).await?;
        a.push(t.elapsed());
        if r.is_error == Some(true) {
            return Err(format!("direct call failed: {r:?}").into());
        }
        let t = Instant::now();
        let r = gate_client.call_tool(call("web.echo")).await?;
        b.push(t.elapsed());
        if r.is_error == Some(true) {
            return Err(format!("call through toolgate failed: {r:?}").into());
        }
    }
    a.sort();
    b.sort();
    println!("calls each: {calls} (alternating, one connection each)");
    println!(
        "direct to upstream:   p50 {:8.0} us   p99 {:8.0} us",
        us(pct(&a, 0.5)),
        us(pct(&a, 0.99))
    );
    println!(
        "through toolgate:     p50 {:8.0} us   p99 {:8.0} us",
        us(pct(&b, 0.5)),
        us(pct(&b, 0.99))
    );
    println!(
        "added by toolgate:    p50 {:8.0} us   p99 {:8.0} us   (ratio p50 {:.2})",
        us(pct(&b, 0.5)) - us(pct(&a, 0.5)),
        us(pct(&b, 0.99)) - us(pct(&a, 0.99)),
        us(pct(&b, 0.5)) / us(pct(&a, 0.5)).max(1.0)
    );
    direct_client.cancel().await?;
    gate_client.cancel().await?;
    Ok(())
}
