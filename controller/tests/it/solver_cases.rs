//! The solver's semantics, case by case, each checked by the independent plan checker too.

use std::collections::BTreeMap;
use std::sync::Arc;

use jointer_controller::api::{labels, Taint, TaintEffect};
use jointer_controller::core::scheduling::pod::{
    AffinityTerm, Selector, Toleration, TopologySpread, Unsatisfiable,
};
use jointer_controller::core::scheduling::{
    checker, solve, CapacityType, ExistingNode, InstanceType, Limits, Offering, Plan, PoolInput,
    Problem, Rejection, Requirement, Requirements, Resources, SchedPod,
};

const GIB: i64 = 1 << 30;

/// A type with `cpu` cores and `mem` GiB, no overhead, offered in zones a, b, c.
fn it(name: &str, cpu: i64, mem: i64, price: f64, spot: bool) -> Arc<InstanceType> {
    let mut offerings = Vec::new();
    for zone in ["zone-a", "zone-b", "zone-c"] {
        offerings.push(Offering {
            zone: zone.into(),
            capacity_type: CapacityType::OnDemand,
            price,
            available: true,
        });
        if spot {
            offerings.push(Offering {
                zone: zone.into(),
                capacity_type: CapacityType::Spot,
                price: price * 0.4,
                available: true,
            });
        }
    }
    let mut req = Requirements::new();
    req.add(labels::ARCH, Requirement::any_of(["amd64"]));
    req.add(
        labels::INSTANCE_FAMILY,
        Requirement::any_of([name.split('.').next().unwrap_or(name)]),
    );
    let capacity = Resources {
        cpu: cpu * 1000,
        memory: mem * GIB,
        pods: 110,
        ..Resources::ZERO
    };
    Arc::new(InstanceType::new(
        name,
        req,
        capacity,
        Resources::ZERO,
        offerings,
    ))
}

fn types() -> Vec<Arc<InstanceType>> {
    vec![
        it("m.large", 2, 8, 0.1, true),
        it("m.xlarge", 4, 16, 0.2, true),
        it("m.4xlarge", 16, 64, 0.8, true),
        it("c.xlarge", 4, 8, 0.17, false),
    ]
}

fn pool(name: &str) -> PoolInput {
    let mut requirements = Requirements::new();
    requirements.add(labels::NODEPOOL, Requirement::any_of([name]));
    PoolInput {
        name: name.into(),
        weight: 0,
        requirements,
        labels: BTreeMap::from([(labels::NODEPOOL.to_string(), name.to_string())]),
        taints: Vec::new(),
        instance_types: types(),
        daemon_overhead: Resources::ZERO,
        limits: Limits::default(),
        in_use: Resources::ZERO,
        nodes_in_use: 0,
        replicas: None,
        admitted: Default::default(),
    }
}

fn pod(name: &str, cpu_m: i64, mem_gib: i64) -> SchedPod {
    SchedPod::new("default", name, Resources::cpu_memory(cpu_m, mem_gib * GIB))
}

fn solved(problem: &Problem) -> Plan {
    let plan = solve(problem);
    let violations = checker::check(problem, &plan);
    assert!(violations.is_empty(), "plan check failed: {violations:#?}");
    plan
}

#[test]
fn small_pods_share_one_cheap_node() {
    let problem = Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: (0..3).map(|i| pod(&format!("p{i}"), 500, 1)).collect(),
    };
    let plan = solved(&problem);
    assert_eq!(plan.nodeclaims.len(), 1);
    let choice = plan.nodeclaims[0].launch_choice().unwrap();
    assert_eq!(choice.instance_type.name, "m.large");
    assert_eq!(
        choice.offering.capacity_type,
        CapacityType::Spot,
        "spot is cheaper when allowed"
    );
    // The NodeClaim keeps every type that still fits, cheapest first.
    let names: Vec<&str> = plan.nodeclaims[0]
        .instance_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names[0], "m.large");
    assert!(names.contains(&"m.xlarge") && names.contains(&"c.xlarge"));
}

