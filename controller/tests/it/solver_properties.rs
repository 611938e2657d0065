//! Property tests: random NodePools, existing nodes and workloads with random constraints go
//! through the solver, and the independent checker must find every plan valid.

use std::collections::BTreeMap;
use std::sync::Arc;

use jointer_controller::api::{labels, Taint, TaintEffect};
use jointer_controller::core::scheduling::pod::{
    AffinityTerm, Selector, Toleration, TopologySpread, Unsatisfiable,
};
use jointer_controller::core::scheduling::{
    checker, solve, CapacityType, ExistingNode, InstanceType, Limits, Offering, PoolInput, Problem,
    Requirement, Requirements, Resources, SchedPod,
};
use proptest::prelude::*;

const GIB: i64 = 1 << 30;
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn instance_types() -> Vec<Arc<InstanceType>> {
    [
        ("s", 2, 4, 0.08),
        ("m", 4, 16, 0.19),
        ("l", 8, 32, 0.38),
        ("c", 8, 16, 0.34),
        ("r", 4, 32, 0.25),
        ("xl", 32, 128, 1.5),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, cpu, mem, price))| {
        let mut offerings = Vec::new();
        for (z, zone) in ZONES.iter().enumerate() {
            // Not every type everywhere; spot only on some.
            if (i + z) % 4 != 3 {
                offerings.push(Offering {
                    zone: zone.to_string(),
                    capacity_type: CapacityType::OnDemand,
                    price: *price,
                    available: true,
                });
            }
            if (i + z) % 2 == 0 {
                offerings.push(Offering {
                    zone: zone.to_string(),
                    capacity_type: CapacityType::Spot,
                    price: price * 0.5,
                    available: true,
                });
            }
        }
        let mut req = Requirements::new();
        req.add(
            labels::ARCH,
            Requirement::any_of([if i % 3 == 2 { "arm64" } else { "amd64" }]),
        );
        let capacity = Resources {
            cpu: cpu * 1000,
            memory: mem * GIB,
            pods: 20 + 10 * *cpu,
            ..Resources::ZERO
        };
        let overhead = Resources {
            cpu: 100,
            memory: GIB / 4,
            ..Resources::ZERO
        };
        Arc::new(InstanceType::new(
            &format!("{name}.type"),
            req,
            capacity,
            overhead,
            offerings,
        ))
    })
    .collect()
}

#[derive(Debug, Clone)]
enum Constraint {
    None,
    Zone(usize),
    Arch(bool),
    Tolerates,
    /// Labelled as spreads select, with no constraint of its own.
    Counted(u8),
    /// (own label, selected value): a spread pod need not match its own selector.
    ZoneSpread(u8, u8),
    HostSpread(u8, u8),
    HostAnti(u8),
    ZoneAffinity(u8),
    HostPort(u16),
    PreferZone(usize),
    SpotOnly,
}

fn constraint() -> impl Strategy<Value = Constraint> {
    prop_oneof![
        3 => Just(Constraint::None),
        1 => (0..3usize).prop_map(Constraint::Zone),
        1 => any::<bool>().prop_map(Constraint::Arch),
        1 => Just(Constraint::Tolerates),
        1 => (0..3u8).prop_map(Constraint::Counted),
        1 => (0..3u8, 0..3u8).prop_map(|(own, sel)| Constraint::ZoneSpread(own, sel)),
        1 => (0..3u8, 0..3u8).prop_map(|(own, sel)| Constraint::HostSpread(own, sel)),
        1 => (0..3u8).prop_map(Constraint::HostAnti),
        1 => (0..3u8).prop_map(Constraint::ZoneAffinity),
        1 => (0..3u16).prop_map(|p| Constraint::HostPort(8000 + p)),
        1 => (0..3usize).prop_map(Constraint::PreferZone),
        1 => Just(Constraint::SpotOnly),
    ]
}

