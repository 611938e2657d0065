//! Durations as Karpenter's API spells them: Go-style unit sequences (`720h`, `30s`, `1h30m`)
//! and, where upstream allows it, the word `Never`.
//!
//! The accepted grammar is exactly the CRD's `pattern` (`^([0-9]+(s|m|h))+$`), so offline
//! parsing and the API server always agree on what is valid.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// The regular expression the CRD publishes for a duration that may also be `Never`.
pub const NILLABLE_DURATION_PATTERN: &str = "^(([0-9]+(s|m|h))+|Never)$";
/// The regular expression the CRD publishes for a plain duration.
pub const DURATION_PATTERN: &str = "^([0-9]+(s|m|h))+$";

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: expected digits followed by a unit s, m or h, repeated (e.g. 30s, 720h, 1h30m){never}")]
pub struct DurationError {
    input: String,
    never: &'static str,
}

/// Parses `([0-9]+(s|m|h))+`, the subset of Go's `time.ParseDuration` that Karpenter accepts.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let fail = || DurationError {
        input: input.to_string(),
        never: "",
    };
    if input.is_empty() {
        return Err(fail());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in input.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(fail()),
        };
        let n: u64 = digits.parse().map_err(|_| fail())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(fail)?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(fail());
    }
    Ok(Duration::from_secs(total))
}

/// Renders a duration in the canonical form the API uses (`1h30m0s` style shortened to `1h30m`).
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A duration that must be finite (e.g. a budget's `duration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeDuration(pub Duration);

/// A duration that may be `Never` (e.g. `expireAfter`, `consolidateAfter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NillableDuration {
    Never,
    After(Duration),
}

impl NillableDuration {
    pub fn as_duration(&self) -> Option<Duration> {
        match self {
            NillableDuration::Never => None,
            NillableDuration::After(d) => Some(*d),
        }
    }
}

impl std::str::FromStr for KubeDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(KubeDuration)
    }
}

impl std::str::FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "Never" {
            return Ok(NillableDuration::Never);
        }
        parse_duration(s)
            .map(NillableDuration::After)
            .map_err(|mut e| {
                e.never = ", or Never";
                e
            })
    }
}

impl fmt::Display for KubeDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NillableDuration::Never => f.write_str("Never"),
            NillableDuration::After(d) => f.write_str(&format_duration(*d)),
        }
    }
}

macro_rules! string_serde {
    ($ty:ty, $pattern:expr, $expecting:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl de::Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                d.deserialize_str(V)
            }
        }

        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                stringify!($ty).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({ "type": "string", "pattern": $pattern })
            }
        }
    };
}

string_serde!(
    KubeDuration,
    DURATION_PATTERN,
    "a duration such as 30s, 5m or 1h30m"
);
string_serde!(
    NillableDuration,
    NILLABLE_DURATION_PATTERN,
    "a duration such as 30s, 720h or 1h30m, or Never"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_sequences() {
        assert_eq!(parse_duration("720h").unwrap().as_secs(), 720 * 3600);
        assert_eq!(parse_duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("0s").unwrap().as_secs(), 0);
        assert_eq!(parse_duration("90s").unwrap().as_secs(), 90);
    }

    #[test]
    fn refuses_what_the_crd_pattern_refuses() {
        for bad in ["", "30 s", "-1h", "1.5h", "10", "h", "5d", "1h30", "Never"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
        assert_eq!(
            "Never".parse::<NillableDuration>().unwrap(),
            NillableDuration::Never
        );
        assert!("never".parse::<NillableDuration>().is_err());
    }

    #[test]
    fn round_trips_through_text() {
        let d: NillableDuration = "1h30m".parse().unwrap();
        assert_eq!(d.to_string(), "1h30m");
        assert_eq!(KubeDuration(Duration::from_secs(0)).to_string(), "0s");
        assert_eq!(
            KubeDuration(Duration::from_secs(3661)).to_string(),
            "1h1m1s"
        );
    }
}
