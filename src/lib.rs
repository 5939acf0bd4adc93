//! toolgate: a localhost sidecar that decides, for every tool call an LLM agent wants to make,
//! whether it may run: allow, deny, or pending human approval, decided by Cedar policies.
//!
//! Modules by layer. A module uses modules of its own layer or the layers below it, never
//! above, and no two top-level modules use each other, directly or around a loop
//! (`tests/it/layers.rs` reads every `crate::` path and checks both):
//! - front ends: [`cli`] (the `toolgate` subcommands) → [`app`] (startup: `App::build`,
//!   `App::serve`) → [`api`] (HTTP: routes, the status table, connections) → [`console`] (the
//!   approver console at `/ui`: sign-in, sessions, CSRF) → [`mcp`] (the MCP server side,
//!   stdio and `/mcp`).
//! - pipeline: [`gateway`] (deciding a call, settling approvals, screening, running tools, the
//!   background jobs; no HTTP).
//! - domain: [`auth`] (credentials → principal), [`authz`] (call + snapshot → verdict),
//!   [`policy`] (the snapshot: policies, schema, entities, tools), [`reload`] (the live set:
//!   reload, watch, remember, hold), [`review`] (fixtures, semantic diffs), [`grants`],
//!   [`approvals`], [`admin`] (kill switch, quarantine), [`anomaly`], [`limits`], [`redact`]
//!   (detectors and gates), [`tools`] (manifests, executor specs, built-in kinds), [`exec`]
//!   (running programs under the launcher), [`files`] (the built-in file tools), [`jail`]
//!   (opening files below the root), [`audit`] (the hash-chained log and its ledger),
//!   [`storage`] (the data directory), [`metrics`], [`config`] (the TOML file → settings),
//!   [`upstream`] (MCP upstreams: connections, descriptors, sync), [`provenance`] (what each
//!   conversation's user said and tools returned), [`fleet`] (limits, kill switch, quarantines
//!   and grants shared through Redis).
//! - leaves: [`canon`] (canonical e-mail addresses, URLs, IBANs, tokens), [`clock`], [`codes`] (the error-code vocabulary), [`digest`] (HMAC), [`fold`] (canonical text: invisible characters, compatibility forms, look-alikes), [`globs`], [`memory`] (giving freed memory back to the OS), [`owners`] (owners and modes of the sidecar's own files), [`paths`] (normalization), [`sched`], [`shell`] (what a shell command line runs), [`telemetry`] (OpenTelemetry traces, W3C trace context).

pub mod admin;
pub mod anomaly;
pub mod api;
pub mod app;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod canon;
pub mod cli;
pub mod clock;
pub mod codes;
pub mod config;
pub mod console;
pub mod digest;
pub mod exec;
pub mod files;
pub mod fleet;
pub mod fold;
pub mod gateway;
pub mod globs;
pub mod grants;
pub mod jail;
pub mod limits;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod owners;
pub mod paths;
pub mod policy;
pub mod provenance;
pub mod redact;
pub mod reload;
pub mod review;
pub mod sched;
pub mod shell;
pub mod storage;
pub mod telemetry;
pub mod tools;
pub mod upstream;
