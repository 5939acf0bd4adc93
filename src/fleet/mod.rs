//! Shared state for a fleet of sidecars, in Redis: rate limits, the kill switch, quarantines
//! and grants, so an agent spread over N pods gets one quota, and one switch stops them all.
//!
//! Owns: the connection ([`Fleet`]), the limit script (`take.lua`: every limit of a call taken
//! atomically on Redis's clock, or none), and the poll that brings the switch, the quarantine
//! list and the grants into this sidecar ([`Fleet::poll`]). It does not own what the state
//! means: [`crate::admin`] and [`crate::grants`] keep the live copies the decision path reads,
//! and the gateway decides when to ask and what to answer.
//!
//! Fail closed: a sidecar whose last good poll is older than `stale_ms`, or whose limit script
//! fails, denies (stage `shared_state`); its local limits still apply first. Off by default:
//! without `[fleet]` nothing here runs and every sidecar keeps its own state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::admin::{Admin, KillSwitch, Quarantined};
use crate::grants::{Grant, Grants};
use crate::limits::{Limited, Per, Quota, Scope, Slot};

/// `[fleet]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// A file holding the password (instead of one in the URL).
    pub password_file: Option<std::path::PathBuf>,
    /// Prefix of every key (`toolgate:`): one Redis can hold several fleets.
    pub prefix: String,
    /// Longest wait for one Redis answer.
    pub timeout: Duration,
    /// How often the switch, quarantines and grants are read.
    pub poll: Duration,
    /// How old the last good read may be before calls are denied.
    pub stale: Duration,
}

/// Redis could not be reached or answered something else than expected; nothing was taken
/// or changed by this call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shared state (Redis): {0}")]
pub struct FleetError(pub String);

fn redis_err(e: redis::RedisError) -> FleetError {
    FleetError(e.to_string())
}

/// The connection to the fleet's Redis, and how fresh this sidecar's copy of it is.
pub struct Fleet {
    conn: redis::aio::ConnectionManager,
    settings: FleetSettings,
    take: redis::Script,
    /// One shared change, unless a newer one is there (`change.lua`).
    change: redis::Script,
    started: Instant,
    /// Ms after `started` of the last good poll; 0 before the first.
    last_ok_ms: AtomicU64,
    /// Redis calls that failed (`toolgate_shared_state_failures_total`).
    failures: AtomicU64,
    /// The fleet's change token at the last complete read (`Some(None)`: Redis held none),
    /// and when that was.
    seen: Mutex<(Option<Option<String>>, Instant)>,
    /// Changes made here that Redis did not take yet, oldest first.
    pending: Mutex<Vec<Change>>,
    /// Adds this sidecar's counts back after Redis lost the fleet's (`restore.lua`).
    restore: redis::Script,
    /// This sidecar's own calls in the current windows, per limit key: what it adds back.
    counted: Mutex<Counted>,
    /// The counter epoch this sidecar added its counts back to (empty: none yet); held while
    /// adding, so that they are added once.
    epoch: tokio::sync::Mutex<String>,
}

/// Window lengths in ms: minute, hour, day (as `take.lua`).
const WINDOWS: [u64; 3] = [60_000, 3_600_000, 86_400_000];

/// This sidecar's calls per limit key and window: `[(window number, calls); 3]` for minute,
/// hour and day (calls 0: none counted).
type Counted = std::collections::HashMap<String, [(u64, u64); 3]>;

/// A change made on this sidecar (recorded and in force here) for the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The switch as set.
    KillSwitch(KillSwitch),
    /// An agent (uid) quarantined (`Some`), or released at the given unix ms.
    Quarantine(String, Result<Quarantined, u64>),
    /// A grant made (`Some`) or ended.
    Grant(String, Option<Grant>),
}

impl Change {
    /// What it changes: a later change to the same thing replaces a pending one.
    fn target(&self) -> (u8, &str) {
        match self {
            Change::KillSwitch(_) => (0, ""),
            Change::Quarantine(p, _) => (1, p),
            Change::Grant(id, _) => (2, id),
        }
    }
}

/// The JSON Redis keeps for `value`.
fn to_json(value: &impl serde::Serialize) -> Result<String, FleetError> {
    serde_json::to_string(value).map_err(|e| FleetError(e.to_string()))
}

/// The switch, quarantines and grants are read in full at least this often, even when the
/// change count has not moved (a hand edit in Redis that did not count itself).
const FULL_READ: Duration = Duration::from_secs(10);

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("prefix", &self.settings.prefix)
            .finish_non_exhaustive()
    }
}

