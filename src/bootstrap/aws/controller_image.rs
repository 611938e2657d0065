//! The bundled controller's image: an ECR repository jointer creates (immutable tags, scan on
//! push, a lifecycle policy keeping the last few images) and the image this jointer builds
//! from its workspace, pushed there when the repository lacks its digest. The controller
//! install then pins the Deployment to that digest. With a published image
//! (`controller.image.repository`), or no bundled controller, a repository jointer created
//! before goes.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use aws_sdk_ecr::types::{ImageIdentifier, ImageScanningConfiguration, ImageTagMutability, Tag};
use base64::Engine as _;
use serde_json::{json, Value};

use super::clients::{code, failed, gone_ok};
use super::iam::{adopt_or_refuse, owned};
use super::ownership::Ownership;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::image::push::{self, Registry};

#[derive(Debug, Clone)]
pub enum Action {
    CreateRepository {
        name: String,
        tags: BTreeMap<String, String>,
        lifecycle: String,
    },
    TagRepository {
        arn: String,
        tags: BTreeMap<String, String>,
    },
    MakeTagsImmutable {
        name: String,
    },
    ScanOnPush {
        name: String,
    },
    PutLifecyclePolicy {
        name: String,
        policy: String,
    },
    /// Pushes the image the run built (`Context::controller_image`).
    PushImage {
        repository: String,
    },
    DeleteRepository {
        name: String,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::ControllerImage(a)
    }
}

/// The lifecycle policy: expire all but the newest `keep` images.
pub fn lifecycle_policy(keep: u32) -> Value {
    json!({"rules": [{
        "rulePriority": 1,
        "description": format!("keep the newest {keep} controller images"),
        "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": keep},
        "action": {"type": "expire"},
    }]})
}

/// What the config wants: the repository and, to converge, the built image in it.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub repository: String,
    pub keep: u32,
    /// `(reference, origin)`: `<uri>@sha256:…` and `built from 0.1.0, <revision>`.
    pub image: Option<(String, String)>,
}

/// The repository as ECR holds it.
#[derive(Debug, Clone)]
pub struct Repository {
    pub arn: String,
    pub immutable: bool,
    pub scan_on_push: bool,
    pub tags: BTreeMap<String, String>,
    pub lifecycle: Option<Value>,
}

#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub repository: Option<Repository>,
    /// The repository holds the wanted image's digest.
    pub image_present: bool,
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let (repository, keep) = ctx.ecr_repository();
    let converge = goal == Goal::Converge && ctx.builds_controller_image();
    let image = if converge {
        Some(ctx.controller_image()?)
    } else {
        None
    };
    let observed = observe(ctx, &repository, image.map(|i| i.digest())).await?;
    let wanted = Wanted {
        image: match image {
            Some(i) => Some((ctx.controller_image_reference()?, i.origin())),
            None => None,
        },
        repository,
        keep,
    };
    diff(
        &wanted,
        &observed,
        &ctx.ownership,
        if converge {
            Goal::Converge
        } else {
            Goal::Remove
        },
    )
}

/// The pure diff.
pub fn diff(
    wanted: &Wanted,
    observed: &Observed,
    ours: &Ownership,
    goal: Goal,
) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::ControllerImage);
    let name = &wanted.repository;
    let resource = format!("ecr repository {name}");
    let policy = lifecycle_policy(wanted.keep);
    match (goal, &observed.repository) {
        (Goal::Remove, Some(repo)) if owned(ours, &repo.tags) => {
            plan.changes.push(
                Change::new(
                    Op::Delete,
                    &resource,
                    Action::DeleteRepository { name: name.clone() },
                )
                .detail("with its images"),
            );
        }
        (Goal::Remove, _) => {}
        (Goal::Converge, None) => plan.changes.push(
            Change::new(
                Op::Create,
                &resource,
                Action::CreateRepository {
                    name: name.clone(),
                    tags: ours.tags(),
                    lifecycle: policy.to_string(),
                },
            )
            .detail(format!(
                "immutable tags, scan on push, keeps the newest {} images",
                wanted.keep
            )),
        ),
        (Goal::Converge, Some(repo)) => {
            adopt_or_refuse(
                ours,
                &resource,
                &repo.tags,
                "set controller.image.ecrRepository to another name",
                &mut plan.changes,
                || {
                    Action::TagRepository {
                        arn: repo.arn.clone(),
                        tags: ours.tags(),
                    }
                    .into()
                },
            )?;
            if !repo.immutable {
                plan.changes.push(
                    Change::new(
                        Op::Update,
                        &resource,
                        Action::MakeTagsImmutable { name: name.clone() },
                    )
                    .field("imageTagMutability")
                    .detail("MUTABLE → IMMUTABLE"),
                );
            }
            if !repo.scan_on_push {
                plan.changes.push(
                    Change::new(
                        Op::Update,
                        &resource,
                        Action::ScanOnPush { name: name.clone() },
                    )
                    .field("scanOnPush")
                    .detail("false → true"),
                );
            }
            if repo.lifecycle.as_ref() != Some(&policy) {
                plan.changes.push(
                    Change::new(
                        Op::Update,
                        &resource,
                        Action::PutLifecyclePolicy {
                            name: name.clone(),
                            policy: policy.to_string(),
                        },
                    )
                    .field("lifecycle policy")
                    .detail(format!("keep the newest {} images", wanted.keep)),
                );
            }
        }
    }
    if let (Goal::Converge, Some((reference, origin))) = (goal, &wanted.image) {
        if !observed.image_present {
            plan.changes.push(
                Change::new(
                    Op::Create,
                    format!("image {reference}"),
                    Action::PushImage {
                        repository: name.clone(),
                    },
                )
                .detail(origin.clone()),
            );
        }
    }
    Ok(plan)
}

