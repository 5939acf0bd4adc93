//! Giving freed memory back to the OS after a burst (e.g. thousands of MCP sessions that ended).
//! The allocator is the binary's choice (`main.rs`), so the binary installs how memory is
//! given back ([`install`]); the library only says when ([`release`]). Each runtime thread does
//! it for itself the next time it goes idle ([`on_park`]): an allocator with per-thread heaps
//! (mimalloc) keeps blocks freed by other threads until their own thread collects, which an
//! idle server never does by itself. Nothing here runs on the request path.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// How the installed allocator gives this thread's freed memory back to the OS.
static COLLECT: OnceLock<fn()> = OnceLock::new();

/// Bumped by each [`release`]; a thread collects once per bump.
static EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The epoch this thread last collected at.
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Installs how freed memory is given back (once, before serving; later calls are ignored).
pub fn install(collect: fn()) {
    let _ = COLLECT.set(collect);
}

/// Asks every runtime thread to give its freed memory back when it next goes idle, and this
/// thread at once.
pub fn release() {
    EPOCH.fetch_add(1, Ordering::Relaxed);
    collect_if_asked();
}

/// For the runtime's `on_thread_park`: collects if a [`release`] came since this thread last did.
pub fn on_park() {
    collect_if_asked();
}

fn collect_if_asked() {
    let Some(collect) = COLLECT.get() else {
        return;
    };
    let epoch = EPOCH.load(Ordering::Relaxed);
    if SEEN.with(|seen| seen.replace(epoch)) != epoch {
        collect();
    }
}