#[test]
fn existing_nodes_are_filled_before_new_ones() {
    let node = ExistingNode {
        name: "node-1".into(),
        pool: Some("default".into()),
        labels: BTreeMap::from([(labels::ZONE.to_string(), "zone-a".to_string())]),
        taints: vec![],
        allocatable: Resources {
            cpu: 4000,
            memory: 16 * GIB,
            pods: 110,
            ..Resources::ZERO
        },
        requested: Resources {
            cpu: 3000,
            memory: GIB,
            pods: 3,
            ..Resources::ZERO
        },
        pods: vec![],
        label_requirements: Default::default(),
    };
    let problem = Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![node.into()],
        pods: vec![pod("fits", 1000, 1), pod("too-big", 2000, 1)],
    };
    let plan = solved(&problem);
    assert_eq!(plan.existing["node-1"].len(), 1);
    assert_eq!(plan.existing["node-1"][0].name, "fits");
    assert_eq!(plan.nodeclaims.len(), 1);
}

#[test]
fn heavier_pools_are_tried_first() {
    let mut heavy = pool("heavy");
    heavy.weight = 50;
    let problem = Problem {
        pools: vec![Arc::new(pool("light")), Arc::new(heavy)],
        existing: vec![],
        pods: vec![pod("p", 500, 1)],
    };
    assert_eq!(solved(&problem).nodeclaims[0].pool, "heavy");
}

#[test]
fn limits_stop_a_pool_and_say_so() {
    let mut limited = pool("limited");
    limited.limits = Limits {
        cpu: Some(4000),
        memory: None,
        nodes: None,
    };
    let pods = (0..3).map(|i| pod(&format!("p{i}"), 3000, 1)).collect();
    let problem = Problem {
        pools: vec![Arc::new(limited)],
        existing: vec![],
        pods,
    };
    let plan = solved(&problem);
    assert_eq!(plan.nodeclaims.len(), 1, "one 4-core node fits the limit");
    assert_eq!(plan.unschedulable.len(), 2);
    let message = plan.unschedulable[0].message();
    assert!(message.contains("limit cpu 4 reached"), "{message}");
}

#[test]
fn taints_need_tolerations() {
    let mut tainted = pool("gpu");
    tainted.taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    }];
    let mut tolerant = pod("tolerant", 500, 1);
    tolerant.tolerations = vec![Toleration {
        key: Some("dedicated".into()),
        value: Some("gpu".into()),
        effect: None,
    }];
    let problem = Problem {
        pools: vec![Arc::new(tainted)],
        existing: vec![],
        pods: vec![tolerant, pod("plain", 500, 1)],
    };
    let plan = solved(&problem);
    assert_eq!(plan.nodeclaims.len(), 1);
    assert_eq!(plan.unschedulable.len(), 1);
    assert!(plan.unschedulable[0]
        .message()
        .contains("taint dedicated=gpu:NoSchedule is not tolerated"));
}

#[test]
fn a_node_selector_outside_the_pool_names_the_requirement() {
    let mut p = pool("default");
    p.requirements
        .add(labels::ZONE, Requirement::any_of(["zone-a"]));
    let mut wants_b = pod("wants-b", 500, 1);
    let mut term = Requirements::new();
    term.add(labels::ZONE, Requirement::any_of(["zone-b"]));
    wants_b.node_terms = vec![term];
    let plan = solved(&Problem {
        pools: vec![Arc::new(p)],
        existing: vec![],
        pods: vec![wants_b],
    });
    let message = plan.unschedulable[0].message();
    assert!(
        message.contains("topology.kubernetes.io/zone")
            && message.contains("zone-a")
            && message.contains("zone-b"),
        "{message}"
    );
}

