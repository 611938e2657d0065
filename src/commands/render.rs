//! `jointer render`: the node objects the templates render to, validated as Karpenter v1
//! objects, and the CRDs jointer installs.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::input::diagnostics::InputErrors;
use crate::input::manifest::Object;
use crate::input::{config, render};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum What {
    /// The EC2NodeClass and NodePool objects rendered from the templates.
    Nodes,
    /// The CustomResourceDefinitions for NodePool, NodeClaim and EC2NodeClass.
    Crds,
    /// Both.
    All,
}

/// What was asked for: the rendered objects and/or the CRDs (either may be empty).
pub struct Rendered {
    pub objects: Vec<Object>,
    pub crds: Vec<CustomResourceDefinition>,
}

/// Reads the config and renders its templates only when node objects are asked for.
pub fn render(file: &Path, what: What) -> Result<Rendered, InputErrors> {
    let objects = if what == What::Crds {
        Vec::new()
    } else {
        let loaded = config::load(file)?;
        render::node_objects(&loaded)?
            .objects
            .into_iter()
            .map(|o| o.object)
            .collect()
    };
    let crds = if what == What::Nodes {
        Vec::new()
    } else {
        jointer_controller::crds::all()
            .into_iter()
            .map(|(_, c)| c)
            .collect()
    };
    Ok(Rendered { objects, crds })
}