fn make_pod(i: usize, cpu: i64, mem: i64, c: &Constraint) -> SchedPod {
    let mut p = SchedPod::new(
        "default",
        &format!("pod-{i}"),
        Resources::cpu_memory(cpu, mem * GIB / 4),
    );
    let term = |key: &str, value: &str| {
        let mut r = Requirements::new();
        r.add(key, Requirement::any_of([value]));
        r
    };
    let spread = |key: &str, label: &str, v: u8| TopologySpread {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: Unsatisfiable::DoNotSchedule,
        selector: Selector::label(label, &v.to_string()),
        min_domains: None,
        honor_node_affinity: true,
        honor_taints: false,
    };
    match c {
        Constraint::None => {}
        Constraint::Zone(z) => p.node_terms = vec![term(labels::ZONE, ZONES[*z])],
        Constraint::Arch(arm) => {
            p.node_terms = vec![term(labels::ARCH, if *arm { "arm64" } else { "amd64" })]
        }
        Constraint::Tolerates => {
            p.tolerations = vec![Toleration {
                key: Some("dedicated".into()),
                value: None,
                effect: None,
            }]
        }
        Constraint::Counted(v) => {
            p.labels.insert("zs".into(), v.to_string());
            p.labels.insert("hs".into(), v.to_string());
        }
        Constraint::ZoneSpread(own, selected) => {
            p.labels.insert("zs".into(), own.to_string());
            p.spreads = vec![spread(labels::ZONE, "zs", *selected)];
        }
        Constraint::HostSpread(own, selected) => {
            p.labels.insert("hs".into(), own.to_string());
            p.spreads = vec![spread(labels::HOSTNAME, "hs", *selected)];
        }
        Constraint::HostAnti(v) => {
            p.labels.insert("anti".into(), v.to_string());
            p.anti_affinity = vec![AffinityTerm {
                topology_key: labels::HOSTNAME.into(),
                selector: Selector::label("anti", &v.to_string()),
                namespaces: vec![],
            }];
        }
        Constraint::ZoneAffinity(v) => {
            p.labels.insert("aff".into(), v.to_string());
            p.affinity = vec![AffinityTerm {
                topology_key: labels::ZONE.into(),
                selector: Selector::label("aff", &v.to_string()),
                namespaces: vec![],
            }];
        }
        Constraint::HostPort(port) => {
            p.host_ports = vec![("TCP".into(), String::new(), i32::from(*port))]
        }
        Constraint::PreferZone(z) => p.preferred_node = vec![term(labels::ZONE, ZONES[*z])],
        Constraint::SpotOnly => p.node_terms = vec![term(labels::CAPACITY_TYPE, "spot")],
    }
    p
}

#[derive(Debug, Clone)]
struct PoolSpec {
    zones: Vec<usize>,
    tainted: bool,
    cpu_limit: Option<i64>,
    weight: i32,
    spot: bool,
}

fn pool_spec() -> impl Strategy<Value = PoolSpec> {
    (
        proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3),
        any::<bool>(),
        proptest::option::of(8..96i64),
        0..3i32,
        any::<bool>(),
    )
        .prop_map(|(zones, tainted, cpu_limit, weight, spot)| PoolSpec {
            zones,
            tainted,
            cpu_limit,
            weight,
            spot,
        })
}

fn make_pool(i: usize, spec: &PoolSpec) -> PoolInput {
    let name = format!("pool-{i}");
    let mut requirements = Requirements::new();
    requirements.add(labels::NODEPOOL, Requirement::any_of([name.as_str()]));
    requirements.add(
        labels::ZONE,
        Requirement::any_of(spec.zones.iter().map(|z| ZONES[*z])),
    );
    let capacity: &[&str] = if spec.spot {
        &["spot", "on-demand"]
    } else {
        &["on-demand"]
    };
    requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::any_of(capacity.iter().copied()),
    );
    PoolInput {
        labels: BTreeMap::from([(labels::NODEPOOL.to_string(), name.clone())]),
        name,
        weight: spec.weight,
        requirements,
        taints: if spec.tainted {
            vec![Taint {
                key: "dedicated".into(),
                value: Some("x".into()),
                effect: TaintEffect::NoSchedule,
                time_added: None,
            }]
        } else {
            vec![]
        },
        instance_types: instance_types(),
        daemon_overhead: Resources {
            cpu: 50,
            memory: GIB / 16,
            pods: 1,
            ..Resources::ZERO
        },
        limits: Limits {
            cpu: spec.cpu_limit.map(|c| c * 1000),
            memory: None,
            nodes: None,
        },
        in_use: Resources::ZERO,
        nodes_in_use: 0,
        replicas: None,
        admitted: Default::default(),
    }
}

fn existing_node(i: usize, zone: usize, free_cpu: i64) -> ExistingNode {
    ExistingNode {
        name: format!("existing-{i}"),
        pool: None,
        labels: BTreeMap::from([
            (labels::ZONE.to_string(), ZONES[zone].to_string()),
            (labels::ARCH.to_string(), "amd64".to_string()),
        ]),
        taints: vec![],
        allocatable: Resources {
            cpu: 4000,
            memory: 16 * GIB,
            pods: 50,
            ..Resources::ZERO
        },
        requested: Resources {
            cpu: 4000 - free_cpu,
            memory: 4 * GIB,
            pods: 5,
            ..Resources::ZERO
        },
        pods: vec![],
        label_requirements: Default::default(),
    }
}

