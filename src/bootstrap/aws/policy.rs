//! IAM policy documents built from typed statements, and their comparison with what IAM holds.
//!
//! IAM returns documents URL-encoded and may reshape them (a one-element list becomes a
//! string, keys reorder), so documents are compared in a normal form, and a difference is named
//! by the statement `Sid` that changed.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// AWS's managed-policy document limit (characters, whitespace excluded).
pub const MANAGED_POLICY_MAX_CHARS: usize = 6144;

/// The AWS partition: ARNs and the EC2 service principal differ between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    Aws,
    AwsCn,
    AwsUsGov,
}

impl Partition {
    pub fn of_region(region: &str) -> Partition {
        if region.starts_with("cn-") {
            Partition::AwsCn
        } else if region.starts_with("us-gov-") {
            Partition::AwsUsGov
        } else {
            Partition::Aws
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Partition::Aws => "aws",
            Partition::AwsCn => "aws-cn",
            Partition::AwsUsGov => "aws-us-gov",
        }
    }

    /// The EC2 service principal: China's regions use their own DNS suffix.
    pub fn ec2_principal(self) -> &'static str {
        match self {
            Partition::AwsCn => "ec2.amazonaws.com.cn",
            _ => "ec2.amazonaws.com",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
}

/// One statement. Conditions are `operator → key → values`.
#[derive(Debug, Clone)]
pub struct Statement {
    pub sid: String,
    pub effect: Effect,
    pub principal: Option<Value>,
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    pub conditions: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Statement {
    pub fn allow(sid: &str, actions: &[&str], resources: Vec<String>) -> Statement {
        Statement {
            sid: sid.to_string(),
            effect: Effect::Allow,
            principal: None,
            actions: actions.iter().map(|a| a.to_string()).collect(),
            resources,
            conditions: BTreeMap::new(),
        }
    }

    pub fn deny(sid: &str, actions: &[&str], resources: Vec<String>) -> Statement {
        Statement {
            effect: Effect::Deny,
            ..Statement::allow(sid, actions, resources)
        }
    }

    pub fn principal(mut self, principal: Value) -> Statement {
        self.principal = Some(principal);
        self
    }

    pub fn when(mut self, operator: &str, key: &str, values: &[&str]) -> Statement {
        self.conditions
            .entry(operator.to_string())
            .or_default()
            .insert(
                key.to_string(),
                values.iter().map(|v| v.to_string()).collect(),
            );
        self
    }

    fn to_json(&self) -> Value {
        let mut s = Map::new();
        s.insert("Sid".into(), json!(self.sid));
        s.insert(
            "Effect".into(),
            json!(match self.effect {
                Effect::Allow => "Allow",
                Effect::Deny => "Deny",
            }),
        );
        if let Some(p) = &self.principal {
            s.insert("Principal".into(), p.clone());
        }
        s.insert("Action".into(), one_or_many(&self.actions));
        if !self.resources.is_empty() {
            s.insert("Resource".into(), one_or_many(&self.resources));
        }
        if !self.conditions.is_empty() {
            let conditions: Map<String, Value> = self
                .conditions
                .iter()
                .map(|(op, keys)| {
                    let keys: Map<String, Value> = keys
                        .iter()
                        .map(|(k, v)| (k.clone(), one_or_many(v)))
                        .collect();
                    (op.clone(), Value::Object(keys))
                })
                .collect();
            s.insert("Condition".into(), Value::Object(conditions));
        }
        Value::Object(s)
    }
}

fn one_or_many(values: &[String]) -> Value {
    match values {
        [one] => json!(one),
        many => json!(many),
    }
}

/// A policy document: a list of statements.
#[derive(Debug, Clone, Default)]
pub struct Document {
    pub statements: Vec<Statement>,
}

impl Document {
    pub fn new(statements: Vec<Statement>) -> Document {
        Document { statements }
    }

    pub fn to_value(&self) -> Value {
        json!({
            "Version": "2012-10-17",
            "Statement": self.statements.iter().map(Statement::to_json).collect::<Vec<_>>(),
        })
    }

