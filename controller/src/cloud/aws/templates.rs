//! Launch templates: one per distinct content (named by its hash, so the same content is the
//! same template across launches, controller restarts and replicas), created on first use and
//! remembered; and the tags everything launched for a NodeClaim carries.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::call::{codes, metered};
use super::launch_template::Content;
use super::AwsCloud;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::CloudError;

/// A launch template jointer made or found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Template {
    pub name: String,
    /// Unknown only when EC2 answered without one.
    pub id: Option<String>,
}

impl Template {
    /// Whether a fleet answer's template (EC2 names it by id or by name) is this one.
    pub fn is(&self, spec: &aws_sdk_ec2::types::FleetLaunchTemplateSpecification) -> bool {
        spec.launch_template_name() == Some(self.name.as_str())
            || (self.id.is_some() && spec.launch_template_id() == self.id.as_deref())
    }
}

/// Tags for everything launched for `claim`: the class's own, then the ones that mark it as
/// the controller's (what its IAM policy, garbage collection and teardown key on).
pub fn tags(cluster: &str, claim: &NodeClaim, class: &EC2NodeClass) -> BTreeMap<String, String> {
    let mut tags = class.spec.tags.clone();
    let pool = claim
        .labels()
        .get(labels::NODEPOOL)
        .cloned()
        .unwrap_or_default();
    tags.extend(labels::owned_tags(cluster));
    tags.insert(labels::NODEPOOL.into(), pool);
    tags.insert(labels::EC2NODECLASS.into(), class.name_any());
    tags
}

impl AwsCloud {
    /// Creates the launch template unless one with that name exists.
    pub(super) async fn ensure_template(&self, content: &Content) -> Result<Template, CloudError> {
        let name = content.name(&self.cluster.name);
        if let Some(id) = self
            .templates
            .lock()
            .ok()
            .and_then(|t| t.get(&name).cloned())
        {
            return Ok(Template { name, id: Some(id) });
        }
        let id = match self.template_id(&name).await? {
            Some(id) => Some(id),
            None => self.create_template(&name, content).await?,
        };
        if let (Some(id), Ok(mut t)) = (&id, self.templates.lock()) {
            t.insert(name.clone(), id.clone());
        }
        Ok(Template { name, id })
    }

    /// The id of the template named `name`, if there is one.
    async fn template_id(&self, name: &str) -> Result<Option<String>, CloudError> {
        let found = metered(
            &self.metrics,
            "ec2",
            "DescribeLaunchTemplates",
            self.ec2
                .describe_launch_templates()
                .launch_template_names(name)
                .send(),
        )
        .await;
        match found {
            Ok(out) => Ok(out
                .launch_templates()
                .first()
                .and_then(|t| t.launch_template_id())
                .map(str::to_string)),
            Err(e) if e.is(codes::TEMPLATE_NOT_FOUND) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the template; its id. When another launch created it first (the same content,
    /// so the same template), the id is looked up: EC2's CreateFleet answer names the template
    /// by id, and a launch that cannot match its template loses what the template meant
    /// (its image, its capacity reservation).
    async fn create_template(
        &self,
        name: &str,
        content: &Content,
    ) -> Result<Option<String>, CloudError> {
        let created = metered(
            &self.metrics,
            "ec2",
            "CreateLaunchTemplate",
            self.ec2
                .create_launch_template()
                .launch_template_name(name)
                .launch_template_data(content.request())
                .tag_specifications(content.tag_specification())
                .send(),
        )
        .await;
        match created {
            Ok(out) => {
                tracing::info!(launch_template = %name, image = %content.image_id, "launch template created");
                Ok(out
                    .launch_template()
                    .and_then(|t| t.launch_template_id())
                    .map(str::to_string))
            }
            Err(e) if e.is(codes::TEMPLATE_EXISTS) => self.template_id(name).await,
            Err(e) => Err(e),
        }
    }
}
