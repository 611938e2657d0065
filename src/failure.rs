//! How a command fails: located input errors, reported all at once before anything is
//! touched, or any other error with its context.

use crate::input::diagnostics::InputErrors;

pub enum Failure {
    Input(InputErrors),
    Other(anyhow::Error),
}

impl From<InputErrors> for Failure {
    fn from(e: InputErrors) -> Self {
        Failure::Input(e)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

impl From<serde_yaml::Error> for Failure {
    fn from(e: serde_yaml::Error) -> Self {
        Failure::Other(e.into())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Other(e.into())
    }
}
