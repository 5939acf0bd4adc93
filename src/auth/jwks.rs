//! Keys fetched from an issuer's JWKS URL: fetched at start, again every refresh interval, and
//! at once when a token names a key id not held (key rotation), at most once per
//! [`FETCH_GAP`] so a stream of made-up key ids cannot turn into a stream of fetches.
//!
//! Bounded: a fetch takes at most [`FETCH_TIMEOUT`], reads at most [`MAX_BODY`] bytes and
//! keeps at most [`MAX_KEYS`] keys; no redirects are followed. Fails closed: until a fetch
//! has succeeded there are no keys and every token is refused with the fetch's error; after
//! one, a failed fetch keeps the keys already held (the issuer being down does not lock out
//! tokens it signed with them), and rotation waits for the issuer to answer again.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::JwkSet;

use super::keys::{Key, keys_from_set};
use crate::config::JwksUrl;

/// The least time between two fetches that a token asked for.
pub(super) const FETCH_GAP: Duration = Duration::from_secs(5);
/// The bound on one fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest key set document read.
const MAX_BODY: u64 = 256 * 1024;
/// The most keys kept from one document.
const MAX_KEYS: usize = 64;

#[derive(Debug, Default)]
struct Fetched {
    /// When the last fetch started.
    at: Option<Instant>,
    /// Why the last fetch failed, if it did.
    error: Option<String>,
}

/// The key set of one JWKS URL, as last fetched.
pub(super) struct RemoteKeys {
    url: JwksUrl,
    agent: ureq::Agent,
    keys: ArcSwap<Vec<Key>>,
    /// Held while a fetch runs, so callers that need one wait for it instead of starting more.
    fetched: Mutex<Fetched>,
}

impl std::fmt::Debug for RemoteKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteKeys")
            .field("url", &self.url.as_str())
            .field("keys", &self.keys.load().len())
            .finish_non_exhaustive()
    }
}

impl RemoteKeys {
    /// Fetches the keys once (a failure is logged, not fatal: tokens are refused until a
    /// fetch succeeds) and keeps them fresh every `refresh` from a background thread.
    pub(super) fn start(url: JwksUrl, refresh: Duration) -> Arc<RemoteKeys> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(FETCH_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let remote = Arc::new(RemoteKeys {
            url,
            agent,
            keys: ArcSwap::from_pointee(Vec::new()),
            fetched: Mutex::new(Fetched::default()),
        });
        remote.refresh(Duration::ZERO);
        let weak = Arc::downgrade(&remote);
        let spawned = std::thread::Builder::new()
            .name("toolgate-jwks".to_owned())
            .spawn(move || keep_fresh(&weak, refresh));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the JWKS refresher; keys are fetched only when a token needs one");
        }
        remote
    }

    /// The keys held now.
    pub(super) fn keys(&self) -> Arc<Vec<Key>> {
        self.keys.load_full()
    }

    /// The URL, for messages.
    pub(super) fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Fetches again unless the last fetch started less than `gap` ago. Answers why the
    /// last fetch failed, if it did.
    pub(super) fn refresh(&self, gap: Duration) -> Option<String> {
        let mut fetched = match self.fetched.lock() {
            Ok(f) => f,
            Err(poisoned) => poisoned.into_inner(),
        };
        if fetched.at.is_some_and(|at| at.elapsed() < gap) {
            return fetched.error.clone();
        }
        fetched.at = Some(Instant::now());
        let got = blocking(|| self.fetch());
        fetched.error = match got {
            Ok(keys) => {
                tracing::info!(url = self.url.as_str(), keys = keys.len(), "JWKS fetched");
                self.keys.store(Arc::new(keys));
                None
            }
            Err(e) => {
                tracing::warn!(url = self.url.as_str(), error = %e, held = self.keys.load().len(), "JWKS fetch failed; keeping the keys held");
                Some(e)
            }
        };
        fetched.error.clone()
    }

    fn fetch(&self) -> Result<Vec<Key>, String> {
        let mut resp = self
            .agent
            .get(self.url.as_str())
            .header("Accept", "application/json")
            .call()
            .map_err(|e| format!("could not reach it: {e}"))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("it answered HTTP {}", status.as_u16()));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| format!("could not read its answer (at most {MAX_BODY} bytes): {e}"))?;
        let set: JwkSet = serde_json::from_slice(&body)
            .map_err(|e| format!("its answer is not a JWK set: {e}"))?;
        let mut keys = keys_from_set(&set)?;
        keys.truncate(MAX_KEYS);
        if keys.is_empty() {
            return Err("its key set has no RS256, EdDSA or HS256 key".to_owned());
        }
        Ok(keys)
    }
}

/// Runs `f`, telling a multi-threaded tokio runtime that this worker blocks meanwhile.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn keep_fresh(remote: &Weak<RemoteKeys>, every: Duration) {
    loop {
        std::thread::sleep(every);
        let Some(remote) = remote.upgrade() else {
            return;
        };
        remote.refresh(every / 2);
    }
}
