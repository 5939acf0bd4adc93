//! The anomaly detectors: a pure state machine fed one observed decision at a time (with its
//! time), returning the signals it raises. It runs on the monitor's own thread, never on the
//! decision path; tests drive it directly with made-up times.

use std::collections::{HashMap, VecDeque};

use super::window::Window;
use crate::authz::{AnomalyKind, Outcome, Stage};
use crate::globs::NameGlobs;

const SECOND_NS: u64 = 1_000_000_000;
const MINUTE_NS: u64 = 60 * SECOND_NS;

/// A suspicious sequence: an allowed call to a `first` tool, then a call to a `then` tool
/// (allowed or not: the attempt is the signal) within `within_secs`.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceRule {
    /// Names the rule in alerts.
    pub name: String,
    /// Tool-name globs (`*` matches any run of characters; see [`NameGlobs`]).
    pub first: Vec<String>,
    /// Tool-name patterns.
    pub then: Vec<String>,
    /// The longest gap between the two calls.
    pub within_secs: u64,
}

/// Thresholds. The defaults are the ones documented in docs/configuration.md.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorConfig {
    /// A spike: calls in the last 60 s above `spike_factor` × the principal's mean per minute
    /// over the previous `baseline_minutes` minutes (judged only once the principal has been
    /// seen for that long)...
    pub spike_factor: f64,
    /// ...and at least this many calls in the last 60 s.
    pub spike_min_calls: u32,
    /// Minutes in the baseline.
    pub baseline_minutes: u32,
    /// Repeated failures: at least `failures` of the last `failures_window` calls denied.
    pub failures: u32,
    /// See `failures`.
    pub failures_window: u32,
    /// Violation rate: more than this many policy denials in 60 s.
    pub violations_per_minute: u32,
    /// Suspicious sequences.
    pub sequences: Vec<SequenceRule>,
    /// How long a raised signal stays visible to policies after it last fired.
    pub hold_secs: u64,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            spike_factor: 5.0,
            spike_min_calls: 60,
            baseline_minutes: 10,
            failures: 8,
            failures_window: 10,
            violations_per_minute: 5,
            sequences: Vec::new(),
            hold_secs: 300,
        }
    }
}

/// One observed decision.
#[derive(Debug, Clone)]
pub struct Observation {
    /// `Agent::"dev-agent"`.
    pub principal: String,
    /// The tool name as called (registered or not).
    pub tool: String,
    /// The answer.
    pub outcome: Outcome,
    /// Where it was decided.
    pub stage: Stage,
    /// When, in the monitor clock's nanoseconds.
    pub at_ns: u64,
}

/// A signal raised.
#[derive(Debug, Clone, PartialEq)]
pub struct Raised {
    /// Whose calls.
    pub principal: String,
    /// Which signal.
    pub kind: AnomalyKind,
    /// What was seen, for humans (no argument values).
    pub detail: String,
}

#[derive(Debug, Default)]
struct State {
    /// Calls per second.
    calls: Window,
    /// Calls per minute (the spike baseline).
    per_minute: Window,
    /// Policy denials per second.
    violations: Window,
    /// Whether each of the last calls was denied.
    recent: VecDeque<bool>,
    /// For each sequence rule, when its `first` tool was last called and allowed.
    first_seen: Vec<Option<u64>>,
    /// When this principal was first observed (spikes need a full baseline behind them).
    since_ns: Option<u64>,
    last_ns: u64,
}

/// The detectors' state for every principal seen in the last hour.
#[derive(Debug)]
pub struct Detector {
    config: DetectorConfig,
    /// Each sequence rule's `first` and `then` patterns, compiled once.
    patterns: Vec<(NameGlobs, NameGlobs)>,
    principals: HashMap<String, State>,
}