#[test]
fn a_pod_too_big_for_every_type_names_the_closest_and_the_shortfall() {
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: vec![pod("huge", 20_000, 8)],
    });
    let message = plan.unschedulable[0].message();
    assert!(
        message.contains("closest is m.4xlarge")
            && message.contains("cpu 20 > 16 allocatable (short by 4)"),
        "{message}"
    );
}

#[test]
fn required_node_affinity_terms_are_alternatives() {
    let mut p = pod("either", 500, 1);
    let mut impossible = Requirements::new();
    impossible.add(labels::ARCH, Requirement::any_of(["s390x"]));
    let mut possible = Requirements::new();
    possible.add(labels::ZONE, Requirement::any_of(["zone-c"]));
    p.node_terms = vec![impossible, possible];
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: vec![p],
    });
    assert_eq!(
        plan.nodeclaims[0].launch_choice().unwrap().offering.zone,
        "zone-c"
    );
}

#[test]
fn preferences_are_honoured_when_possible_and_relaxed_when_not() {
    let mut p = pod("prefers", 500, 1);
    let mut prefer_c = Requirements::new();
    prefer_c.add(labels::ZONE, Requirement::any_of(["zone-c"]));
    p.preferred_node = vec![prefer_c];
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: vec![p.clone()],
    });
    assert_eq!(
        plan.nodeclaims[0].launch_choice().unwrap().offering.zone,
        "zone-c"
    );

    let mut prefer_mars = Requirements::new();
    prefer_mars.add(labels::ZONE, Requirement::any_of(["mars-1"]));
    p.preferred_node = vec![prefer_mars];
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: vec![p],
    });
    assert_eq!(
        plan.nodeclaims.len(),
        1,
        "an impossible preference is dropped"
    );
}

fn labelled(name: &str, app: &str) -> SchedPod {
    let mut p = pod(name, 250, 1);
    p.labels.insert("app".into(), app.into());
    p
}

#[test]
fn hostname_anti_affinity_puts_each_replica_on_its_own_node() {
    let pods = (0..4)
        .map(|i| {
            let mut p = labelled(&format!("db-{i}"), "db");
            p.anti_affinity = vec![AffinityTerm {
                topology_key: labels::HOSTNAME.into(),
                selector: Selector::label("app", "db"),
                namespaces: vec![],
            }];
            p
        })
        .chain((0..4).map(|i| labelled(&format!("web-{i}"), "web")))
        .collect();
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods,
    });
    assert_eq!(plan.nodeclaims.len(), 4);
    assert!(plan.nodeclaims.iter().all(|n| n
        .pods
        .iter()
        .filter(|p| p.name.starts_with("db"))
        .count()
        == 1));
}

#[test]
fn pods_that_repel_each_other_per_node_open_the_nodes_the_others_then_fill() {
    // The web pods come first in upstream's order (more CPU) and alone would fill two big
    // nodes, leaving each db replica a node of its own: five nodes. The db replicas need three
    // nodes whatever happens, and those three hold everything.
    let db = (0..3).map(|i| {
        let mut p = pod(&format!("db-{i}"), 1000, 4);
        p.labels.insert("app".into(), "db".into());
        p.anti_affinity = vec![AffinityTerm {
            topology_key: labels::HOSTNAME.into(),
            selector: Selector::label("app", "db"),
            namespaces: vec![],
        }];
        p
    });
    let web = (0..16).map(|i| {
        let mut p = pod(&format!("web-{i}"), 2000, 7);
        let mut amd64 = Requirements::new();
        amd64.add(labels::ARCH, Requirement::any_of(["amd64"]));
        p.node_terms = vec![amd64];
        p
    });
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: db.chain(web).collect(),
    });
    assert_eq!(plan.nodeclaims.len(), 3, "{:#?}", plan.nodeclaims);
    for n in &plan.nodeclaims {
        assert_eq!(
            n.pods.iter().filter(|p| p.name.starts_with("db")).count(),
            1
        );
    }
}