    /// The compact JSON sent to IAM; its length is what IAM's size limit counts.
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }
}

/// Parses a document as IAM returns it: URL-encoded (GetRole, GetPolicyVersion) or plain.
pub fn parse_returned(text: &str) -> Option<Value> {
    let decoded = percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()?
        .into_owned();
    serde_json::from_str(&decoded)
        .ok()
        .or_else(|| serde_json::from_str(text).ok())
}

/// What differs between the document IAM holds and the desired one, by statement: `None` when
/// they are the same policy.
pub fn difference(actual: &Value, desired: &Value) -> Option<String> {
    let actual = statements_by_sid(actual);
    let desired = statements_by_sid(desired);
    let mut parts = Vec::new();
    for (sid, want) in &desired {
        match actual.get(sid) {
            None => parts.push(format!("statement {sid} missing")),
            Some(have) if have != want => parts.push(format!("statement {sid} changed")),
            _ => {}
        }
    }
    for sid in actual.keys().filter(|sid| !desired.contains_key(*sid)) {
        parts.push(format!("unexpected statement {sid}"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn statements_by_sid(doc: &Value) -> BTreeMap<String, Value> {
    let statements = match doc.get("Statement") {
        Some(Value::Array(list)) => list.clone(),
        Some(one @ Value::Object(_)) => vec![one.clone()],
        _ => vec![],
    };
    statements
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let sid = s
                .get("Sid")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("#{}", i + 1));
            (sid, normalize(s))
        })
        .collect()
}

/// Lists become sorted sets, single strings become one-element lists: the shapes IAM treats
/// as equal compare equal.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "Sid")
                .map(|(k, v)| (k.clone(), normalize_member(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn normalize_member(value: &Value) -> Value {
    match value {
        Value::String(s) => json!([s]),
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(normalize_member).collect();
            items.sort_by_key(|v| v.to_string());
            items.dedup();
            // Nested one-element lists from strings inside arrays flatten back to strings.
            Value::Array(
                items
                    .into_iter()
                    .map(|v| match v {
                        Value::Array(mut inner) if inner.len() == 1 => inner.remove(0),
                        other => other,
                    })
                    .collect(),
            )
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalize_member(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_the_region() {
        assert_eq!(Partition::of_region("cn-north-1").name(), "aws-cn");
        assert_eq!(Partition::of_region("us-gov-west-1").name(), "aws-us-gov");
        assert_eq!(Partition::of_region("eu-west-1").name(), "aws");
        assert_eq!(
            Partition::of_region("cn-northwest-1").ec2_principal(),
            "ec2.amazonaws.com.cn"
        );
    }

    #[test]
    fn reshaped_documents_compare_equal_and_changes_name_the_statement() {
        let doc = Document::new(vec![Statement::allow(
            "Read",
            &["ec2:DescribeSubnets", "ec2:DescribeImages"],
            vec!["*".into()],
        )
        .when("StringEquals", "aws:RequestedRegion", &["us-east-1"])]);
        let desired = doc.to_value();
        let reshaped = json!({"Version": "2012-10-17", "Statement": {"Sid": "Read", "Effect": "Allow",
            "Action": ["ec2:DescribeImages", "ec2:DescribeSubnets"], "Resource": ["*"],
            "Condition": {"StringEquals": {"aws:RequestedRegion": ["us-east-1"]}}}});
        assert_eq!(difference(&reshaped, &desired), None);
        let encoded = percent_encoding::utf8_percent_encode(
            &reshaped.to_string(),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        assert_eq!(parse_returned(&encoded), Some(reshaped.clone()));

        let mut widened = reshaped.clone();
        widened["Statement"]["Action"] = json!("ec2:*");
        assert_eq!(
            difference(&widened, &desired).as_deref(),
            Some("statement Read changed")
        );
        let extra = json!({"Statement": [reshaped["Statement"].clone(),
            {"Sid": "Backdoor", "Effect": "Allow", "Action": "*", "Resource": "*"}]});
        assert_eq!(
            difference(&extra, &desired).as_deref(),
            Some("unexpected statement Backdoor")
        );
    }
}
