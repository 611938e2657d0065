//! Kubernetes resource quantities (`100m`, `1.5`, `512Mi`, `1e3`, `1000` as a YAML integer).
//!
//! A [`Quantity`] keeps the text the user wrote (so output round-trips unchanged) and its value in
//! milli-units, rounded up the way Kubernetes rounds sub-milli values: cheap, exact arithmetic
//! for the scheduler, and the same grammar the API server enforces.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// The pattern Kubernetes publishes for `resource.Quantity` strings.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}: expected a number with an optional suffix (e.g. 500m, 2, 1.5, 512Mi, 10Gi, 1e3)")]
pub struct QuantityError(String);

/// A parsed quantity: the original text and its value in milli-units (rounded up).
#[derive(Debug, Clone)]
pub struct Quantity {
    text: String,
    millis: i128,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.millis == other.millis
    }
}
impl Eq for Quantity {}

impl Quantity {
    /// A quantity of `millis` thousandths (e.g. CPU in millicores).
    pub fn from_millis(millis: i128) -> Self {
        let text = if millis % 1000 == 0 {
            (millis / 1000).to_string()
        } else {
            format!("{millis}m")
        };
        Quantity { text, millis }
    }

    /// A whole-number quantity (e.g. bytes, pods).
    pub fn from_units(units: i128) -> Self {
        Quantity {
            text: units.to_string(),
            millis: units * 1000,
        }
    }

    pub fn millis(&self) -> i128 {
        self.millis
    }

    /// The value in whole units, rounded up (bytes of memory, number of pods).
    pub fn units_ceil(&self) -> i128 {
        div_ceil(self.millis, 1000)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn div_ceil(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d != 0 && ((n > 0) == (d > 0)) {
        q + 1
    } else {
        q
    }
}

fn pow(base: i128, exp: u32) -> Option<i128> {
    base.checked_pow(exp)
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = || QuantityError(input.to_string());
        let (negative, rest) = match input.as_bytes().first() {
            Some(b'-') => (true, &input[1..]),
            Some(b'+') => (false, &input[1..]),
            _ => (false, input),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if (int_part.is_empty() && frac_part.is_empty()) || number.matches('.').count() > 1 {
            return Err(fail());
        }
        if int_part.len() + frac_part.len() > 30 {
            return Err(fail());
        }
        let mantissa: i128 = format!("{int_part}{frac_part}")
            .parse()
            .map_err(|_| fail())?;
        let frac_len = frac_part.len() as i32;

        // value = mantissa * 10^(exp10 - frac_len) * 1024^exp1024, expressed in milli-units.
        let (exp10, exp1024): (i32, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 1),
            "Mi" => (0, 2),
            "Gi" => (0, 3),
            "Ti" => (0, 4),
            "Pi" => (0, 5),
            "Ei" => (0, 6),
            s if s.starts_with(['e', 'E']) => {
                let exp: i32 = s[1..].parse().map_err(|_| fail())?;
                if s[1..].contains('.') || !(-40..=40).contains(&exp) {
                    return Err(fail());
                }
                (exp, 0)
            }
            _ => return Err(fail()),
        };
        let scale10 = exp10 + 3 - frac_len;
        let mut numerator = mantissa
            .checked_mul(pow(1024, exp1024).ok_or_else(fail)?)
            .ok_or_else(fail)?;
        let mut denominator: i128 = 1;
        if scale10 >= 0 {
            numerator = numerator
                .checked_mul(pow(10, scale10 as u32).ok_or_else(fail)?)
                .ok_or_else(fail)?;
        } else {
            denominator = pow(10, (-scale10) as u32).ok_or_else(fail)?;
        }
        let magnitude = div_ceil(numerator, denominator);
        Ok(Quantity {
            text: input.to_string(),
            millis: if negative { -magnitude } else { magnitude },
        })
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity such as 500m, 2, 1.5, 512Mi or 10Gi")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                v.to_string().parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // The same int-or-string shape Kubernetes uses for resource.Quantity.
        json_schema!({
            "anyOf": [{ "type": "integer" }, { "type": "string", "pattern": QUANTITY_PATTERN }],
            "x-kubernetes-int-or-string": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> i128 {
        s.parse::<Quantity>().unwrap().millis()
    }

    #[test]
    fn parses_kubernetes_suffixes() {
        assert_eq!(m("100m"), 100);
        assert_eq!(m("1.5"), 1500);
        assert_eq!(m("2"), 2000);
        assert_eq!(m("1Ki"), 1024 * 1000);
        assert_eq!(m("512Mi"), 512 * 1024 * 1024 * 1000);
        assert_eq!(m("1000Gi"), 1000 * (1i128 << 30) * 1000);
        assert_eq!(m("1k"), 1_000_000);
        assert_eq!(m("1e3"), 1_000_000);
        assert_eq!(m(".5"), 500);
        assert_eq!(m("-1"), -1000);
    }

    #[test]
    fn rounds_sub_milli_values_up() {
        assert_eq!(m("1n"), 1);
        assert_eq!(m("1500u"), 2);
    }

    #[test]
    fn refuses_malformed_text() {
        for bad in [
            "", "abc", "1.2.3", "10 Gi", "1Gb", "Mi", "1e", "1.5.Gi", "--1",
        ] {
            assert!(bad.parse::<Quantity>().is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn yaml_integers_are_quantities() {
        let q: Quantity = serde_yaml::from_str("1000").unwrap();
        assert_eq!(q.millis(), 1_000_000);
        assert_eq!(serde_yaml::to_string(&q).unwrap().trim(), "'1000'");
    }
}