/// A 250m pod labelled `app: web`, spread over zones with its kind (maxSkew 1).
fn zone_spread_web(name: &str) -> SchedPod {
    zone_spread_web_honoring(name, false)
}

/// The same; with `honor_taints` (`nodeTaintsPolicy: Honor`) its spread leaves out the zones
/// of nodes whose taints it does not tolerate.
fn zone_spread_web_honoring(name: &str, honor_taints: bool) -> SchedPod {
    let mut p = labelled(name, "web");
    p.spreads = vec![TopologySpread {
        max_skew: 1,
        topology_key: labels::ZONE.into(),
        when_unsatisfiable: Unsatisfiable::DoNotSchedule,
        selector: Selector::label("app", "web"),
        min_domains: None,
        honor_node_affinity: true,
        honor_taints,
    }];
    p
}

#[test]
fn zone_spread_balances_replicas_across_zones() {
    let pods = (0..6)
        .map(|i| zone_spread_web(&format!("web-{i}")))
        .collect();
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods,
    });
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for nc in &plan.nodeclaims {
        *per_zone
            .entry(nc.launch_choice().unwrap().offering.zone.clone())
            .or_default() += nc.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{per_zone:?}"
    );
}

#[test]
fn zone_affinity_keeps_pods_together() {
    let pods = (0..3)
        .map(|i| {
            let mut p = labelled(&format!("cache-{i}"), "cache");
            p.affinity = vec![AffinityTerm {
                topology_key: labels::ZONE.into(),
                selector: Selector::label("app", "cache"),
                namespaces: vec![],
            }];
            p.requests.cpu = 1500;
            p
        })
        .collect();
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods,
    });
    let zones: std::collections::BTreeSet<String> = plan
        .nodeclaims
        .iter()
        .map(|n| n.launch_choice().unwrap().offering.zone.clone())
        .collect();
    assert_eq!(zones.len(), 1);
}

#[test]
fn host_ports_do_not_collide() {
    let pods = (0..3)
        .map(|i| {
            let mut p = pod(&format!("proxy-{i}"), 100, 1);
            p.host_ports = vec![("TCP".into(), String::new(), 8080)];
            p
        })
        .collect();
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods,
    });
    assert_eq!(plan.nodeclaims.len(), 3);
}

#[test]
fn daemonset_overhead_is_counted_on_every_new_node() {
    let mut p = pool("default");
    p.daemon_overhead = Resources {
        cpu: 1000,
        memory: GIB,
        pods: 1,
        ..Resources::ZERO
    };
    // 1.5 cores of pods + 1 core of DaemonSets do not fit the 2-core type; the 4-core m is
    // cheaper than the 4-core c because it has spot.
    let plan = solved(&Problem {
        pools: vec![Arc::new(p)],
        existing: vec![],
        pods: vec![pod("p", 1500, 1)],
    });
    assert_eq!(
        plan.nodeclaims[0]
            .launch_choice()
            .unwrap()
            .instance_type
            .name,
        "m.xlarge"
    );
    assert_eq!(plan.nodeclaims[0].requests.cpu, 2500);
}

#[test]
fn min_values_keeps_enough_distinct_types() {
    let mut p = pool("default");
    let mut family = Requirement::any_of(["m", "c"]);
    family.min_values = Some(2);
    p.requirements.add(labels::INSTANCE_FAMILY, family);
    // 3 cores fit m.xlarge, m.4xlarge and c.xlarge: two families, fine.
    let plan = solved(&Problem {
        pools: vec![Arc::new(p.clone())],
        existing: vec![],
        pods: vec![pod("ok", 3000, 1)],
    });
    assert_eq!(plan.nodeclaims.len(), 1);
    assert!(
        plan.nodeclaims[0]
            .distinct_values(labels::INSTANCE_FAMILY)
            .len()
            >= 2
    );
    // 10 GiB fits only the m family: minValues 2 cannot hold.
    let plan = solved(&Problem {
        pools: vec![Arc::new(p)],
        existing: vec![],
        pods: vec![pod("big", 3000, 10)],
    });
    assert_eq!(plan.unschedulable.len(), 1);
    assert!(
        plan.unschedulable[0].message().contains("minValues 2"),
        "{}",
        plan.unschedulable[0].message()
    );
}

