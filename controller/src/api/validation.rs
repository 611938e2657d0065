//! Offline validation: checks the generated CRD schema's OpenAPI constraints and evaluates its
//! CEL rules against an object, as the API server would on create.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use kube::core::cel::{ErrorKind, ValidationErrors, Validator};
use kube::CustomResourceExt;
use serde::Serialize;

use super::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// One problem with an object: where (`spec.template.spec.requirements[0]`) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem an API object has, all at once (never just the first).
pub trait Validate {
    fn validate(&self) -> Vec<FieldError>;
}

/// A kind's CRD schema, generated once per process: as typed props for the OpenAPI checks and
/// as JSON for the CEL validator (generating it is most of the cost of a validation).
struct Schema {
    props: JSONSchemaProps,
    json: serde_json::Value,
}

fn schema_of<T: CustomResourceExt + 'static>() -> Option<Arc<Schema>> {
    static SCHEMAS: OnceLock<Mutex<HashMap<TypeId, Option<Arc<Schema>>>>> = OnceLock::new();
    let mut schemas = SCHEMAS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    schemas
        .entry(TypeId::of::<T>())
        .or_insert_with(|| {
            let props = T::crd()
                .spec
                .versions
                .into_iter()
                .next()?
                .schema?
                .open_api_v3_schema?;
            let json = serde_json::to_value(&props).ok()?;
            Some(Arc::new(Schema { props, json }))
        })
        .clone()
}

/// The schema's OpenAPI constraints first, then its CEL rules, as the API server checks them.
fn schema_errors<T: CustomResourceExt + Serialize + 'static>(object: &T) -> Vec<FieldError> {
    let (Some(schema), Ok(value)) = (schema_of::<T>(), serde_json::to_value(object)) else {
        return vec![FieldError {
            path: String::new(),
            message: "internal: the object or its CRD schema could not be serialized".into(),
        }];
    };
    let mut found = super::structural::errors(&schema.props, &value);
    if let Err(errors) = Validator::new().validate(&schema.json, &value, None) {
        found.extend(to_field_errors(errors));
    }
    found
}

fn to_field_errors(errors: ValidationErrors) -> Vec<FieldError> {
    errors
        .into_vec()
        .into_iter()
        .map(|e| {
            // A rule that fails to compile or evaluate is our bug, not the user's; say so
            // rather than passing the object (the API server would reject it too).
            let message = match e.kind {
                ErrorKind::ValidationFailure => e.message,
                _ => format!(
                    "internal: rule `{}` could not be evaluated: {}",
                    e.rule, e.message
                ),
            };
            FieldError {
                path: e.field_path,
                message,
            }
        })
        .collect()
}

impl Validate for NodePool {
    fn validate(&self) -> Vec<FieldError> {
        schema_errors(self)
    }
}

impl Validate for NodeClaim {
    fn validate(&self) -> Vec<FieldError> {
        schema_errors(self)
    }
}

impl Validate for EC2NodeClass {
    fn validate(&self) -> Vec<FieldError> {
        schema_errors(self)
    }
}

impl Validate for NodeOverlay {
    fn validate(&self) -> Vec<FieldError> {
        schema_errors(self)
    }
}

impl Validate for CapacityBuffer {
    fn validate(&self) -> Vec<FieldError> {
        schema_errors(self)
    }
}
