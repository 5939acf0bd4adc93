//! Integration tests, built as one binary. Everything goes through a public surface: the HTTP
//! router (no socket), the `toolgate` binary, or the library's decision function.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![allow(missing_docs)]

mod anomaly;
mod app;
mod approval_retention;
mod approvals;
mod audit;
mod audit_keys;
mod auth;
mod bounds;
mod callgate;
mod cedar_warnings;
mod cli;
mod connections;
mod console;
mod container;
mod corpus;
mod crash;
mod decisions;
mod durability;
mod error_codes;
mod examples;
mod exec;
mod explain;
mod files;
mod files_jail;
mod first_run;
mod fleet;
mod footprint;
mod gates;
mod grants;
mod hardening;
mod helpers;
mod http;
mod integrity;
mod jail;
mod kill_switch;
mod layers;
mod leaks;
mod ledger;
mod lifecycle;
mod limits;
mod mcp;
mod metadata;
mod metrics;
mod oauth;
mod openapi;
mod operators;
mod paths_agree;
mod pending;
mod process;
mod props;
mod provenance;
mod quarantine;
mod readme;
mod regressions;
mod reload;
mod reload_entries;
mod reload_once;
mod results;
mod review;
mod run_memory;
mod server;
mod shipping;
mod slicing;
mod stream;
mod traces;
mod typing;
mod webhook;