#[test]
fn an_unknown_resource_is_explained() {
    let mut p = pod("fpga", 500, 1);
    p.unknown_resources = vec!["xilinx.com/fpga".into()];
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: vec![p],
    });
    assert!(matches!(
        plan.unschedulable[0].reasons[0].1,
        Rejection::UnknownResource(_)
    ));
}

#[test]
fn no_pools_at_all_is_explained() {
    let plan = solved(&Problem {
        pools: vec![],
        existing: vec![],
        pods: vec![pod("p", 100, 1)],
    });
    assert!(plan.unschedulable[0].message().contains("no NodePool"));
}

#[test]
fn node_taints_policy_decides_whether_tainted_pools_count_as_spread_domains() {
    let mut open = pool("open");
    open.requirements
        .add(labels::ZONE, Requirement::any_of(["zone-a", "zone-b"]));
    let mut tainted = pool("tainted");
    tainted
        .requirements
        .add(labels::ZONE, Requirement::any_of(["zone-c"]));
    tainted.taints = vec![Taint {
        key: "dedicated".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
        time_added: None,
    }];
    let pods = |honor_taints: bool| -> Vec<SchedPod> {
        (0..4)
            .map(|i| zone_spread_web_honoring(&format!("web-{i}"), honor_taints))
            .collect()
    };
    // Honor: zone-c (only on tainted nodes) is not a domain, so a and b take two each.
    let plan = solved(&Problem {
        pools: vec![Arc::new(open.clone()), Arc::new(tainted.clone())],
        existing: vec![],
        pods: pods(true),
    });
    assert!(plan.unschedulable.is_empty());
    // Ignore (the Kubernetes default): zone-c stays empty, so a and b can hold one each.
    let plan = solved(&Problem {
        pools: vec![Arc::new(open), Arc::new(tainted)],
        existing: vec![],
        pods: pods(false),
    });
    assert_eq!(plan.unschedulable.len(), 2);
    assert!(
        plan.unschedulable[0]
            .message()
            .contains("topology spread on topology.kubernetes.io/zone"),
        "{}",
        plan.unschedulable[0].message()
    );
}

#[test]
fn min_values_best_effort_relaxes_to_what_fits_and_says_so() {
    use jointer_controller::core::scheduling::{solve_with, MinValuesPolicy, Policies};
    let mut p = pool("default");
    let mut family = Requirement::any_of(["m", "c"]);
    family.min_values = Some(2);
    p.requirements.add(labels::INSTANCE_FAMILY, family);
    let problem = Problem {
        pools: vec![Arc::new(p)],
        existing: vec![],
        pods: vec![pod("big", 3000, 10)],
    };
    let best_effort = Policies {
        min_values: MinValuesPolicy::BestEffort,
        ..Default::default()
    };
    let plan = solve_with(&problem, best_effort);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let claim = &plan.nodeclaims[0];
    assert!(claim.min_values_relaxed);
    assert_eq!(
        claim
            .requirements
            .get(labels::INSTANCE_FAMILY)
            .and_then(|r| r.min_values),
        Some(1),
        "lowered to the one family that fits"
    );
    // Strict (the default) still refuses it, and marks nothing.
    let strict = solve_with(&problem, Policies::default());
    assert_eq!(strict.unschedulable.len(), 1);
    assert!(solved(&Problem {
        pools: problem.pools.clone(),
        existing: vec![],
        pods: vec![pod("ok", 3000, 1)],
    })
    .nodeclaims
    .iter()
    .all(|c| !c.min_values_relaxed));
}

