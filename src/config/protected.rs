//! The protected set's part that the config names: the sidecar's own files, which no tool
//! and no program may read, write or change the metadata of. The data and lock directories
//! come from `[exec]` itself; this adds every other file the config makes the sidecar use.

use std::path::{Path, PathBuf};

use super::AuthConfig;
use crate::policy::Sources;

/// What the config names, resolved.
pub(super) struct Named<'a> {
    /// The policies and schemas directories (the file's, or the command line's).
    pub sources: &'a Sources,
    /// The config file itself.
    pub config: &'a Path,
    /// The data directory.
    pub data_dir: &'a Path,
    /// The token file and JWT keys.
    pub auth: &'a AuthConfig,
    /// `[audit] hmac_key_file`.
    pub audit_hmac_key_file: Option<PathBuf>,
    /// The approval and anomaly webhooks' secret files.
    pub webhook_secrets: Vec<PathBuf>,
    /// `[redaction] known_secrets_files`.
    pub known_secret_files: &'a [PathBuf],
    /// `[audit] ship_file`.
    pub audit_ship: Option<&'a crate::audit::ShipSettings>,
    /// `[mcp]`'s token file.
    pub mcp_token_file: Option<PathBuf>,
}

/// Every file and directory `named` makes the sidecar's own: policies, schemas, the config,
/// the audit keyring, and every credential, key and secret file; the audit ship file and its
/// rotated copies (a tool that could write them could forge what log shippers read, one that
/// could read them reads every decision).
pub(super) fn own_files(named: &Named<'_>) -> Vec<PathBuf> {
    let mut out = vec![
        named.sources.policies_dir.clone(),
        named.sources.schemas_dir.clone(),
        named.config.to_path_buf(),
        // Inside the data directory already; named so /readyz lists the audit keys.
        crate::audit::keys::keyring_path(named.data_dir),
    ];
    out.extend(named.auth.tokens_file.iter().cloned());
    out.extend(named.audit_hmac_key_file.iter().cloned());
    out.extend(named.webhook_secrets.iter().cloned());
    if let Some(j) = &named.auth.jwt {
        out.extend(j.key_files().cloned());
    }
    out.extend(named.known_secret_files.iter().cloned());
    out.extend(
        named
            .audit_ship
            .iter()
            .flat_map(|s| crate::audit::ShipSettings::files(s)),
    );
    out.extend(named.mcp_token_file.iter().cloned());
    out
}
