//! The live policy set: [`PolicyStore`] holds the snapshot in force and swaps whole snapshots
//! on reload (a bad edit never replaces the last good set); [`PolicyWatcher`] watches the
//! files; the last good set is remembered in sled for a restart whose files do not load; a
//! widening change can be held for a human's approval (reviewed with `review::diff`).

mod remember;
mod store;
mod watch;

pub(crate) use remember::SledGoodSets;
pub use remember::{GoodSets, RememberError, StoredSet, remember_effect};
pub use store::{
    Held, HoldError, Origin, PolicyStore, ReloadOutcome, ReloadStats, Review, StoreOptions,
    Widening,
};
pub use watch::{PolicyWatcher, WatchOptions};