#[test]
fn preference_policy_ignore_takes_no_preference_into_account() {
    use jointer_controller::core::scheduling::{solve_with, Policies, PreferencePolicy};
    let mut p = pod("prefers", 500, 1);
    let mut prefer_c = Requirements::new();
    prefer_c.add(labels::ZONE, Requirement::any_of(["zone-c"]));
    p.preferred_node = vec![prefer_c];
    let problem = Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods: vec![p],
    };
    let respected = solve_with(&problem, Policies::default());
    assert_eq!(
        respected.nodeclaims[0]
            .requirements
            .get(labels::ZONE)
            .and_then(|r| r.values())
            .map(|v| v.len()),
        Some(1),
        "Respect pins the preferred zone"
    );
    let ignore = Policies {
        preferences: PreferencePolicy::Ignore,
        ..Default::default()
    };
    let ignored = solve_with(&problem, ignore);
    assert_eq!(ignored.nodeclaims.len(), 1);
    assert!(
        ignored.nodeclaims[0]
            .requirements
            .get(labels::ZONE)
            .and_then(|r| r.values())
            .is_none_or(|v| v.len() > 1),
        "Ignore leaves the zone open: {:?}",
        ignored.nodeclaims[0].requirements.get(labels::ZONE)
    );
}

/// An empty existing node in `zone`, room for anything these cases place.
fn zone_node(zone: &str) -> ExistingNode {
    ExistingNode {
        name: format!("node-{zone}"),
        pool: None,
        labels: BTreeMap::from([(labels::ZONE.to_string(), zone.to_string())]),
        taints: vec![],
        allocatable: Resources {
            pods: 110,
            ..Resources::cpu_memory(64_000, 256 * GIB)
        },
        requested: Resources::ZERO,
        pods: vec![],
        label_requirements: Default::default(),
    }
}

/// A pod labelled `my-label: own`; with `selects`, it spreads over zones (maxSkew 1) the pods
/// labelled `my-label: selects`, as upstream's benchmark pods do.
fn my_label_pod(name: &str, own: &str, selects: Option<&str>) -> SchedPod {
    let mut p = pod(name, 100, 1);
    p.labels.insert("my-label".into(), own.into());
    if let Some(value) = selects {
        p.spreads.push(TopologySpread {
            max_skew: 1,
            topology_key: labels::ZONE.into(),
            when_unsatisfiable: Unsatisfiable::DoNotSchedule,
            selector: Selector::label("my-label", value),
            min_domains: None,
            honor_node_affinity: true,
            honor_taints: false,
        });
    }
    p
}

/// `pods` on the existing node of each zone, as (zone, pod names).
fn on_zones(problem: &Problem, placed: &[(&str, &[&str])]) -> Plan {
    let key = |name: &str| {
        problem
            .pods
            .iter()
            .find(|p| p.key.name == name)
            .map(|p| p.key.clone())
            .expect("a pod of the problem")
    };
    Plan {
        nodeclaims: vec![],
        existing: placed
            .iter()
            .map(|(zone, names)| {
                (
                    format!("node-{zone}"),
                    names.iter().map(|n| key(n)).collect(),
                )
            })
            .collect(),
        unschedulable: vec![],
        // No witness: the checker searches an order itself.
        binding_order: vec![],
    }
}

fn three_zones(pods: Vec<SchedPod>) -> Problem {
    Problem {
        pools: vec![],
        existing: ["zone-a", "zone-b", "zone-c"]
            .map(|z| zone_node(z).into())
            .into(),
        pods,
    }
}