async fn observe(ctx: &Context, name: &str, digest: Option<&str>) -> Result<Observed> {
    let ecr = &ctx.aws.ecr;
    let described = match ecr
        .describe_repositories()
        .repository_names(name)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) if code(&e) == Some("RepositoryNotFoundException") => return Ok(Observed::default()),
        Err(e) => return Err(failed(&format!("ecr:DescribeRepositories {name}"), e)),
    };
    let Some(r) = described
        .repositories
        .unwrap_or_default()
        .into_iter()
        .next()
    else {
        return Ok(Observed::default());
    };
    let arn = r.repository_arn.clone().unwrap_or_default();
    let tags = ecr
        .list_tags_for_resource()
        .resource_arn(&arn)
        .send()
        .await
        .map_err(|e| failed(&format!("ecr:ListTagsForResource {arn}"), e))?
        .tags
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value))
        .collect();
    let lifecycle = match ecr
        .get_lifecycle_policy()
        .repository_name(name)
        .send()
        .await
    {
        Ok(out) => out
            .lifecycle_policy_text
            .and_then(|t| serde_json::from_str(&t).ok()),
        Err(e) if code(&e) == Some("LifecyclePolicyNotFoundException") => None,
        Err(e) => return Err(failed(&format!("ecr:GetLifecyclePolicy {name}"), e)),
    };
    let image_present = match digest {
        None => false,
        Some(digest) => match ecr
            .describe_images()
            .repository_name(name)
            .image_ids(ImageIdentifier::builder().image_digest(digest).build())
            .send()
            .await
        {
            Ok(out) => !out.image_details.unwrap_or_default().is_empty(),
            Err(e) if code(&e) == Some("ImageNotFoundException") => false,
            Err(e) => return Err(failed(&format!("ecr:DescribeImages {name} {digest}"), e)),
        },
    };
    Ok(Observed {
        repository: Some(Repository {
            arn,
            immutable: r.image_tag_mutability == Some(ImageTagMutability::Immutable),
            scan_on_push: r
                .image_scanning_configuration
                .is_some_and(|s| s.scan_on_push),
            tags,
            lifecycle,
        }),
        image_present,
    })
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    let ecr = &ctx.aws.ecr;
    match action {
        Action::CreateRepository {
            name,
            tags,
            lifecycle,
        } => {
            ecr.create_repository()
                .repository_name(name)
                .image_tag_mutability(ImageTagMutability::Immutable)
                .image_scanning_configuration(
                    ImageScanningConfiguration::builder()
                        .scan_on_push(true)
                        .build(),
                )
                .set_tags(Some(ecr_tags(tags)?))
                .send()
                .await
                .map_err(|e| failed(&format!("ecr:CreateRepository {name}"), e))?;
            put_lifecycle(ctx, name, lifecycle).await
        }
        Action::TagRepository { arn, tags } => ecr
            .tag_resource()
            .resource_arn(arn)
            .set_tags(Some(ecr_tags(tags)?))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| failed(&format!("ecr:TagResource {arn}"), e)),
        Action::MakeTagsImmutable { name } => ecr
            .put_image_tag_mutability()
            .repository_name(name)
            .image_tag_mutability(ImageTagMutability::Immutable)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| failed(&format!("ecr:PutImageTagMutability {name}"), e)),
        Action::ScanOnPush { name } => ecr
            .put_image_scanning_configuration()
            .repository_name(name)
            .image_scanning_configuration(
                ImageScanningConfiguration::builder()
                    .scan_on_push(true)
                    .build(),
            )
            .send()
            .await
            .map(|_| ())
            .map_err(|e| failed(&format!("ecr:PutImageScanningConfiguration {name}"), e)),
        Action::PutLifecyclePolicy { name, policy } => put_lifecycle(ctx, name, policy).await,
        Action::PushImage { repository } => {
            let image = ctx.controller_image()?;
            let registry = registry(ctx).await?;
            let pushed = push::push(image, &registry, repository, ctx.progress.as_ref()).await?;
            ctx.progress.note(&format!(
                "  {} blob(s) pushed ({:.1} MB), {} already there",
                pushed.blobs,
                pushed.bytes as f64 / 1_000_000.0,
                pushed.skipped
            ));
            Ok(())
        }
        Action::DeleteRepository { name } => gone_ok(
            ecr.delete_repository()
                .repository_name(name)
                .force(true)
                .send()
                .await,
            &["RepositoryNotFoundException"],
            &format!("ecr:DeleteRepository {name}"),
        ),
    }
}