fn problem() -> impl Strategy<Value = Problem> {
    let pods = proptest::collection::vec((100..6000i64, 1..60i64, constraint()), 1..60);
    let pools = proptest::collection::vec(pool_spec(), 0..3);
    let existing = proptest::collection::vec((0..3usize, 0..4000i64), 0..3);
    (pods, pools, existing).prop_map(|(pods, pools, existing)| Problem {
        pools: pools
            .iter()
            .enumerate()
            .map(|(i, s)| make_pool(i, s).into())
            .collect(),
        existing: existing
            .iter()
            .enumerate()
            .map(|(i, (z, free))| existing_node(i, *z, *free).into())
            .collect(),
        pods: pods
            .iter()
            .enumerate()
            .map(|(i, (cpu, mem, c))| make_pod(i, *cpu, *mem, c))
            .collect(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_plan_passes_the_independent_checker(problem in problem()) {
        let plan = solve(&problem);
        let violations = checker::check(&problem, &plan);
        prop_assert!(violations.is_empty(), "{:#?}", violations);
    }

    #[test]
    fn every_unschedulable_pod_has_a_reason_per_pool(problem in problem()) {
        let plan = solve(&problem);
        for u in &plan.unschedulable {
            prop_assert_eq!(u.reasons.len(), problem.pools.len());
            prop_assert!(!u.message().is_empty());
        }
    }

    #[test]
    fn solving_is_deterministic(problem in problem()) {
        let a = solve(&problem);
        let b = solve(&problem);
        let summary = |p: &jointer_controller::core::scheduling::Plan| p.nodeclaims.iter().map(|n| (n.pool.clone(), n.pods.clone(), n.instance_types.len())).collect::<Vec<_>>();
        prop_assert_eq!(summary(&a), summary(&b));
        prop_assert_eq!(a.unschedulable.len(), b.unschedulable.len());
    }
}

/// A small packing problem: one on-demand pool in one zone, up to five types with explicit
/// allocatable, up to ten plain pods that each fit some type.
fn small_packing() -> impl Strategy<Value = Problem> {
    let types = proptest::collection::vec((1..=16i64, 1..=64i64, 1..=100u32), 1..=5);
    let pods = proptest::collection::vec((100..=8000i64, 128..=16384i64), 1..=10);
    (types, pods).prop_map(|(types, pods)| {
        let types: Vec<Arc<InstanceType>> = types
            .iter()
            .enumerate()
            .map(|(i, (cpu, gib, cents))| {
                Arc::new(InstanceType::new(
                    &format!("t{i}"),
                    Requirements::new(),
                    Resources {
                        cpu: cpu * 1000,
                        memory: gib * GIB,
                        pods: 110,
                        ..Resources::ZERO
                    },
                    Resources::ZERO,
                    vec![Offering {
                        zone: ZONES[0].into(),
                        capacity_type: CapacityType::OnDemand,
                        price: f64::from(*cents) / 100.0,
                        available: true,
                    }],
                ))
            })
            .collect();
        let pods = pods
            .iter()
            .enumerate()
            .map(|(i, (cpu, mib))| {
                SchedPod::new(
                    "default",
                    &format!("pod-{i}"),
                    Resources::cpu_memory(*cpu, mib << 20),
                )
            })
            .filter(|p| types.iter().any(|t| p.requests.fits_in(&t.allocatable)))
            .collect();
        let mut requirements = Requirements::new();
        requirements.add(labels::NODEPOOL, Requirement::any_of(["small"]));
        Problem {
            pools: vec![Arc::new(PoolInput {
                name: "small".into(),
                weight: 0,
                requirements,
                labels: BTreeMap::from([(labels::NODEPOOL.to_string(), "small".to_string())]),
                taints: vec![],
                instance_types: types,
                daemon_overhead: Resources::ZERO,
                limits: Limits::default(),
                in_use: Resources::ZERO,
                nodes_in_use: 0,
                replicas: None,
                admitted: Default::default(),
            })],
            existing: vec![],
            pods,
        }
    })
}

/// The cheapest way to run every pod, by exhaustive search: the cheapest type for each subset
/// of pods, then the best partition into subsets (dynamic programming over subsets, 3^n).
fn optimum_per_hour(problem: &Problem) -> f64 {
    let pods = &problem.pods;
    let types = &problem.pools[0].instance_types;
    let n = pods.len();
    let node_price: Vec<f64> = (0..1usize << n)
        .map(|set| {
            let requests = (0..n)
                .filter(|i| set & (1 << i) != 0)
                .fold(Resources::ZERO, |acc, i| acc + pods[i].requests);
            types
                .iter()
                .filter(|t| requests.fits_in(&t.allocatable))
                .map(|t| t.offerings[0].price)
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let mut best = vec![f64::INFINITY; 1 << n];
    best[0] = 0.0;
    for set in 1..1usize << n {
        // Every partition of `set` has one part holding its lowest pod: enumerate that part.
        let low = set & set.wrapping_neg();
        let rest = set ^ low;
        let mut sub = rest;
        loop {
            let part = sub | low;
            best[set] = best[set].min(node_price[part] + best[set ^ part]);
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
    }
    best[(1 << n) - 1]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn small_packings_cost_within_five_percent_of_the_optimum(problem in small_packing()) {
        let plan = solve(&problem);
        prop_assert!(plan.unschedulable.is_empty(), "{:#?}", plan.unschedulable);
        let optimum = optimum_per_hour(&problem);
        let price = plan.price_per_hour();
        prop_assert!(
            price <= optimum * 1.05 + 1e-9,
            "the plan costs {price:.2}/hour, the optimum {optimum:.2}/hour: {:#?}",
            plan.nodeclaims.iter().map(|n| (n.launch_choice().map(|c| c.instance_type.name.clone()), n.pods.clone())).collect::<Vec<_>>()
        );
    }
}
