//! toolgate: a localhost sidecar that decides, for every tool call an LLM agent wants to make,
//! whether it may run: allow, deny, or pending human approval, decided by Cedar policies.
//!
//! Architecture (one line per module; a request flows top to bottom):
//! - [`api`]: axum router, handlers, the one map from errors to HTTP status codes, and the
//!   connections (accept loop, cap, head/body/idle deadlines, bounded shutdown).
//! - [`auth`]: `Authorization: Bearer` → principal (hashed tokens file, JWT, dev mode).
//! - [`admin`]: the kill switch (every call denied while it is on).
//! - [`limits`]: token buckets per (principal, tool), per principal and global, before Cedar.
//! - [`anomaly`]: usage counters and anomaly signals, shown to Cedar as `context.usage` and
//!   `context.anomaly`; alerts.
//! - [`authz`]: the pure decision function: call + policy snapshot → verdict; explanations.
//! - [`tools`]: tool manifests → compiled tools (JSON Schema validator, Cedar argument type).
//! - [`exec`]: runs CLI-backed tools under the launcher: no shell, limits, Landlock, no orphans.
//! - [`globs`]: every glob-shaped setting (deny lists, tool names, output fields), one implementation.
//! - [`jail`]: opens files named by arguments below the service root, whatever the symlinks.
//! - [`policy`]: loads and validates policies, schema, entities and manifests into a snapshot;
//!   links templates for grants.
//! - [`grants`]: temporary access (templates linked until they expire), stored in sled.
//! - [`config`]: the TOML config file → validated settings.
//! - [`audit`], [`approvals`], [`storage`]: the hash-chained log and the approval queue in sled.
//! - [`metrics`]: the Prometheus recorder behind `/metrics`.
//! - [`redact`]: finds secrets, personal data and prompt-injection signals; the five gates
//!   (on demand, on every call's arguments, on reported results, on streams).
//! - [`review`]: policy fixtures and coverage, semantic policy diffs.
//! - [`sched`]: scheduler hints: short slices for serving threads, nice 19 for rebuilds.
//! - [`cli`]: the `toolgate` subcommands (`serve`, `validate`, `authorize`, `schema`, `audit`,
//!   `approvals`, `test`, `diff`, `explain`).

pub mod admin;
pub mod anomaly;
pub mod api;
pub mod app;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod cli;
pub mod clock;
pub mod config;
pub mod digest;
pub mod exec;
pub mod files;
pub mod gateway;
pub mod globs;
pub mod grants;
pub mod jail;
pub mod limits;
pub mod metrics;
pub mod paths;
pub mod policy;
pub mod redact;
pub mod reload;
pub mod review;
pub mod sched;
pub mod storage;
pub mod tools;
