//! Tools for the people who write policies: fixture tests with coverage (`toolgate test`) and
//! semantic diffs between two policy sets (`toolgate diff`). Explanations of one decision
//! (`toolgate explain`) live beside the decision, in `authz::explain`.
//!
//! Everything here decides with the server's own functions (`authz`), so a fixture or an
//! explanation cannot disagree with what the sidecar does.

mod case;
pub mod data;
pub mod diff;
pub mod fixtures;
mod sessions;