async fn put_lifecycle(ctx: &Context, name: &str, policy: &str) -> Result<()> {
    ctx.aws
        .ecr
        .put_lifecycle_policy()
        .repository_name(name)
        .lifecycle_policy_text(policy)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| failed(&format!("ecr:PutLifecyclePolicy {name}"), e))
}

fn ecr_tags(tags: &BTreeMap<String, String>) -> Result<Vec<Tag>> {
    tags.iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(anyhow::Error::from)
        })
        .collect()
}

/// The account's registry and a push credential, from ecr:GetAuthorizationToken (valid 12 h).
async fn registry(ctx: &Context) -> Result<Registry> {
    let out = ctx
        .aws
        .ecr
        .get_authorization_token()
        .send()
        .await
        .map_err(|e| failed("ecr:GetAuthorizationToken", e))?;
    let data = out
        .authorization_data
        .unwrap_or_default()
        .into_iter()
        .next()
        .context("ecr:GetAuthorizationToken returned no authorization data")?;
    let token = data
        .authorization_token
        .context("ecr:GetAuthorizationToken returned no token")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .context("ecr:GetAuthorizationToken: the token is not base64")?;
    let decoded =
        String::from_utf8(decoded).context("ecr:GetAuthorizationToken: the token is not text")?;
    let (username, password) = decoded
        .split_once(':')
        .context("ecr:GetAuthorizationToken: the token is not user:password")?;
    Ok(Registry {
        endpoint: data
            .proxy_endpoint
            .unwrap_or_else(|| format!("https://{}", ctx.cluster.ecr_registry())),
        username: username.to_string(),
        password: password.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours() -> Ownership {
        Ownership {
            cluster: "demo".into(),
            adopt: false,
        }
    }

    fn wanted(image: bool) -> Wanted {
        Wanted {
            repository: "jointer-controller/demo".into(),
            keep: 10,
            image: image.then(|| ("r@sha256:ab".to_string(), "built from 0.1.0".to_string())),
        }
    }

    fn repo(tags: BTreeMap<String, String>) -> Repository {
        Repository {
            arn: "arn:aws:ecr:us-east-1:1:repository/jointer-controller/demo".into(),
            immutable: true,
            scan_on_push: true,
            tags,
            lifecycle: Some(lifecycle_policy(10)),
        }
    }

    fn lines(plan: &StepPlan) -> Vec<String> {
        plan.changes.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn a_new_repository_is_created_and_the_image_pushed() {
        let plan =
            diff(&wanted(true), &Observed::default(), &ours(), Goal::Converge).expect("plan");
        assert_eq!(
            lines(&plan),
            [
                "+ ecr repository jointer-controller/demo  (immutable tags, scan on push, keeps the newest 10 images)",
                "+ image r@sha256:ab  (built from 0.1.0)",
            ]
        );
    }

    #[test]
    fn a_converged_repository_with_the_image_needs_nothing() {
        let observed = Observed {
            repository: Some(repo(ours().tags())),
            image_present: true,
        };
        let plan = diff(&wanted(true), &observed, &ours(), Goal::Converge).expect("plan");
        assert!(plan.changes.is_empty(), "{:?}", lines(&plan));
    }

    #[test]
    fn settings_changed_by_hand_are_put_back_and_a_missing_image_pushed() {
        let mut r = repo(ours().tags());
        r.immutable = false;
        r.scan_on_push = false;
        r.lifecycle = Some(lifecycle_policy(3));
        let observed = Observed {
            repository: Some(r),
            image_present: false,
        };
        let plan = diff(&wanted(true), &observed, &ours(), Goal::Converge).expect("plan");
        assert_eq!(
            lines(&plan),
            [
                "~ ecr repository jointer-controller/demo  imageTagMutability: MUTABLE → IMMUTABLE",
                "~ ecr repository jointer-controller/demo  scanOnPush: false → true",
                "~ ecr repository jointer-controller/demo  lifecycle policy: keep the newest 10 images",
                "+ image r@sha256:ab  (built from 0.1.0)",
            ]
        );
    }

    #[test]
    fn someone_elses_repository_is_refused_and_only_ours_is_removed() {
        let observed = Observed {
            repository: Some(repo(BTreeMap::new())),
            image_present: false,
        };
        let err = diff(&wanted(true), &observed, &ours(), Goal::Converge).unwrap_err();
        assert!(
            err.to_string().contains("controller.image.ecrRepository"),
            "{err}"
        );
        let removal = diff(&wanted(false), &observed, &ours(), Goal::Remove).expect("plan");
        assert!(removal.changes.is_empty());
        let mine = Observed {
            repository: Some(repo(ours().tags())),
            image_present: true,
        };
        let removal = diff(&wanted(false), &mine, &ours(), Goal::Remove).expect("plan");
        assert_eq!(
            lines(&removal),
            ["- ecr repository jointer-controller/demo  (with its images)"]
        );
    }
}
