//! Offline validation: evaluates the CEL rules of the generated CRD schema against an object,
//! exactly as the API server would on create.

use std::fmt;

use kube::core::cel::{ErrorKind, ValidationErrors};
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

fn cel_errors<T: CustomResourceExt + Serialize>(object: &T) -> Vec<FieldError> {
    match kube::core::cel::validate_cel(object) {
        Ok(()) => Vec::new(),
        Err(errors) => to_field_errors(errors),
    }
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
        cel_errors(self)
    }
}

impl Validate for NodeClaim {
    fn validate(&self) -> Vec<FieldError> {
        cel_errors(self)
    }
}

impl Validate for EC2NodeClass {
    fn validate(&self) -> Vec<FieldError> {
        cel_errors(self)
    }
}

impl Validate for NodeOverlay {
    fn validate(&self) -> Vec<FieldError> {
        cel_errors(self)
    }
}

impl Validate for CapacityBuffer {
    fn validate(&self) -> Vec<FieldError> {
        cel_errors(self)
    }
}