impl Detector {
    /// A detector with `config`.
    /// `[anomaly]` validation compiles every pattern first; one that does not compile here
    /// matches nothing.
    pub fn new(config: DetectorConfig) -> Self {
        let compile = |p: &[String]| NameGlobs::new(p).unwrap_or_else(|_| NameGlobs::none());
        Detector {
            patterns: config
                .sequences
                .iter()
                .map(|r| (compile(&r.first), compile(&r.then)))
                .collect(),
            config,
            principals: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    /// Feeds one decision; returns the signals it raises (each kind at most once).
    pub fn observe(&mut self, o: &Observation) -> Vec<Raised> {
        let c = &self.config;
        let now = o.at_ns;
        let st = self.principals.entry(o.principal.clone()).or_default();
        st.first_seen.resize(c.sequences.len(), None);
        let since = *st.since_ns.get_or_insert(now);
        st.last_ns = now;
        let (sec, min) = (now / SECOND_NS, now / MINUTE_NS);
        let mut raised = Vec::new();
        let mut raise = |kind: AnomalyKind, detail: String| {
            raised.push(Raised {
                principal: o.principal.clone(),
                kind,
                detail,
            });
        };

        st.calls.add(sec);
        st.per_minute.add(min);
        let last_minute = st.calls.recent(sec);
        let baseline_minutes = u64::from(c.baseline_minutes.max(1));
        let before = st
            .per_minute
            .sum(min.saturating_sub(baseline_minutes), min.saturating_sub(1));
        let baseline = f64::from(before) / baseline_minutes as f64;
        let has_baseline = now.saturating_sub(since) >= baseline_minutes * MINUTE_NS;
        if has_baseline
            && last_minute >= c.spike_min_calls
            && f64::from(last_minute) > c.spike_factor * baseline
        {
            raise(
                AnomalyKind::Spike,
                format!(
                    "{last_minute} calls in the last minute against a baseline of {baseline:.1} a minute"
                ),
            );
        }

        let denied = o.outcome == Outcome::Deny;
        // A 429 says more about the limits (possibly the global one, or the approval queue,
        // used up by other agents) than about this agent's calls: it is neither a failure
        // nor a success here.
        let limited = matches!(o.stage, Stage::RateLimit | Stage::ApprovalLimit);
        if !limited {
            st.recent.push_back(denied);
            while st.recent.len() > c.failures_window as usize {
                st.recent.pop_front();
            }
        }
        let failed = st.recent.iter().filter(|d| **d).count();
        if !limited && failed >= c.failures as usize {
            raise(
                AnomalyKind::RepeatedFailures,
                format!("{failed} of the last {} calls were denied", st.recent.len()),
            );
        }

        if denied && o.stage == Stage::Policy {
            st.violations.add(sec);
            let n = st.violations.recent(sec);
            if n > c.violations_per_minute {
                raise(
                    AnomalyKind::ViolationRate,
                    format!("{n} policy denials in the last minute"),
                );
            }
        }

        for ((rule, (first, then)), seen) in c
            .sequences
            .iter()
            .zip(&self.patterns)
            .zip(st.first_seen.iter_mut())
        {
            if let Some(at) = *seen
                && then.matches(&o.tool)
                && now.saturating_sub(at) <= rule.within_secs.saturating_mul(SECOND_NS)
            {
                raise(
                    AnomalyKind::Sequence,
                    format!(
                        "sequence `{}`: `{}` after a matching call",
                        rule.name, o.tool
                    ),
                );
                *seen = None;
            }
            if o.outcome == Outcome::Allow && first.matches(&o.tool) {
                *seen = Some(now);
            }
        }
        raised.dedup_by_key(|r| r.kind);
        raised
    }

    /// Forgets everything seen of `principal` (a human released it from quarantine: its
    /// history must not raise the same signal again at its next call).
    pub fn forget(&mut self, principal: &str) {
        self.principals.remove(principal);
    }

    /// Forgets principals idle for an hour.
    pub fn sweep(&mut self, now_ns: u64) {
        self.principals
            .retain(|_, s| now_ns.saturating_sub(s.last_ns) < 60 * MINUTE_NS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(tool: &str, outcome: Outcome, stage: Stage, at_s: u64) -> Observation {
        Observation {
            principal: "Agent::\"a\"".to_owned(),
            tool: tool.to_owned(),
            outcome,
            stage,
            at_ns: at_s * SECOND_NS,
        }
    }

    fn kinds(r: &[Raised]) -> Vec<AnomalyKind> {
        r.iter().map(|r| r.kind).collect()
    }

    #[test]
    fn spike_is_judged_against_the_principals_own_baseline() {
        let mut d = Detector::new(DetectorConfig::default());
        // Ten minutes at 20 calls a minute: the baseline.
        for minute in 0..10 {
            for i in 0..20 {
                let r = d.observe(&obs("t", Outcome::Allow, Stage::Policy, minute * 60 + i));
                assert!(r.is_empty(), "{r:?}");
            }
        }
        // Then 101 calls within ten seconds: above 5 × 20 and above 60.
        let mut fired = Vec::new();
        for i in 0..101 {
            fired.extend(d.observe(&obs("t", Outcome::Allow, Stage::Policy, 600 + i / 10)));
        }
        assert_eq!(kinds(&fired).first(), Some(&AnomalyKind::Spike));
        // A principal without ten minutes of history has no baseline to spike from.
        let mut fresh = Detector::new(DetectorConfig::default());
        for i in 0..200 {
            assert!(
                fresh
                    .observe(&obs("t", Outcome::Allow, Stage::Policy, i / 10))
                    .is_empty()
            );
        }
        assert!(fired[0].detail.contains("baseline of 20.0"), "{fired:?}");
    }

    #[test]
    fn repeated_failures_and_violation_rate() {
        let mut d = Detector::new(DetectorConfig::default());
        let mut seen = Vec::new();
        for i in 0..8 {
            // Validation denials: failures, not policy violations.
            seen.push(kinds(&d.observe(&obs(
                "t",
                Outcome::Deny,
                Stage::Validation,
                i,
            ))));
        }
        assert!(seen[..7].iter().all(Vec::is_empty));
        assert_eq!(seen[7], vec![AnomalyKind::RepeatedFailures]);

        // 429s are neither: another agent may have used up a shared limit.
        let mut d = Detector::new(DetectorConfig::default());
        for i in 0..50 {
            assert!(
                d.observe(&obs("t", Outcome::Deny, Stage::RateLimit, i))
                    .is_empty()
            );
        }

        let mut d = Detector::new(DetectorConfig::default());
        let mut seen = Vec::new();
        for i in 0..6 {
            seen.push(kinds(&d.observe(&obs(
                "t",
                Outcome::Deny,
                Stage::Policy,
                i * 5,
            ))));
            seen.push(kinds(&d.observe(&obs(
                "t",
                Outcome::Allow,
                Stage::Policy,
                i * 5,
            ))));
        }
        // Six policy denials in 30 s: the sixth is over 5 a minute; never 8 of 10 failed.
        assert_eq!(seen[10], vec![AnomalyKind::ViolationRate]);
        assert!(seen[..10].iter().all(Vec::is_empty), "{seen:?}");
        // A minute later the window has emptied.
        assert!(
            d.observe(&obs("t", Outcome::Deny, Stage::Policy, 100))
                .is_empty()
        );
    }

    #[test]
    fn sequences_need_an_allowed_first_step_within_the_window() {
        let config = DetectorConfig {
            sequences: vec![SequenceRule {
                name: "exfiltration".to_owned(),
                first: vec!["read_secret*".to_owned()],
                then: vec!["http_*".to_owned()],
                within_secs: 60,
            }],
            ..DetectorConfig::default()
        };
        let mut d = Detector::new(config);
        // A denied read read nothing.
        assert!(
            d.observe(&obs("read_secret", Outcome::Deny, Stage::Policy, 0))
                .is_empty()
        );
        assert!(
            d.observe(&obs("http_get", Outcome::Allow, Stage::Policy, 1))
                .is_empty()
        );
        // Too far apart.
        d.observe(&obs("read_secret", Outcome::Allow, Stage::Policy, 10));
        assert!(
            d.observe(&obs("http_get", Outcome::Allow, Stage::Policy, 71))
                .is_empty()
        );
        // Within the window, and even a denied attempt counts.
        d.observe(&obs("read_secrets", Outcome::Allow, Stage::Policy, 100));
        let r = d.observe(&obs("http_post", Outcome::Deny, Stage::Policy, 130));
        assert_eq!(kinds(&r), vec![AnomalyKind::Sequence]);
        assert!(r[0].detail.contains("exfiltration"));
    }
}
