//! Console sessions: a random id (the cookie) stands for a human's credential, in memory
//! only, with a CSRF token of its own and an absolute lifetime. A restart signs everyone out.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use subtle::ConstantTimeEq;

/// Most sessions held at once; the oldest is dropped to make room.
const MAX_SESSIONS: usize = 4096;
/// Most sessions of one human (browser tabs); their oldest is dropped to make room, so no
/// human can push others out by signing in over and over.
const MAX_PER_PRINCIPAL: usize = 16;

/// A signed-in human.
#[derive(Clone)]
pub struct Session {
    /// The credential the session stands for (re-checked on every request).
    pub credential: String,
    /// `Human::"…"`, for the console to show.
    pub principal: String,
    /// Sent back in `X-Toolgate-CSRF` with every request the cookie stands for: the page
    /// keeps it in `sessionStorage`, which, unlike a cookie, no other port of the host sees.
    pub csrf: String,
    /// Unix ms after which the session is gone.
    pub expires_ms: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credential or the tokens.
        f.debug_struct("Session")
            .field("principal", &self.principal)
            .field("expires_ms", &self.expires_ms)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Whether `sent` is this session's token (constant time).
    pub fn csrf_matches(&self, sent: &[u8]) -> bool {
        sent.len() == self.csrf.len() && bool::from(sent.ct_eq(self.csrf.as_bytes()))
    }
}

/// The live sessions.
#[derive(Debug)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
    ttl_ms: u64,
}

/// 32 random bytes, hex.
fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex::encode(bytes))
}

impl Sessions {
    /// Sessions that last `ttl_ms` from sign-in.
    pub fn new(ttl_ms: u64) -> Sessions {
        Sessions {
            by_id: Mutex::new(HashMap::new()),
            ttl_ms,
        }
    }

    /// How long a session lasts, in seconds (the cookie's `Max-Age`).
    pub fn ttl_secs(&self) -> u64 {
        self.ttl_ms / 1000
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        self.by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a session for `credential`; `None` when no randomness is available.
    pub fn open(
        &self,
        credential: String,
        principal: String,
        now_ms: u64,
    ) -> Option<(String, Session)> {
        let id = random_token()?;
        let session = Session {
            credential,
            principal,
            csrf: random_token()?,
            expires_ms: now_ms.saturating_add(self.ttl_ms),
        };
        let mut map = self.map();
        map.retain(|_, s| s.expires_ms > now_ms);
        let theirs: Vec<(u64, String)> = map
            .iter()
            .filter(|(_, s)| s.principal == session.principal)
            .map(|(k, s)| (s.expires_ms, k.clone()))
            .collect();
        if theirs.len() >= MAX_PER_PRINCIPAL
            && let Some((_, oldest)) = theirs.iter().min()
        {
            map.remove(oldest);
        }
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires_ms)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The live session with this id.
    pub fn get(&self, id: &str, now_ms: u64) -> Option<Session> {
        let mut map = self.map();
        match map.get(id) {
            Some(s) if s.expires_ms > now_ms => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends a session.
    pub fn close(&self, id: &str) {
        self.map().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::Sessions;

    #[test]
    fn sessions_expire_and_csrf_must_match_exactly() {
        let s = Sessions::new(1000);
        let (id, session) = s
            .open("Bearer t".into(), "Human::\"a\"".into(), 10)
            .expect("randomness");
        assert_eq!(id.len(), 64);
        assert!(session.csrf_matches(session.csrf.as_bytes()));
        assert!(!session.csrf_matches(&session.csrf.as_bytes()[1..]));
        assert!(!session.csrf_matches(b""));
        assert!(s.get(&id, 500).is_some());
        assert!(s.get(&id, 1010).is_none());
        assert!(s.get(&id, 500).is_none(), "an expired session is removed");
        let (id, _) = s
            .open("Bearer t".into(), "p".into(), 0)
            .expect("randomness");
        s.close(&id);
        assert!(s.get(&id, 1).is_none());
    }
}