#[test]
fn a_spread_counts_pods_that_carry_none_and_one_valid_binding_order_is_enough() {
    // The spread pod does not match its own selector; the three pods it counts all end in its
    // zone. Bound first it passes (0 - 0 <= 1), so kube-scheduler can bind the plan; bound
    // after them it would be refused (3 - 0 > 1), which the order-dependence figure counts.
    let problem = three_zones(vec![
        my_label_pod("spread", "x", Some("y")),
        my_label_pod("y1", "y", None),
        my_label_pod("y2", "y", None),
        my_label_pod("y3", "y", None),
        my_label_pod("y4", "y", None),
    ]);
    let plan = on_zones(
        &problem,
        &[
            ("zone-a", &["spread", "y1", "y2", "y3"]),
            ("zone-b", &["y4"]),
        ],
    );
    assert_eq!(checker::check(&problem, &plan), Vec::<String>::new());
    assert_eq!(checker::refused_if_bound_last(&problem, &plan), 1);
}

#[test]
fn a_spread_pod_waits_in_the_binding_order_until_the_minimum_rises() {
    // Two pods that match their own selector share zone a: the second binds only once zones b
    // and c hold one each (1 + 1 - 1 <= 1).
    let problem = three_zones(vec![
        my_label_pod("s1", "y", Some("y")),
        my_label_pod("s2", "y", Some("y")),
        my_label_pod("b", "y", None),
        my_label_pod("c", "y", None),
    ]);
    let plan = on_zones(
        &problem,
        &[
            ("zone-a", &["s1", "s2"]),
            ("zone-b", &["b"]),
            ("zone-c", &["c"]),
        ],
    );
    assert_eq!(checker::check(&problem, &plan), Vec::<String>::new());
    assert_eq!(checker::refused_if_bound_last(&problem, &plan), 0);
}

#[test]
fn a_spread_no_binding_order_can_satisfy_is_reported() {
    let problem = three_zones(vec![
        my_label_pod("s1", "y", Some("y")),
        my_label_pod("s2", "y", Some("y")),
        my_label_pod("other", "x", None),
    ]);
    let plan = on_zones(
        &problem,
        &[("zone-a", &["s1", "s2"]), ("zone-b", &["other"])],
    );
    let problems = checker::check(&problem, &plan);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("no binding order places it")
            && problems[0].contains("would hold 2 matching pods against a minimum of 0"),
        "{problems:#?}"
    );
}

#[test]
fn pods_a_spread_only_counts_are_balanced_so_its_pods_hold_in_any_order() {
    // upstream's benchmark shape: spread pods whose selector matches other pods, not their own.
    let mut pods: Vec<SchedPod> = (0..12)
        .map(|i| my_label_pod(&format!("counted-{i}"), "y", None))
        .collect();
    // Larger, so the solver places the spread pods first and the counted pods must then keep
    // away from the spread pods' zone.
    pods.extend((0..6).map(|i| {
        let mut p = my_label_pod(&format!("spread-{i}"), "x", Some("y"));
        p.requests.cpu = 200;
        p
    }));
    let problem = Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods,
    };
    let plan = solved(&problem);
    assert!(plan.unschedulable.is_empty());
    assert_eq!(checker::refused_if_bound_last(&problem, &plan), 0);
}

#[test]
fn the_checker_judges_required_pod_affinity_and_anti_affinity_on_the_placement() {
    let term = |key: &str, app: &str| AffinityTerm {
        topology_key: key.into(),
        selector: Selector::label("app", app),
        namespaces: vec![],
    };
    let mut pods = Vec::new();
    for name in ["db-1", "db-2", "db-3"] {
        let mut p = labelled(name, "db");
        p.anti_affinity = vec![term(labels::ZONE, "db")];
        pods.push(p);
    }
    for name in ["cache-1", "cache-2", "cache-3"] {
        let mut p = labelled(name, "cache");
        p.affinity = vec![term(labels::ZONE, "cache")];
        pods.push(p);
    }
    // Follows the db pods, and none is its own.
    let mut follower = labelled("follower", "web");
    follower.affinity = vec![term(labels::ZONE, "db")];
    pods.push(follower);
    let problem = three_zones(pods);

    let valid = on_zones(
        &problem,
        &[
            (
                "zone-a",
                &["db-1", "cache-1", "cache-2", "cache-3", "follower"],
            ),
            ("zone-b", &["db-2"]),
            ("zone-c", &["db-3"]),
        ],
    );
    assert_eq!(checker::check(&problem, &valid), Vec::<String>::new());

    // Two db pods share zone-a (each is reported against the other); cache-3 left its set;
    // the follower is where no db pod is.
    let invalid = on_zones(
        &problem,
        &[
            ("zone-a", &["db-1", "db-2", "cache-1", "cache-2"]),
            ("zone-b", &["db-3"]),
            ("zone-c", &["cache-3", "follower"]),
        ],
    );
    let mut problems = checker::check(&problem, &invalid);
    problems.sort();
    assert_eq!(
        problems,
        vec![
            "pod default/cache-3: required affinity on topology.kubernetes.io/zone is not met",
            "pod default/db-1 has anti-affinity to default/db-2 but both are in topology.kubernetes.io/zone=zone-a",
            "pod default/db-2 has anti-affinity to default/db-1 but both are in topology.kubernetes.io/zone=zone-a",
            "pod default/follower: required affinity on topology.kubernetes.io/zone is not met",
        ]
    );
}

