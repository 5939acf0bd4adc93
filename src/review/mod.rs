//! Tools for the people who write policies: fixture tests with coverage (`toolgate test`),
//! semantic diffs between two policy sets (`toolgate diff`) and per-policy explanations of one
//! decision (`toolgate explain`, `POST /v1/explain`).
//!
//! Everything here decides with the server's own functions (`authz`), so a fixture or an
//! explanation cannot disagree with what the sidecar does.

pub mod diff;
pub mod fixtures;