/// How this sidecar stands with the fleet's Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FleetStatus {
    /// Read within `stale_ms`: calls are decided (otherwise denied at `shared_state`).
    pub fresh: bool,
    /// Since the last good read (`None`: none since start).
    pub last_read_ms_ago: Option<u64>,
    /// Redis calls that failed since start.
    pub failures: u64,
}

/// What a shared limit said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Every limit gave one unit: the tightest, as it stands after this call.
    Passed(Quota),
    /// A limit refused; nothing was taken.
    Refused(Limited),
}

impl Fleet {
    /// A fleet on `settings`; connects on first use and reconnects by itself. Needs a Tokio
    /// runtime.
    pub fn connect(settings: FleetSettings) -> Result<Fleet, FleetError> {
        use redis::IntoConnectionInfo as _;
        let mut info = settings
            .url
            .as_str()
            .into_connection_info()
            .map_err(redis_err)?;
        if let Some(file) = &settings.password_file {
            let password = std::fs::read_to_string(file).map_err(|e| {
                FleetError(format!(
                    "cannot read `fleet.password_file` `{}`: {e}",
                    file.display()
                ))
            })?;
            let redis = info
                .redis_settings()
                .clone()
                .set_password(password.trim_end());
            info = info.set_redis_settings(redis);
        }
        let client = redis::Client::open(info).map_err(redis_err)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.timeout))
            .set_response_timeout(Some(settings.timeout))
            .set_number_of_retries(1)
            .set_max_delay(settings.poll);
        let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, config)
            .map_err(redis_err)?;
        Ok(Fleet {
            conn,
            settings,
            take: redis::Script::new(include_str!("take.lua")),
            change: redis::Script::new(include_str!("change.lua")),
            started: Instant::now(),
            last_ok_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            seen: Mutex::new((None, Instant::now())),
            pending: Mutex::new(Vec::new()),
            restore: redis::Script::new(include_str!("restore.lua")),
            counted: Mutex::new(Counted::new()),
            epoch: tokio::sync::Mutex::new(String::new()),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &FleetSettings {
        &self.settings
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.settings.prefix)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// `Ok` while the last good poll is at most `stale_ms` old; otherwise how old it is, in
    /// ms (`None`: never read since start).
    pub fn fresh(&self) -> Result<(), Option<u64>> {
        let last = self.last_ok_ms.load(Ordering::Acquire);
        if last == 0 {
            return Err(None);
        }
        let age = self.elapsed_ms().saturating_sub(last);
        if u128::from(age) > self.settings.stale.as_millis() {
            return Err(Some(age));
        }
        Ok(())
    }

    /// For `/readyz` and `/metrics`.
    pub fn status(&self) -> FleetStatus {
        let last = self.last_ok_ms.load(Ordering::Acquire);
        FleetStatus {
            fresh: self.fresh().is_ok(),
            last_read_ms_ago: (last > 0).then(|| self.elapsed_ms().saturating_sub(last)),
            failures: self.failures(),
        }
    }

    /// Redis calls that failed since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Runs `op` on a connection with the configured timeout; counts failures.
    async fn run<T, F>(
        &self,
        op: impl FnOnce(redis::aio::ConnectionManager) -> F,
    ) -> Result<T, FleetError>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let out = match tokio::time::timeout(self.settings.timeout, op(self.conn.clone())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(redis_err(e)),
            Err(_) => Err(FleetError(format!(
                "no answer within {} ms",
                self.settings.timeout.as_millis()
            ))),
        };
        if out.is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    fn slot_key(&self, slot: &Slot) -> String {
        match slot.scope {
            Scope::Global => self.key("rl:g"),
            _ => self.key(&format!("rl:{}", slot.key)),
        }
    }

    /// Takes one unit from every shared limit in `slots`, or none (one script, atomic in
    /// Redis). `Ok(None)` when `slots` is empty. When Redis lost the fleet's counters (it
    /// restarted empty), this sidecar first adds back its own calls of the current windows,
    /// as every sidecar does on its next call, so the fleet's counts are rebuilt rather than
    /// started from zero.
    pub async fn take(&self, slots: &[Slot]) -> Result<Option<Taken>, FleetError> {
        if slots.is_empty() {
            return Ok(None);
        }
        for _ in 0..3 {
            let known = self.epoch.lock().await.clone();
            let mut call = self.take.prepare_invoke();
            for slot in slots {
                let r = &slot.rate;
                call.key(self.slot_key(slot))
                    .arg(r.per_second.unwrap_or(0.0))
                    .arg(r.burst.unwrap_or(0))
                    .arg(r.per_minute.unwrap_or(0))
                    .arg(r.per_hour.unwrap_or(0))
                    .arg(r.per_day.unwrap_or(0));
            }
            call.key(self.key("rl:epoch")).arg(known);
            let answer: Vec<i64> = self
                .run(|mut c| async move { call.invoke_async(&mut c).await })
                .await?;
            match answer.as_slice() {
                [2, epoch, ..] => self.add_back(*epoch).await?,
                _ => return self.taken(slots, &answer).map(Some),
            }
        }
        Err(FleetError(
            "the fleet's limit counters kept changing epoch; nothing was taken".to_owned(),
        ))
    }

    /// Adds this sidecar's calls of the current windows back to the fleet's counters under
    /// `epoch` (once per epoch), and knows the epoch from then on.
    async fn add_back(&self, epoch: i64) -> Result<(), FleetError> {
        let epoch = epoch.to_string();
        let mut known = self.epoch.lock().await;
        if *known == epoch {
            return Ok(());
        }
        let counted: Vec<(String, [(u64, u64); 3])> = self
            .counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, w)| w.iter().any(|(_, c)| *c > 0))
            .map(|(k, w)| (k.clone(), *w))
            .collect();
        let calls: u64 = counted
            .iter()
            .flat_map(|(_, w)| w.iter().map(|(_, c)| *c))
            .sum();
        for chunk in counted.chunks(256) {
            let mut call = self.restore.prepare_invoke();
            for (key, windows) in chunk {
                call.key(key);
                for (w, c) in windows {
                    call.arg(*w).arg(*c);
                }
            }
            call.key(self.key("rl:epoch")).arg(&epoch);
            let done: i64 = self
                .run(|mut c| async move { call.invoke_async(&mut c).await })
                .await?;
            if done != 1 {
                return Err(FleetError(
                    "the fleet's limit counters changed epoch while this sidecar added its counts back; nothing was taken".to_owned(),
                ));
            }
        }
        if !known.is_empty() {
            tracing::warn!(
                epoch,
                keys = counted.len(),
                calls,
                "the fleet's Redis lost its limit counters (restarted empty?); this sidecar added back its own calls of the current windows"
            );
        }
        *known = epoch;
        Ok(())
    }

    /// Counts one call of `slots` passed at Redis time `now_ms` in this sidecar's windows.
    fn count(&self, slots: &[Slot], now_ms: u64) {
        let mut counted = self
            .counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for slot in slots {
            let r = &slot.rate;
            let limits = [r.per_minute, r.per_hour, r.per_day];
            if limits.iter().all(Option::is_none) {
                continue;
            }
            let entry = counted.entry(self.slot_key(slot)).or_default();
            for ((len, limit), (w, c)) in WINDOWS.iter().zip(limits).zip(entry.iter_mut()) {
                if limit.is_none() {
                    continue;
                }
                let now_w = now_ms / len;
                if *w == now_w {
                    *c += 1;
                } else {
                    (*w, *c) = (now_w, 1);
                }
            }
        }
        // Keys whose every window has passed go (the day's at most a day later).
        if counted.len() > 4096 {
            counted.retain(|_, ws| {
                ws.iter()
                    .zip(WINDOWS)
                    .any(|((w, c), len)| *c > 0 && *w == now_ms / len)
            });
        }
    }

    /// What the take script's `answer` says about `slots`; a passed take is counted.
    fn taken(&self, slots: &[Slot], answer: &[i64]) -> Result<Taken, FleetError> {
        let bad = || FleetError(format!("the limit script answered {answer:?}"));
        let &[taken, index, per, limit, remaining, reset, wait, now] = answer else {
            return Err(bad());
        };
        let slot = usize::try_from(index - 1)
            .ok()
            .and_then(|i| slots.get(i))
            .ok_or_else(bad)?;
        let per = match per {
            0 => Per::Bucket,
            1 => Per::Minute,
            2 => Per::Hour,
            3 => Per::Day,
            _ => return Err(bad()),
        };
        let n32 = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        let n64 = |v: i64| u64::try_from(v.max(0)).unwrap_or(0);
        let quota = Quota {
            scope: slot.scope,
            per,
            limit: n32(limit),
            remaining: n32(remaining),
            reset_secs: n64(reset),
        };
        Ok(match taken {
            1 => {
                self.count(slots, n64(now));
                Taken::Passed(quota)
            }
            0 => Taken::Refused(Limited {
                quota,
                retry_after_secs: n64(wait).max(1),
            }),
            _ => return Err(bad()),
        })
    }

    /// Shares `change` with the fleet. If Redis does not take it, it is kept and sent again
    /// at each round until Redis does (a later change to the same thing replaces it), and
    /// the error says so.
    pub async fn publish(&self, change: Change) -> Result<(), FleetError> {
        match self.send(&change).await {
            Ok(()) => {
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|p| p.target() != change.target());
                Ok(())
            }
            Err(e) => {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                pending.retain(|p| p.target() != change.target());
                pending.push(change);
                Err(e)
            }
        }
    }

    /// Sends the changes Redis did not take before, oldest first; stops at the first that
    /// fails.
    async fn send_pending(&self) -> Result<(), FleetError> {
        loop {
            let next = self
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .first()
                .cloned();
            let Some(change) = next else { return Ok(()) };
            self.send(&change).await?;
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.first() == Some(&change) {
                pending.remove(0);
            }
        }
    }

    /// Writes `change` with the change script: not over a newer value (by `at_ms`, the
    /// clock of the sidecar that made each), and with a fresh change token.
    async fn send(&self, change: &Change) -> Result<(), FleetError> {
        let (key, op, field, value, at_ms) = match change {
            Change::KillSwitch(s) => ("kill_switch", "set", "", to_json(s)?, s.at_ms),
            // The first entry is kept, as on one sidecar.
            Change::Quarantine(p, Ok(q)) => {
                ("quarantine", "hsetnx", p.as_str(), to_json(q)?, q.at_ms)
            }
            Change::Quarantine(p, Err(at_ms)) => {
                ("quarantine", "hdel", p.as_str(), String::new(), *at_ms)
            }
            Change::Grant(id, Some(g)) => ("grants", "hset", id.as_str(), to_json(g)?, 0),
            Change::Grant(id, None) => ("grants", "hdel", id.as_str(), String::new(), 0),
        };
        let token = uuid::Uuid::new_v4().to_string();
        let mut call = self.change.prepare_invoke();
        call.key(self.key(key))
            .key(self.key("version"))
            .arg(op)
            .arg(field)
            .arg(value)
            .arg(at_ms)
            .arg(token);
        let written: i64 = self
            .run(|mut c| async move { call.invoke_async(&mut c).await })
            .await?;
        if written == 0 {
            tracing::info!(
                key,
                field,
                "a newer shared value was already there; kept it"
            );
        }
        Ok(())
    }

    /// One round: sends the changes Redis has not taken yet and the quarantines this
    /// sidecar entered on its own (anomalies); then reads the fleet's change token and, when
    /// it moved (or every 10 s anyway), the switch, the quarantine list and the
    /// grants, and puts them in force here. Held in turn with humans' changes
    /// (`Admin::changing`), so a read cannot undo a change made while it was on its way. A
    /// good round makes this sidecar fresh. The agents the fleet released (their history
    /// here should be forgotten, as on the sidecar that released them).
    pub async fn poll(
        &self,
        admin: &Admin,
        grants: Option<&Grants>,
    ) -> Result<Vec<String>, FleetError> {
        let _serial = admin.changing().await;
        // Before anything is sent: a grant change that ends meanwhile moves the mark.
        let mark = grants.map(Grants::mark);
        self.send_pending().await?;
        let mut unshared = admin.quarantine().unshared().into_iter();
        while let Some(q) = unshared.next() {
            let change = Change::Quarantine(q.principal.clone(), Ok(q.clone()));
            if let Err(e) = self.send(&change).await {
                admin.quarantine().unshare(q);
                unshared.for_each(|rest| admin.quarantine().unshare(rest));
                return Err(e);
            }
        }
        let version_key = self.key("version");
        let token: Option<String> = self
            .run(
                |mut c| async move { redis::cmd("GET").arg(version_key).query_async(&mut c).await },
            )
            .await?;
        let (seen, read_at) = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if seen.as_ref() == Some(&token) && read_at.elapsed() < FULL_READ {
            self.last_ok_ms.store(self.elapsed_ms(), Ordering::Release);
            return Ok(Vec::new());
        }
        if let (Some(Some(_)), None) = (&seen, &token) {
            // Redis held changes and now holds none: it restarted empty or failed over to a
            // replica that lacks them. Write back what this sidecar holds, then read.
            tracing::error!("the fleet's Redis lost its shared state; writing back this sidecar's");
            self.write_back(admin, grants).await;
            self.send_pending().await?;
            *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = (None, Instant::now());
            return Ok(Vec::new());
        }
        let keys = [
            self.key("version"),
            self.key("kill_switch"),
            self.key("quarantine"),
            self.key("grants"),
        ];
        type Read = (
            Option<String>,
            Option<String>,
            HashMap<String, String>,
            HashMap<String, String>,
        );
        let (token, switch, quarantined, granted): Read = self
            .run(|mut c| async move {
                let [v, s, q, g] = keys;
                redis::pipe()
                    .atomic()
                    .cmd("GET")
                    .arg(v)
                    .cmd("GET")
                    .arg(s)
                    .cmd("HGETALL")
                    .arg(q)
                    .cmd("HGETALL")
                    .arg(g)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        // A value toolgate cannot read stops this sidecar (fail closed), naming it.
        let parse_err = |what: &str, field: &str, e: serde_json::Error| {
            FleetError(format!(
                "the shared {what} `{}` does not parse ({e}); fix or remove it in Redis",
                field.chars().take(100).collect::<String>()
            ))
        };
        // No shared switch yet: this sidecar's own stands.
        if let Some(json) = switch {
            let switch: KillSwitch =
                serde_json::from_str(&json).map_err(|e| parse_err("kill switch", "", e))?;
            admin.adopt_kill_switch(switch);
        }
        let quarantined = quarantined
            .iter()
            .map(|(p, json)| {
                serde_json::from_str::<Quarantined>(json)
                    .map_err(|e| parse_err("quarantine of", p, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let released = admin.quarantine().adopt(quarantined);
        let mut complete = true;
        if let (Some(grants), Some(mark)) = (grants, mark) {
            let granted = granted
                .iter()
                .map(|(id, json)| {
                    serde_json::from_str::<Grant>(json).map_err(|e| parse_err("grant", id, e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            // A grant change of this sidecar still on its way: the read may predate it.
            complete = !self.grants_pending()
                && grants
                    .adopt(granted, crate::clock::now_ms(), mark)
                    .await
                    .map_err(|e| FleetError(e.to_string()))?
                    .is_some();
        }
        // A read a change of this sidecar overlapped is read again next round.
        if complete {
            *self.seen.lock().unwrap_or_else(PoisonError::into_inner) =
                (Some(token), Instant::now());
        }
        self.last_ok_ms.store(self.elapsed_ms(), Ordering::Release);
        Ok(released)
    }

    fn grants_pending(&self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|c| matches!(c, Change::Grant(..)))
    }

    /// Queues this sidecar's switch (when one was ever set), quarantines and grants for
    /// Redis, which lost them. Values already there stay (quarantines and the switch are
    /// written only over older ones).
    async fn write_back(&self, admin: &Admin, grants: Option<&Grants>) {
        let mut changes = Vec::new();
        let (switch, _) = admin.kill_switch();
        if switch.at_ms > 0 {
            changes.push(Change::KillSwitch(switch));
        }
        for q in admin.quarantine().list() {
            changes.push(Change::Quarantine(q.principal.clone(), Ok(q)));
        }
        if let Some(grants) = grants {
            for listed in grants.list().await {
                changes.push(Change::Grant(listed.grant.id.clone(), Some(listed.grant)));
            }
        }
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for change in changes {
            if !pending.iter().any(|p| p.target() == change.target()) {
                pending.push(change);
            }
        }
    }
}

/// Polls every `poll` until the task is dropped; logs the first failure of a run of them and
/// the recovery.
pub async fn run(
    fleet: std::sync::Arc<Fleet>,
    admin: std::sync::Arc<Admin>,
    grants: Option<std::sync::Arc<Grants>>,
    released: impl Fn(&str) + Send + 'static,
) {
    let mut every = tokio::time::interval(fleet.settings.poll);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        every.tick().await;
        let polled = fleet.poll(&admin, grants.as_deref()).await;
        if let Ok(agents) = &polled {
            agents.iter().for_each(|a| released(a));
        }
        match polled.map(|_| ()) {
            Ok(()) if failing => {
                failing = false;
                tracing::warn!("shared state (Redis) read again; calls are decided again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::error!(error = %e, stale_ms = fleet.settings.stale.as_millis(), "shared state unreachable; calls are denied once it is stale");
            }
            Err(_) => {}
        }
    }
}
