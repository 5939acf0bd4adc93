//! What a limit is: a token bucket, fixed windows, or both ([`Rate`]), at each level
//! ([`LimitConfig`]); as written in the config and in tool manifests, and checked once.

use serde::{Deserialize, Serialize};

/// A fixed window's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// A token bucket (not a window).
    Bucket,
    /// On the minute.
    Minute,
    /// On the hour.
    Hour,
    /// At 00:00 UTC.
    Day,
}

impl Per {
    pub(super) const WINDOWS: [Per; 3] = [Per::Minute, Per::Hour, Per::Day];

    pub(super) fn window_ms(self) -> u64 {
        match self {
            Per::Bucket => 1,
            Per::Minute => 60_000,
            Per::Hour => 3_600_000,
            Per::Day => 86_400_000,
        }
    }

    /// `minute`, `hour`, `day` (`second` for a bucket's refill).
    pub fn as_str(self) -> &'static str {
        match self {
            Per::Bucket => "second",
            Per::Minute => "minute",
            Per::Hour => "hour",
            Per::Day => "day",
        }
    }
}

/// One level's limit: a token bucket, fixed windows, or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Tokens added per second (may be fractional: 0.5 is one call every two seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_second: Option<f64>,
    /// Most tokens held: the largest burst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Calls per calendar minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
    /// Calls per clock hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_hour: Option<u32>,
    /// Calls per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<u32>,
}

impl Rate {
    /// A token bucket only.
    pub fn bucket(per_second: f64, burst: u32) -> Rate {
        Rate {
            per_second: Some(per_second),
            burst: Some(burst),
            ..Rate::default()
        }
    }

    /// Checks the numbers; the message says what to fix.
    pub fn check(&self) -> Result<(), String> {
        match (self.per_second, self.burst) {
            (Some(p), Some(b)) => {
                if !(p.is_finite() && p > 0.0) {
                    return Err("`per_second` must be a number greater than 0".to_owned());
                }
                if b == 0 {
                    return Err("`burst` must be at least 1".to_owned());
                }
            }
            (None, None) => {}
            _ => return Err("a token bucket needs both `per_second` and `burst`".to_owned()),
        }
        for per in Per::WINDOWS {
            if self.window(per) == Some(0) {
                return Err(format!("`per_{}` must be at least 1", per.as_str()));
            }
        }
        if self.per_second.is_none() && Per::WINDOWS.iter().all(|p| self.window(*p).is_none()) {
            return Err(
                "set `per_second` and `burst`, or `per_minute`, `per_hour` or `per_day`".to_owned(),
            );
        }
        Ok(())
    }

    pub(super) fn window(&self, per: Per) -> Option<u32> {
        match per {
            Per::Bucket => None,
            Per::Minute => self.per_minute,
            Per::Hour => self.per_hour,
            Per::Day => self.per_day,
        }
    }
}

/// The configured limits. A missing rate means no limit at that level.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitConfig {
    /// All calls together.
    pub global: Option<Rate>,
    /// All calls of one principal.
    pub per_principal: Option<Rate>,
    /// Calls of one principal to one tool, unless the tool's manifest sets its own rate.
    pub per_principal_tool: Option<Rate>,
}
