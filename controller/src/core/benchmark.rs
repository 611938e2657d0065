//! Benchmark inputs and the price lower bound they are measured against.
//!
//! `upstream` reproduces the input of Karpenter's own scheduling benchmark (see the README) so
//! the two solvers can be compared on the same problem; `lower_bound_per_hour` is the fluid
//! relaxation — the cheapest *fractional* mix of instance types covering the pods' total CPU,
//! memory and pod count — which no real plan can beat.

pub mod cluster;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::labels;
use crate::core::scheduling::pod::{AffinityTerm, Selector, TopologySpread, Unsatisfiable};
use crate::core::scheduling::{
    CapacityType, InstanceType, Offering, PoolInput, Problem, Requirement, Requirements, Resources,
    SchedPod,
};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// A small deterministic generator (SplitMix64), so a seed always yields the same workload.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Upstream's synthetic instance types: type i has i vCPU, 2i GiB, 10i pods, kube-reserved
/// 100m CPU and 10 Mi memory, spot in zones 1–2 and on-demand in zones 1–3, all priced
/// 0.1 per vCPU + 0.1 per GiB per hour.
pub fn upstream_instance_types(count: usize) -> Vec<Arc<InstanceType>> {
    (1..=count as i64)
        .map(|i| {
            let price = 0.1 * i as f64 + 0.1 * (2 * i) as f64;
            let offer = |zone: usize, capacity_type| Offering {
                zone: format!("test-zone-{zone}"),
                capacity_type,
                price,
                available: true,
            };
            let offerings = vec![
                offer(1, CapacityType::Spot),
                offer(2, CapacityType::Spot),
                offer(1, CapacityType::OnDemand),
                offer(2, CapacityType::OnDemand),
                offer(3, CapacityType::OnDemand),
            ];
            let mut requirements = Requirements::new();
            requirements.add(labels::ARCH, Requirement::any_of(["amd64"]));
            requirements.add(labels::OS, Requirement::any_of(["linux"]));
            let capacity = Resources {
                cpu: i * 1000,
                memory: 2 * i * GIB,
                pods: 10 * i,
                ..Resources::ZERO
            };
            let overhead = Resources {
                cpu: 100,
                memory: 10 * MIB,
                ..Resources::ZERO
            };
            Arc::new(InstanceType::new(
                &format!("fake-it-{i}"),
                requirements,
                capacity,
                overhead,
                offerings,
            ))
        })
        .collect()
}

fn pool(name: &str, instance_types: Vec<Arc<InstanceType>>) -> PoolInput {
    let mut requirements = Requirements::new();
    requirements.add(labels::NODEPOOL, Requirement::any_of([name]));
    PoolInput {
        name: name.to_string(),
        weight: 0,
        requirements,
        labels: BTreeMap::from([(labels::NODEPOOL.to_string(), name.to_string())]),
        taints: Vec::new(),
        instance_types,
        daemon_overhead: Resources::ZERO,
        limits: Default::default(),
        in_use: Resources::ZERO,
        nodes_in_use: 0,
        replicas: None,
        admitted: Default::default(),
    }
}

const CPUS: [i64; 5] = [100, 250, 500, 1000, 1500];
const MEMORIES_MIB: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