#[test]
fn nearly_empty_nodes_a_spread_leaves_fold_into_the_others_room() {
    // 22 zone-spread pods open a node per zone first; the plain pods then fill the first one
    // and the rest each get a small node of their own. Folded, the plan is the cheapest there
    // is: 19.5 CPU needs 20 CPU of spot capacity ($0.02 per CPU), one node in each zone.
    let mut pods: Vec<SchedPod> = (0..22)
        .map(|i| zone_spread_web(&format!("web-{i}")))
        .collect();
    pods.extend((0..10).map(|i| pod(&format!("api-{i}"), 500, 1)));
    pods.extend((0..6).map(|i| pod(&format!("worker-{i}"), 1500, 2)));
    let plan = solved(&Problem {
        pools: vec![Arc::new(pool("default"))],
        existing: vec![],
        pods,
    });
    let choices: Vec<_> = plan
        .nodeclaims
        .iter()
        .map(|n| n.launch_choice().expect("a launchable NodeClaim"))
        .collect();
    let zones: std::collections::BTreeSet<&str> =
        choices.iter().map(|c| c.offering.zone.as_str()).collect();
    let total: f64 = choices.iter().map(|c| c.offering.price).sum();
    assert_eq!(plan.nodeclaims.len(), 3, "{:#?}", plan.nodeclaims);
    assert_eq!(zones.len(), 3);
    assert!((total - 0.40).abs() < 1e-9, "${total}/h");
}

#[test]
fn a_pool_cheaper_than_a_price_keeps_the_types_it_can_have_for_less() {
    let names = |p: &PoolInput| -> Vec<String> {
        p.admitted().types.iter().map(|t| t.name.clone()).collect()
    };
    // Spot is 0.4 × on-demand: m.xlarge can be had for 0.08 and m.4xlarge for 0.32, while
    // c.xlarge (0.17, no spot) cannot be had for less than 0.17.
    let any = pool("p");
    assert_eq!(names(&any.cheaper_than(0.17)), ["m.large", "m.xlarge"]);
    assert_eq!(
        names(&any.cheaper_than(0.33)),
        ["m.large", "m.xlarge", "c.xlarge", "m.4xlarge"]
    );
    let mut on_demand = pool("od");
    on_demand.requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::any_of([labels::CAPACITY_ON_DEMAND]),
    );
    assert_eq!(names(&on_demand.cheaper_than(0.2)), ["m.large", "c.xlarge"]);
    let none = on_demand.cheaper_than(0.1);
    assert!(none.instance_types.is_empty() && names(&none).is_empty());
    // What the solver makes of it: no new node when no type is cheap enough.
    let problem = Problem {
        pools: vec![Arc::new(none)],
        existing: Vec::new(),
        pods: vec![pod("a", 500, 1)],
    };
    assert_eq!(solve(&problem).unschedulable.len(), 1);
}