/// Upstream's benchmark workload (`makeDiversePods`): `pods` pods in five equal groups, the
/// remainder plain — plain pods labelled `my-label` with a random value; zone spread and
/// hostname spread pods (maxSkew 1, DoNotSchedule) labelled the same way, whose selector picks
/// *another* random `my-label` value, so a spread counts plain pods and other groups' pods and
/// a pod need not match its own selector; required zone self-affinity on a random
/// `my-affininity` value (upstream's spelling); required hostname anti-affinity among all
/// `app: nginx` pods (one per node).
pub fn upstream(pods: usize, instance_types: usize, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let share = pods / 5;
    let mut out = Vec::with_capacity(pods);
    for i in 0..pods {
        let group = if i < 5 * share { i / share.max(1) } else { 0 };
        let label = |rng: &mut Rng| rng.pick(&LABEL_VALUES).to_string();
        let own = label(&mut rng);
        let mut pod = SchedPod::new("default", &format!("pod-{i}"), Resources::ZERO);
        let spread = |key: &str, value: &str| TopologySpread {
            max_skew: 1,
            topology_key: key.to_string(),
            when_unsatisfiable: Unsatisfiable::DoNotSchedule,
            selector: Selector::label("my-label", value),
            min_domains: None,
            honor_node_affinity: true,
            honor_taints: false,
        };
        match group {
            1 | 2 => {
                pod.labels.insert("my-label".into(), own);
                let key = if group == 1 {
                    labels::ZONE
                } else {
                    labels::HOSTNAME
                };
                pod.spreads.push(spread(key, &label(&mut rng)));
            }
            3 => {
                pod.labels.insert("my-affininity".into(), own.clone());
                pod.affinity.push(AffinityTerm {
                    topology_key: labels::ZONE.into(),
                    selector: Selector::label("my-affininity", &own),
                    namespaces: Vec::new(),
                });
            }
            4 => {
                pod.labels.insert("app".into(), "nginx".into());
                pod.anti_affinity.push(AffinityTerm {
                    topology_key: labels::HOSTNAME.into(),
                    selector: Selector::label("app", "nginx"),
                    namespaces: Vec::new(),
                });
            }
            _ => {
                pod.labels.insert("my-label".into(), own);
            }
        }
        pod.requests = Resources::cpu_memory(*rng.pick(&CPUS), *rng.pick(&MEMORIES_MIB) * MIB);
        out.push(pod);
    }
    Problem {
        pools: vec![Arc::new(pool(
            "default",
            upstream_instance_types(instance_types),
        ))],
        existing: Vec::new(),
        pods: out,
    }
}

/// A realistic mixed workload for the `aws` profile: services of a few sizes, a memory-heavy
/// cache tier and CPU-heavy batch workers (no spread or affinity, so the lower bound is tight).
pub fn mixed_workload(pods: usize, seed: u64) -> Vec<SchedPod> {
    let mut rng = Rng::new(seed);
    // (share of pods in 1/20, cpu m, memory Mi)
    const SHAPES: [(usize, i64, i64); 6] = [
        (6, 250, 512),
        (4, 500, 1024),
        (3, 1000, 2048),
        (2, 2000, 4096),
        (3, 500, 8192),
        (2, 4000, 4096),
    ];
    (0..pods)
        .map(|i| {
            let mut slot = rng.below(20);
            let shape = SHAPES.iter().find(|(share, _, _)| {
                if slot < *share {
                    true
                } else {
                    slot -= share;
                    false
                }
            });
            let (_, cpu, mem) = shape.copied().unwrap_or(SHAPES[0]);
            SchedPod::new(
                "default",
                &format!("pod-{i}"),
                Resources::cpu_memory(cpu, mem * MIB),
            )
        })
        .collect()
}

/// The cheapest fractional mix of the pools' instance types (at their cheapest offering) that
/// covers the pods' total CPU, memory and pod count: a lower bound on any plan's $/hour.
pub fn lower_bound_per_hour(problem: &Problem) -> Option<f64> {
    let demand = problem
        .pods
        .iter()
        .fold(Resources::ZERO, |acc, p| acc + p.requests);
    let offered: Vec<(f64, Resources)> = problem
        .pools
        .iter()
        .flat_map(|pool| {
            pool.instance_types
                .iter()
                .filter(|t| t.requirements.conflict(&pool.requirements).is_none())
                .filter_map(|t| {
                    t.cheapest(&pool.requirements)
                        .map(|o| (o.price, t.allocatable - pool.daemon_overhead))
                })
        })
        .collect();
    crate::core::scheduling::fluid::fluid_mix(&offered, demand).map(|(price, _)| price)
}

/// The `aws` profile: the embedded catalog's us-east-1 types under a NodePool like the
/// default template (categories c/m/r, spot and on-demand, amd64 and arm64) and
/// [`mixed_workload`].
pub fn aws(pods: usize, seed: u64) -> Result<Problem, crate::core::catalog::CatalogError> {
    let catalog = crate::core::catalog::Catalog::embedded()?;
    let types = catalog.instance_types("us-east-1", &Default::default(), None)?;
    let mut p = pool("default", types);
    p.requirements.add(
        labels::INSTANCE_CATEGORY,
        Requirement::any_of(["c", "m", "r"]),
    );
    p.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::any_of(["spot", "on-demand"]),
    );
    p.requirements
        .add(labels::ARCH, Requirement::any_of(["amd64", "arm64"]));
    Ok(Problem {
        pools: vec![Arc::new(p)],
        existing: Vec::new(),
        pods: mixed_workload(pods, seed),
    })
}
