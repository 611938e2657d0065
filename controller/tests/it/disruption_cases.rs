//! The disruption core case by case: which node goes, how, and why the others stay.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jointer_controller::api::labels;
use jointer_controller::core::disruption::{
    decide, revalidate, ConsolidationTimeouts, Inputs, Method,
};
use jointer_controller::core::scheduling::{
    CapacityType, InstanceType, Offering, Requirement, Requirements, Resources,
};
use jointer_controller::core::state::{types_of_pools, Snapshot};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

const LONG_AGO: &str = "2026-11-30T10:00:00Z";
const NOW: &str = "2026-11-30T12:00:00Z";

fn itype(name: &str, cpu: i64, price: f64) -> Arc<InstanceType> {
    itype_offered(name, cpu, &[(CapacityType::OnDemand, price)])
}

/// A type offered in zone z1 as each of `offers` (capacity type, price).
fn itype_offered(name: &str, cpu: i64, offers: &[(CapacityType, f64)]) -> Arc<InstanceType> {
    let mut req = Requirements::new();
    req.add(labels::ARCH, Requirement::any_of(["amd64"]));
    req.add(labels::OS, Requirement::any_of(["linux"]));
    let capacity = Resources {
        pods: 110,
        ..Resources::cpu_memory(cpu * 1000, (cpu * 4) << 30)
    };
    Arc::new(InstanceType::new(
        name,
        req,
        capacity,
        Resources::ZERO,
        offers
            .iter()
            .map(|&(capacity_type, price)| Offering {
                zone: "z1".into(),
                capacity_type,
                price,
                available: true,
            })
            .collect(),
    ))
}

fn types() -> HashMap<String, Vec<Arc<InstanceType>>> {
    HashMap::from([(
        "c".to_string(),
        vec![
            itype("small", 2, 0.1),
            itype("mid", 4, 0.2),
            itype("big", 8, 0.4),
        ],
    )])
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("object"))
}

fn pool(disruption: Value, expire: &str) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p", "uid": "u"},
        "spec": {"template": {"spec": {"expireAfter": expire, "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}}},
            "disruption": disruption}})
}

/// A pool whose budget lets every node go at once (the default, 10 % rounded up, lets one).
fn pool_of_unbounded_budget() -> Value {
    pool(
        json!({"consolidateAfter": "30s", "budgets": [{"nodes": "100%"}]}),
        "720h",
    )
}

fn class() -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}], "role": "r"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": LONG_AGO}]}})
}

/// A node of `itype` (and its NodeClaim), `last_pod_event` ago.
fn node(
    name: &str,
    itype: &str,
    cpu: i64,
    last_pod_event: &str,
    annotations: Value,
) -> (Value, Value) {
    let labels = json!({"karpenter.sh/nodepool": "p", "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/zone": "z1",
        "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name});
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"providerID": format!("aws:///z1/i-{name}")},
        "status": {"allocatable": {"cpu": cpu.to_string(), "memory": format!("{}Gi", cpu * 4), "pods": "110"}}});
    let claim = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("claim-{name}"), "labels": labels, "creationTimestamp": LONG_AGO},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}},
        "status": {"nodeName": name, "providerID": format!("aws:///z1/i-{name}"), "lastPodEventTime": last_pod_event,
            "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": LONG_AGO}]}});
    (node, claim)
}

fn pod(name: &str, node: &str, cpu: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Running", "startTime": LONG_AGO}})
}

fn snapshot(pool: Value, nodes: &[(Value, Value)], pods: &[Value]) -> Snapshot {
    Snapshot {
        pods: pods.iter().cloned().map(from).collect(),
        nodes: nodes.iter().map(|(n, _)| from(n.clone())).collect(),
        nodeclaims: nodes.iter().map(|(_, c)| from(c.clone())).collect(),
        nodepools: vec![from(pool)],
        nodeclasses: vec![from(class())],
        daemonsets: vec![],
        pdbs: vec![],
        nodeoverlays: vec![],
        buffers: Default::default(),
    }
}

fn run(snap: &Snapshot) -> jointer_controller::core::disruption::Decision {
    run_with(snap, types(), &Knobs::default())
}

/// What a case may set besides the objects and the types.
#[derive(Default)]
struct Knobs<'a> {
    spot_to_spot: bool,
    timeouts: ConsolidationTimeouts,
    single_node_from: Option<&'a str>,
    nominated: HashSet<String>,
}

/// Decides over `snap` with `types` per class, as `knobs` say, at `NOW`.
fn run_with(
    snap: &Snapshot,
    types: HashMap<String, Vec<Arc<InstanceType>>>,
    knobs: &Knobs,
) -> jointer_controller::core::disruption::Decision {
    let (types_of_pool, _) = types_of_pools(snap, &types);
    decide(&Inputs {
        snapshot: snap,
        types_of_class: &types,
        types_of_pool: &types_of_pool,
        now: NOW.parse::<Timestamp>().unwrap(),
        settle: Duration::from_secs(30),
        spot_to_spot: knobs.spot_to_spot,
        single_node_from: knobs.single_node_from,
        nominated: &knobs.nominated,
        policies: Default::default(),
        timeouts: knobs.timeouts,
    })
}

fn kept_reason(d: &jointer_controller::core::disruption::Decision, claim: &str) -> String {
    let all: Vec<&str> = d
        .kept
        .iter()
        .filter(|(c, _)| c == claim)
        .map(|(_, w)| w.as_str())
        .collect();
    all.join("; ")
}

#[test]
fn an_empty_node_is_deleted() {
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "small", 2, LONG_AGO, json!({}))],
        &[],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Empty);
    assert_eq!(c.candidates, ["claim-a"]);
    assert!((c.saving - 0.1).abs() < 1e-9);
}

/// A full node whose pods fit in no other node's free room, and whose pods no cheaper type
/// holds, is kept by single-node consolidation without a simulation (at a thousand full
/// nodes, simulating each took seconds a pass); with a cheaper type that holds them, it is
/// simulated and replaced.
#[test]
fn single_node_keeps_a_node_whose_pods_fit_nowhere_and_no_cheaper_type_holds() {
    let nodes = [
        node("a", "mid", 4, LONG_AGO, json!({})),
        node("b", "mid", 4, LONG_AGO, json!({})),
    ];
    let pods = [
        pod("pa", "a", "3", json!({})),
        pod("pb", "b", "3", json!({})),
    ];
    let snap = snapshot(pool_of_unbounded_budget(), &nodes, &pods);
    let mid_and_big = || vec![itype("mid", 4, 0.2), itype("big", 8, 0.4)];
    let d = run_over(&snap, mid_and_big());
    assert!(d.command.is_none(), "{:?}", d.command);
    for claim in ["claim-a", "claim-b"] {
        assert!(
            kept_reason(&d, claim).contains("fits in no other node's free room"),
            "{:?}",
            d.kept
        );
    }
    // A 3-CPU type at less than a mid's price: each node is replaced by one.
    let mut cheaper = mid_and_big();
    cheaper.push(itype("three", 3, 0.15));
    let d = run_over(&snap, cheaper);
    let c = d.command.unwrap_or_else(|| panic!("{:?}", d.kept));
    assert_eq!(c.candidates.len(), 1);
    assert_eq!(c.replacements.len(), 1);
    assert!((c.saving - 0.05).abs() < 1e-9, "{}", c.saving);
}

/// Nodes keep emptying during a scale-down: an emptiness command holds for those of its
/// nodes that are still empty, whatever else has emptied meanwhile.
#[test]
fn an_emptiness_command_holds_for_its_nodes_still_empty() {
    let nodes = [
        node("a", "small", 2, LONG_AGO, json!({})),
        node("b", "small", 2, LONG_AGO, json!({})),
    ];
    let pool = || pool(json!({"consolidateAfter": "30s"}), "720h");
    let command = run(&snapshot(
        pool(),
        &nodes,
        &[pod("pb", "b", "500m", json!({}))],
    ))
    .command
    .expect("a command");
    assert_eq!(
        (command.method, command.candidates.clone()),
        (Method::Empty, vec!["claim-a".to_string()])
    );
    // b's pod went too: the decision now empties a and b; the command still deletes a.
    let again =
        revalidate_over(&snapshot(pool(), &nodes, &[]), &types(), &command).expect("still valid");
    assert_eq!(again.candidates, ["claim-a"]);
    assert!((again.saving - 0.1).abs() < 1e-9, "{}", again.saving);
    // A pod landed on a, and b emptied: none of the command's nodes is empty any more.
    let why = revalidate_over(
        &snapshot(pool(), &nodes, &[pod("pa", "a", "500m", json!({}))]),
        &types(),
        &command,
    )
    .expect_err("no longer valid");
    assert!(why.contains("none of its nodes"), "{why}");
}

/// A node the provisioner just planned pending pods onto looks empty until kube-scheduler
/// binds them: kept, whether nominated by its Node's name or (still in flight when planned)
/// its NodeClaim's.
#[test]
fn a_nominated_empty_node_is_kept_until_its_pods_bind() {
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "small", 2, LONG_AGO, json!({}))],
        &[],
    );
    for name in ["a", "claim-a"] {
        let knobs = Knobs {
            nominated: HashSet::from([name.to_string()]),
            ..Default::default()
        };
        let d = run_with(&snap, types(), &knobs);
        assert!(
            d.command.is_none(),
            "{name}: {:?}",
            d.command.map(|c| c.candidates)
        );
        assert!(
            kept_reason(&d, "claim-a").contains("nominated"),
            "{:?}",
            d.kept
        );
    }
}

#[test]
fn a_zero_budget_keeps_every_node_and_says_so() {
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "30s", "budgets": [{"nodes": "0"}]}),
            "720h",
        ),
        &[node("a", "small", 2, LONG_AGO, json!({}))],
        &[],
    );
    let d = run(&snap);
    assert!(d.command.is_none());
    assert!(
        kept_reason(&d, "claim-a").contains("budget"),
        "{:?}",
        d.kept
    );
}

#[test]
fn an_underutilized_node_is_replaced_only_by_a_strictly_cheaper_one() {
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "big", 8, LONG_AGO, json!({}))],
        &[pod("p1", "a", "1", json!({}))],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Underutilized);
    assert_eq!(c.replacements.len(), 1);
    let replacement = &c.replacements[0];
    assert_eq!(
        replacement
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["small", "mid"],
        "only types cheaper than the node it replaces, even at their dearest"
    );
    assert!((c.saving - 0.3).abs() < 1e-9);
    // Already on the cheapest type that fits: nothing to gain.
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "small", 2, LONG_AGO, json!({}))],
        &[pod("p1", "a", "1", json!({}))],
    );
    let d = run(&snap);
    assert!(d.command.is_none());
    assert!(
        kept_reason(&d, "claim-a").contains("cheaper"),
        "{:?}",
        d.kept
    );
}

/// A Savings Plan makes the big type the cheapest: its node is priced as the overlay says,
/// so consolidation neither replaces it by a list-price-cheaper type nor churns it.
#[test]
fn consolidation_prices_nodes_and_replacements_with_the_node_overlays() {
    let mut snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "big", 8, LONG_AGO, json!({}))],
        &[pod("p1", "a", "1", json!({}))],
    );
    snap.nodeoverlays = vec![from(json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "savings-plan"},
        "spec": {"price": "0.05", "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["big"]}]},
    }))];
    let d = run(&snap);
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains("cheaper"),
        "{:?}",
        d.kept
    );
}

#[test]
fn a_node_whose_pods_fit_elsewhere_is_deleted_without_a_replacement() {
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[
            node("a", "big", 8, LONG_AGO, json!({})),
            node("b", "big", 8, LONG_AGO, json!({})),
        ],
        &[
            pod("p1", "a", "1", json!({})),
            // b stays (so only a is a candidate) and has room for a's pod.
            pod(
                "p2",
                "b",
                "6",
                json!({"karpenter.sh/do-not-disrupt": "true"}),
            ),
        ],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Underutilized);
    assert_eq!(c.candidates, ["claim-a"]);
    assert!(c.replacements.is_empty());
}

/// Node a (8 CPU) holds pods `a-0`, `a-1`, … of `sizes` CPU; b and c (4 CPU) stay, with
/// `b_used` and `c_used` CPU taken.
fn pods_to_move(sizes: &[&str], b_used: &str, c_used: &str) -> Snapshot {
    let stay = json!({"karpenter.sh/do-not-disrupt": "true"});
    let mut pods: Vec<Value> = sizes
        .iter()
        .enumerate()
        .map(|(i, cpu)| pod(&format!("a-{i}"), "a", cpu, json!({})))
        .collect();
    pods.push(pod("b-stays", "b", b_used, stay.clone()));
    pods.push(pod("c-stays", "c", c_used, stay));
    snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[
            node("a", "big", 8, LONG_AGO, json!({})),
            node("b", "mid", 4, LONG_AGO, json!({})),
            node("c", "mid", 4, LONG_AGO, json!({})),
        ],
        &pods,
    )
}

#[test]
fn a_node_stays_when_kube_scheduler_could_bind_its_pods_so_one_finds_no_room() {
    // b has 1.2 CPU free and c 2.0: the pods fit as planned (1.2 on b, both 1.0 on c), but
    // kube-scheduler sends each evicted pod to the least allocated node, the biggest first as
    // the drain evicts them: 1.2 to c, a 1.0 to b, and the other 1.0 finds no room. Deleting a
    // would buy a node for it, which the next pass would find underused: the churn upstream
    // users report. So a stays, and says why.
    let d = run(&pods_to_move(&["1200m", "1", "1"], "2800m", "2"));
    assert!(d.command.is_none(), "{:?}", d.command);
    let why = kept_reason(&d, "claim-a");
    assert!(
        why.contains("bound by kube-scheduler")
            && why.contains("pod default/a-2 would find no room"),
        "{why}"
    );
    // b has 1.5 free and c 1.0: the 1.5 CPU pod, evicted first, takes b, and the two of 0.5
    // take c. (Evicted all at once, the small ones could reach b first and strand the big one:
    // why the drain goes biggest first.)
    let d = run(&pods_to_move(&["1500m", "500m", "500m"], "2500m", "3"));
    let why = kept_reason(&d, "claim-a");
    let c = d.command.unwrap_or_else(|| panic!("{why}"));
    assert_eq!(c.candidates, ["claim-a"]);
    assert!(c.replacements.is_empty());
}

#[test]
fn no_pod_is_moved_onto_a_node_that_is_not_initialized_yet() {
    // As above, but b's NodeClaim has not initialized: a waits, as upstream's would.
    let (b_node, mut b_claim) = node("b", "big", 8, LONG_AGO, json!({}));
    b_claim["status"]["conditions"][0]["status"] = json!("False");
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "big", 8, LONG_AGO, json!({})), (b_node, b_claim)],
        &[pod("p1", "a", "1", json!({}))],
    );
    let d = run(&snap);
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains("would move onto b, which is not initialized yet"),
        "{}",
        kept_reason(&d, "claim-a")
    );
}

#[test]
fn several_nodes_are_consolidated_at_once_when_no_single_one_can_go() {
    // Three 4-CPU nodes with a 2.5-CPU pod each: no pod fits another node, and no single
    // node has a cheaper replacement; all three fit one 8-CPU node at $0.4 < 3 × $0.2.
    let snap = snapshot(
        pool_of_unbounded_budget(),
        &[
            node("a", "mid", 4, LONG_AGO, json!({})),
            node("b", "mid", 4, LONG_AGO, json!({})),
            node("c", "mid", 4, LONG_AGO, json!({})),
        ],
        &[
            pod("p1", "a", "2500m", json!({})),
            pod("p2", "b", "2500m", json!({})),
            pod("p3", "c", "2500m", json!({})),
        ],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Underutilized);
    assert_eq!(c.candidates, ["claim-a", "claim-b", "claim-c"]);
    assert_eq!(c.replacements.len(), 1);
    assert!((c.saving - 0.2).abs() < 1e-9, "{}", c.saving);
    // With a budget of one node at a time, only single-node consolidation is left, and it
    // finds nothing.
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "30s", "budgets": [{"nodes": "1"}]}),
            "720h",
        ),
        &[
            node("a", "mid", 4, LONG_AGO, json!({})),
            node("b", "mid", 4, LONG_AGO, json!({})),
        ],
        &[
            pod("p1", "a", "2500m", json!({})),
            pod("p2", "b", "2500m", json!({})),
        ],
    );
    assert!(run(&snap).command.is_none());
}

/// Five 4-CPU nodes of the pool's one type ($0.2): a, b and c hold two pods of 1.3 CPU and one
/// of 0.5 each (0.9 CPU free), s1 and s2 one pod of `stays_cpu` that stays.
fn fragmented(stays_cpu: &str) -> Snapshot {
    let stay = json!({"karpenter.sh/do-not-disrupt": "true"});
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for name in ["a", "b", "c", "s1", "s2"] {
        nodes.push(node(name, "mid", 4, LONG_AGO, json!({})));
        if name.starts_with('s') {
            pods.push(pod(&format!("{name}-stays"), name, stays_cpu, stay.clone()));
            continue;
        }
        for (i, cpu) in ["1300m", "1300m", "500m"].iter().enumerate() {
            pods.push(pod(&format!("{name}-{i}"), name, cpu, json!({})));
        }
    }
    snapshot(pool_of_unbounded_budget(), &nodes, &pods)
}

#[test]
fn fragmented_nodes_are_repacked_onto_fewer_new_ones() {
    // No node can go (its 1.3 CPU pods fit no other node's 0.9 CPU), and no two fit one new
    // node (four of 1.3 CPU do not fit 4 CPU). All three do fit two: three 1.3 CPU pods on
    // each, the 0.5 CPU ones on s1 and s2 (1 CPU free each). Biggest first, each on the least
    // allocated node, kube-scheduler binds them the same way.
    let mid = || vec![itype("mid", 4, 0.2)];
    let d = run_over(&fragmented("3"), mid());
    let c = d.command.unwrap_or_else(|| panic!("{:?}", d.kept));
    assert_eq!(c.method, Method::Underutilized);
    assert_eq!(c.candidates, ["claim-a", "claim-b", "claim-c"]);
    assert_eq!(c.replacements.len(), 2);
    assert!((c.saving - 0.2).abs() < 1e-9, "{}", c.saving);
    // Validated as any consolidation: simulated again over its own candidates.
    let again = revalidate_over(&fragmented("3"), &class_c(mid()), &c).expect("still valid");
    assert!(again.same_as(&c));
    // With s1 and s2 full, the 0.5 CPU pods need a third node: nothing saved, nothing done.
    let d = run_over(&fragmented("4"), mid());
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains("no replacement is cheaper"),
        "{:?}",
        d.kept
    );
}

/// A 4-CPU "mid" and an 8-CPU "big" type, each on demand and (at 30 % of that) as spot.
fn types_with_spot() -> HashMap<String, Vec<Arc<InstanceType>>> {
    let with_spot = |name: &str, cpu: i64, price: f64| {
        let offers = [
            (CapacityType::OnDemand, price),
            (CapacityType::Spot, price * 0.3),
        ];
        itype_offered(name, cpu, &offers)
    };
    class_c(vec![with_spot("mid", 4, 0.2), with_spot("big", 8, 0.4)])
}

/// Three full on-demand "mid" nodes of pool p, each with a 2-CPU pod and two 1-CPU pods that
/// tolerate the taint of `spot_pool` (pool "s" of weight 50, spot or on-demand, when given).
fn tolerating_pods_on_on_demand_nodes(spot_pool: bool) -> Snapshot {
    let toleration =
        json!([{"key": "dedicated", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]);
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for name in ["a", "b", "c"] {
        nodes.push(node(name, "mid", 4, LONG_AGO, json!({})));
        pods.push(pod(&format!("{name}-w"), name, "2", json!({})));
        for i in 0..2 {
            let mut tolerating = pod(&format!("{name}-t{i}"), name, "1", json!({}));
            tolerating["spec"]["tolerations"] = toleration.clone();
            pods.push(tolerating);
        }
    }
    let mut snap = snapshot(pool_of_unbounded_budget(), &nodes, &pods);
    if spot_pool {
        snap.nodepools.push(from(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "s", "uid": "us"},
            "spec": {"weight": 50, "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
                "taints": [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}}},
                "disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "100%"}]}}})));
    }
    snap
}

/// The decision over `snap` repacks nodes a, b and c (no more new nodes than they are, one
/// of them in the spot pool s, at least 5 % cheaper), and holds when validated again.
fn assert_nodes_a_b_c_repacked_onto_spot(snap: &Snapshot) {
    let d = run_with(snap, types_with_spot(), &Knobs::default());
    let c = d.command.unwrap_or_else(|| panic!("{:?}", d.kept));
    assert_eq!(c.method, Method::Underutilized);
    assert_eq!(c.candidates, ["claim-a", "claim-b", "claim-c"]);
    assert!(c.replacements.len() <= 3, "{:?}", c.replacements);
    assert!(
        c.replacements.iter().any(|r| r.pool == "s"),
        "{:?}",
        c.replacements
    );
    assert!(c.saving >= 0.05 * 0.6, "{}", c.saving);
    let again = revalidate_over(snap, &types_with_spot(), &c).expect("still valid");
    assert!(again.same_as(&c));
}

#[test]
fn pods_bound_to_dear_nodes_move_to_a_cheaper_pool_in_a_repack_of_as_many_nodes() {
    // No node can go or be replaced alone (its pods need an on-demand node as dear), no two
    // fit one node. Repacked, the 1-CPU pods go to the spot pool, which their tolerations
    // allow, and the rest onto one big on-demand node: dearer than an equal share of the
    // three ($0.2 each), but cheaper together.
    assert_nodes_a_b_c_repacked_onto_spot(&tolerating_pods_on_on_demand_nodes(true));
    // Without the spot pool the same pods need on-demand nodes as dear as now.
    let d = run_with(
        &tolerating_pods_on_on_demand_nodes(false),
        types_with_spot(),
        &Knobs::default(),
    );
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains("repacking its pool's 3 emptiest nodes"),
        "{:?}",
        d.kept
    );
}

/// Ten "mid" nodes of pool p with one 3.5-CPU pod each, then three full ones like
/// [`tolerating_pods_on_on_demand_nodes`] (a 2-CPU pod and two 1-CPU pods tolerating pool s's
/// taint): the pods a spot pool may take sit on the fullest nodes, as after a scale-down.
/// Pool p's budget lets `budget` nodes go at once.
fn tolerating_pods_on_the_fullest_nodes(budget: &str) -> Snapshot {
    let mut snap = tolerating_pods_on_on_demand_nodes(true);
    snap.nodepools[0] = from(pool(
        json!({"consolidateAfter": "30s", "budgets": [{"nodes": budget}]}),
        "720h",
    ));
    for i in 0..10 {
        let name = format!("e{i}");
        let (n, claim) = node(&name, "mid", 4, LONG_AGO, json!({}));
        snap.nodes.push(from(n));
        snap.nodeclaims.push(from(claim));
        snap.pods
            .push(from(pod(&format!("{name}-p"), &name, "3500m", json!({}))));
    }
    snap
}

#[test]
fn a_repack_reaches_the_full_nodes_holding_pods_a_higher_weighted_pool_may_take() {
    // Repacking any of the ten emptiest nodes saves nothing: no 3.5-CPU pod fits elsewhere,
    // and two of them need an 8-CPU node as dear as two 4-CPU ones. The three full nodes hold
    // the pods pool s (weight 50) may take: repacked, those go to spot and the 2-CPU pods onto
    // one on-demand node.
    // The budget bounds how many nodes a repack takes, not which: with three at a time (the
    // three emptiest are e0 to e2), the same three full nodes go.
    for budget in ["100%", "3"] {
        assert_nodes_a_b_c_repacked_onto_spot(&tolerating_pods_on_the_fullest_nodes(budget));
    }
    // With two at a time no repack is tried (it takes three or more).
    let d = run_with(
        &tolerating_pods_on_the_fullest_nodes("2"),
        types_with_spot(),
        &Knobs::default(),
    );
    assert!(d.command.is_none(), "{:?}", d.command);
}

/// Two full nodes (a 3-CPU pod each) and two quarter-full ones (two 500m pods each), all
/// 4-CPU nodes at $0.2, in `order`.
fn two_full_two_quarter_full(order: &[&str]) -> Snapshot {
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for name in order {
        nodes.push(node(name, "mid", 4, LONG_AGO, json!({})));
        if ["a", "b"].contains(name) {
            pods.push(pod(&format!("{name}-big"), name, "3", json!({})));
        } else {
            pods.push(pod(&format!("{name}-1"), name, "500m", json!({})));
            pods.push(pod(&format!("{name}-2"), name, "500m", json!({})));
        }
    }
    snapshot(pool_of_unbounded_budget(), &nodes, &pods)
}

#[test]
fn multi_node_consolidation_tries_the_emptiest_nodes_first_in_any_store_order() {
    // Fewest pods first would try the two full nodes together (6 CPU: only an 8-CPU node at
    // $0.4, no saving) and fall back to one quarter-full node at a time ($0.2); the emptiest
    // first finds both quarter-full nodes' pods a place on the full ones ($0.4). Taking a
    // full node too saves no more (its pod needs a new 4-CPU node), so it is left.
    for order in [
        ["a", "b", "c", "d"],
        ["d", "c", "b", "a"],
        ["b", "d", "a", "c"],
    ] {
        let c = run(&two_full_two_quarter_full(&order))
            .command
            .expect("a command");
        assert_eq!(c.method, Method::Underutilized);
        assert_eq!(
            c.candidates,
            ["claim-c", "claim-d"],
            "store order {order:?}"
        );
        assert!(c.replacements.is_empty());
        assert!((c.saving - 0.4).abs() < 1e-9, "{}", c.saving);
    }
}

#[test]
fn a_budget_of_two_does_not_hide_the_third_candidate_from_single_node_consolidation() {
    // a and b, the emptiest, cannot go (their 2.5-CPU pods fit nowhere else, and together
    // they need a node as dear as both); c, third in order, can: its pods fit on a and b.
    // The budget lets two nodes go at once, which bounds multi-node's set, not which nodes
    // single-node may try.
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "30s", "budgets": [{"nodes": "2"}]}),
            "720h",
        ),
        &[
            node("a", "mid", 4, LONG_AGO, json!({})),
            node("b", "mid", 4, LONG_AGO, json!({})),
            node("c", "mid", 4, LONG_AGO, json!({})),
        ],
        &[
            pod("pa", "a", "2500m", json!({})),
            pod("pb", "b", "2500m", json!({})),
            pod("pc1", "c", "1500m", json!({})),
            pod("pc2", "c", "1500m", json!({})),
        ],
    );
    let d = run(&snap);
    let c = d.command.as_ref().expect("a command");
    assert_eq!(c.candidates, ["claim-c"]);
    assert!(c.replacements.is_empty());
    assert!(
        kept_reason(&d, "claim-a").contains("no replacement is cheaper"),
        "{:?}",
        d.kept
    );
}

/// `command` validated on `snap` with `types` per class, at `NOW`.
fn revalidate_over(
    snap: &Snapshot,
    types: &HashMap<String, Vec<Arc<InstanceType>>>,
    command: &jointer_controller::core::disruption::Command,
) -> Result<jointer_controller::core::disruption::Command, String> {
    let (types_of_pool, _) = types_of_pools(snap, types);
    let inputs = Inputs {
        snapshot: snap,
        types_of_class: types,
        types_of_pool: &types_of_pool,
        now: NOW.parse::<Timestamp>().unwrap(),
        settle: Duration::from_secs(30),
        spot_to_spot: false,
        single_node_from: None,
        nominated: &HashSet::new(),
        policies: Default::default(),
        timeouts: ConsolidationTimeouts::default(),
    };
    revalidate(&inputs, command)
}

#[test]
fn a_consolidation_is_validated_by_simulating_its_own_candidates_again() {
    let snap = two_full_two_quarter_full(&["a", "b", "c", "d"]);
    let types = types();
    let command = run(&snap).command.expect("a command");
    let again = revalidate_over(&snap, &types, &command).expect("still valid");
    assert!(again.same_as(&command));
    // Pods landed on the full nodes meanwhile: the quarter-full nodes' pods now need a node.
    let mut moved = snap.clone();
    for full in ["a", "b"] {
        moved
            .pods
            .push(from(pod(&format!("{full}-late"), full, "1", json!({}))));
    }
    let why = revalidate_over(&moved, &types, &command).expect_err("no longer valid");
    assert!(why.contains("no longer the same"), "{why}");
    // A candidate gone from the cluster.
    let mut gone = snap.clone();
    gone.nodeclaims
        .retain(|c| c.metadata.name.as_deref() != Some("claim-d"));
    let why = revalidate_over(&gone, &types, &command).expect_err("no longer valid");
    assert!(
        why.contains("claim-d is no longer a consolidation candidate"),
        "{why}"
    );
}

#[test]
fn do_not_disrupt_and_recent_pod_events_keep_a_node() {
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "big", 8, LONG_AGO, json!({}))],
        &[pod(
            "p1",
            "a",
            "1",
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        )],
    );
    let d = run(&snap);
    assert!(d.command.is_none());
    assert!(kept_reason(&d, "claim-a").contains("do-not-disrupt"));
    let snap = snapshot(
        pool(json!({"consolidateAfter": "10m"}), "720h"),
        &[node("a", "big", 8, "2026-11-30T11:58:00Z", json!({}))],
        &[pod("p1", "a", "1", json!({}))],
    );
    let d = run(&snap);
    assert!(d.command.is_none());
    assert!(
        kept_reason(&d, "claim-a").contains("not consolidatable for another 480 s"),
        "{:?}",
        d.kept
    );
    let snap = snapshot(
        pool(json!({"consolidateAfter": "Never"}), "720h"),
        &[node("a", "small", 2, LONG_AGO, json!({}))],
        &[],
    );
    assert!(kept_reason(&run(&snap), "claim-a").contains("Never"));
}

#[test]
fn an_expired_node_goes_whatever_the_budget() {
    let (n, mut claim) = node("a", "small", 2, LONG_AGO, json!({}));
    claim["spec"]["expireAfter"] = json!("1h");
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}),
            "1h",
        ),
        &[(n, claim)],
        &[pod("p1", "a", "1", json!({}))],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Expired);
    assert_eq!(c.candidates, ["claim-a"]);
}

#[test]
fn a_node_made_from_an_older_template_drifts_and_is_replaced_within_its_budget() {
    let (n, mut claim) = node("a", "small", 2, "2026-11-30T11:59:59Z", json!({}));
    claim["metadata"]["annotations"] =
        json!({"karpenter.sh/nodepool-hash": "from-an-older-template"});
    // Not consolidatable yet (a pod event a second ago): drift does not wait for that.
    let snap = snapshot(
        pool(json!({"consolidateAfter": "10m"}), "720h"),
        &[(n.clone(), claim.clone())],
        &[pod("p1", "a", "1", json!({}))],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Drifted);
    assert_eq!(
        c.replacements.len(),
        1,
        "its pod needs a new node, launched first"
    );
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "10m", "budgets": [{"nodes": "0", "reasons": ["Drifted"]}]}),
            "720h",
        ),
        &[(n, claim)],
        &[pod("p1", "a", "1", json!({}))],
    );
    let d = run(&snap);
    assert!(d.command.is_none());
    assert!(kept_reason(&d, "claim-a").contains("drifted (NodePool p's template changed), but NodePool p's disruption budget for Drifted"), "{:?}", d.kept);
}

#[test]
fn a_spot_node_is_replaced_by_spot_only_when_allowed_and_with_enough_cheaper_types() {
    let spot_type = |name: &str, cpu: i64, price: f64| {
        let mut req = Requirements::new();
        req.add(labels::ARCH, Requirement::any_of(["amd64"]));
        req.add(labels::OS, Requirement::any_of(["linux"]));
        Arc::new(InstanceType::new(
            name,
            req,
            Resources {
                pods: 110,
                ..Resources::cpu_memory(cpu * 1000, (cpu * 4) << 30)
            },
            Resources::ZERO,
            vec![Offering {
                zone: "z1".into(),
                capacity_type: CapacityType::Spot,
                price,
                available: true,
            }],
        ))
    };
    let mut spot_pool = pool(json!({"consolidateAfter": "30s"}), "720h");
    spot_pool["spec"]["template"]["spec"]["requirements"] =
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]);
    let (n, mut claim) = node("a", "spotbig", 8, LONG_AGO, json!({}));
    claim["metadata"]["labels"]["karpenter.sh/capacity-type"] = json!("spot");
    let snap = snapshot(spot_pool, &[(n, claim)], &[pod("p1", "a", "1", json!({}))]);
    let decide_with = |count: usize, spot_to_spot: bool| {
        let mut list = vec![spot_type("spotbig", 8, 0.2)];
        list.extend((0..count).map(|i| spot_type(&format!("s{i}"), 2, 0.01 + i as f64 * 0.001)));
        let types = HashMap::from([("c".to_string(), list)]);
        let knobs = Knobs {
            spot_to_spot,
            ..Default::default()
        };
        run_with(&snap, types, &knobs)
    };
    let off = decide_with(20, false);
    assert!(off.command.is_none());
    assert!(kept_reason(&off, "claim-a").contains("SPOT_TO_SPOT_CONSOLIDATION is off"));
    let few = decide_with(10, true);
    assert!(
        kept_reason(&few, "claim-a").contains("only 10 spot types are cheaper"),
        "{:?}",
        few.kept
    );
    let many = decide_with(20, true).command.expect("a command");
    assert_eq!(many.replacements.len(), 1);
    assert!(many.replacements[0].instance_types.len() >= 15);
}

/// Like [`run`], over `types` for class `c`.
fn run_over(
    snap: &Snapshot,
    types: Vec<Arc<InstanceType>>,
) -> jointer_controller::core::disruption::Decision {
    run_with(snap, class_c(types), &Knobs::default())
}

fn class_c(types: Vec<Arc<InstanceType>>) -> HashMap<String, Vec<Arc<InstanceType>>> {
    HashMap::from([("c".to_string(), types)])
}

/// Single-node consolidation out of time after each candidate (a zero timeout: one try per
/// pass) still reaches the last one, pass by pass, because each pass resumes where the last
/// stopped; started over, it would try the first candidate for ever.
#[test]
fn single_node_consolidation_resumes_where_it_ran_out_of_time() {
    // a, b and c are smallest nodes 80 % full (nothing cheaper, no room for their pods
    // elsewhere); d, tried last (85 % full), could be a cheaper `seven`. All four do not fit
    // one node.
    let snap = snapshot(
        pool_of_unbounded_budget(),
        &[
            node("a", "small", 2, LONG_AGO, json!({})),
            node("b", "small", 2, LONG_AGO, json!({})),
            node("c", "small", 2, LONG_AGO, json!({})),
            node("d", "big", 8, LONG_AGO, json!({})),
        ],
        &[
            pod("pa", "a", "1600m", json!({})),
            pod("pb", "b", "1600m", json!({})),
            pod("pc", "c", "1600m", json!({})),
            pod("pd1", "d", "3400m", json!({})),
            pod("pd2", "d", "3400m", json!({})),
        ],
    );
    let types = || {
        vec![
            itype("small", 2, 0.1),
            itype("seven", 7, 0.3),
            itype("big", 8, 0.4),
        ]
    };
    let zero = ConsolidationTimeouts {
        multi_node: Duration::ZERO,
        single_node: Duration::ZERO,
    };
    let mut from: Option<String> = None;
    let mut stops = Vec::new();
    let command = loop {
        let knobs = Knobs {
            timeouts: zero,
            single_node_from: from.as_deref(),
            ..Default::default()
        };
        let d = run_with(&snap, class_c(types()), &knobs);
        if let Some(c) = d.command {
            break c;
        }
        let next = d
            .single_node_stopped_at
            .clone()
            .expect("a pass out of time says where it stopped");
        assert!(
            kept_reason(&d, &next).contains(&format!("the next pass starts at {next}")),
            "{:?}",
            d.kept
        );
        stops.push(next.clone());
        assert!(stops.len() < 4, "no progress: {stops:?}");
        from = Some(next);
    };
    assert_eq!(stops, ["claim-b", "claim-c", "claim-d"]);
    assert_eq!(command.candidates, ["claim-d"]);
    assert_eq!(
        command.replacements.len(),
        1,
        "d is replaced by a cheaper seven"
    );
    // Given all the time it needs, one pass finds the same command and stops nowhere.
    let whole = run_over(&snap, types());
    assert_eq!(
        whole.command.map(|c| c.candidates),
        Some(vec!["claim-d".to_string()])
    );
    assert_eq!(whole.single_node_stopped_at, None);
}

fn pods_on(node: &str, count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| pod(&format!("{node}-{i}"), node, "1", json!({})))
        .collect()
}

#[test]
fn balanced_refuses_a_move_that_saves_little_for_much_disruption() {
    // Two full-ish 8-CPU nodes at $0.40/h; a type at $0.38/h could take either one's pods.
    let types = vec![itype("big", 8, 0.4), itype("big-b", 8, 0.38)];
    let nodes = [
        node("a", "big", 8, LONG_AGO, json!({})),
        node("b", "big", 8, LONG_AGO, json!({})),
    ];
    let pods = [pods_on("a", 7), pods_on("b", 7)].concat();
    let balanced = snapshot(
        pool(
            json!({"consolidateAfter": "30s", "consolidationPolicy": "Balanced"}),
            "720h",
        ),
        &nodes,
        &pods,
    );
    let d = run_over(&balanced, types.clone());
    assert!(d.command.is_none(), "{:?}", d.command);
    // 2.5 % of the pool's cost saved for 50 % of its disruption: score 0.05.
    let why = kept_reason(&d, "claim-a");
    assert!(
        why.contains("NodePool p is Balanced")
            && why.contains("saves 2.5% of the pool's cost for 50.0% of its disruption")
            && why.contains("needs at least 0.50"),
        "{why}"
    );
    // The same cluster under WhenEmptyOrUnderutilized takes the move: it is the policy.
    let eager = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &nodes,
        &pods,
    );
    let c = run_over(&eager, types).command.expect("a command");
    assert_eq!(c.method, Method::Underutilized);
    assert!((c.saving - 0.02).abs() < 1e-9);
}

#[test]
fn balanced_takes_a_move_whose_savings_outweigh_its_disruption() {
    // Node a holds one pod on 8 CPUs: a 2-CPU node at a quarter of the price takes it.
    let types = vec![itype("small", 2, 0.1), itype("big", 8, 0.4)];
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "30s", "consolidationPolicy": "Balanced"}),
            "720h",
        ),
        &[
            node("a", "big", 8, LONG_AGO, json!({})),
            node("b", "big", 8, LONG_AGO, json!({})),
        ],
        &[pods_on("a", 1), pods_on("b", 8)].concat(),
    );
    let c = run_over(&snap, types).command.expect("a command");
    // 37.5 % of the cost saved for 20 % of the disruption (2 of 1+1 + 1+8): score 1.875.
    assert_eq!(c.method, Method::Underutilized);
    assert_eq!(c.candidates, ["claim-a"]);
    assert_eq!(c.replacements.len(), 1);
    assert!((c.saving - 0.3).abs() < 1e-9);
}

#[test]
fn balanced_still_deletes_empty_nodes() {
    let snap = snapshot(
        pool(
            json!({"consolidateAfter": "30s", "consolidationPolicy": "Balanced"}),
            "720h",
        ),
        &[node("a", "small", 2, LONG_AGO, json!({}))],
        &[],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(c.method, Method::Empty);
}

/// A CapacityBuffer of `replicas` chunks of `cpu` each, shaped by a PodTemplate.
fn with_buffer(mut snap: Snapshot, replicas: i32, cpu: &str) -> Snapshot {
    snap.buffers.buffers = vec![from(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "warm", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": replicas}}))];
    snap.buffers.pod_templates = vec![from(json!({
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "chunk", "namespace": "default"},
        "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}))];
    snap
}

#[test]
fn an_empty_node_that_holds_a_buffers_headroom_is_kept() {
    let empty = || {
        snapshot(
            pool(json!({"consolidateAfter": "30s"}), "720h"),
            &[node("a", "small", 2, LONG_AGO, json!({}))],
            &[],
        )
    };
    let d = run(&with_buffer(empty(), 1, "1"));
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains("CapacityBuffer default/warm"),
        "{:?}",
        d.kept
    );
    // Headroom the cluster has no room for even now (no type is that large) holds nothing.
    let c = run(&with_buffer(empty(), 1, "64"))
        .command
        .expect("a command");
    assert_eq!(
        (c.method, c.candidates),
        (Method::Empty, vec!["claim-a".to_string()])
    );
}

#[test]
fn of_two_empty_nodes_the_one_a_buffer_does_not_need_goes() {
    let snap = snapshot(
        pool_of_unbounded_budget(),
        &[
            node("a", "small", 2, LONG_AGO, json!({})),
            node("b", "small", 2, LONG_AGO, json!({})),
        ],
        &[],
    );
    let d = run(&with_buffer(snap, 1, "1"));
    let c = d.command.clone().expect("a command");
    assert_eq!(c.method, Method::Empty);
    assert_eq!(c.candidates.len(), 1, "{:?}", c.candidates);
    let other = if c.candidates[0] == "claim-a" {
        "claim-b"
    } else {
        "claim-a"
    };
    assert!(
        kept_reason(&d, other).contains("CapacityBuffer"),
        "{:?}",
        d.kept
    );
}

#[test]
fn consolidation_keeps_room_for_the_buffers_headroom() {
    // Alone, the 1-CPU pod would move to a small node; with 4 CPUs of headroom beside it
    // only the big type fits both, which is not cheaper.
    let snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[node("a", "big", 8, LONG_AGO, json!({}))],
        &[pod("p1", "a", "1", json!({}))],
    );
    let d = run(&with_buffer(snap, 1, "4"));
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains("cheaper"),
        "{:?}",
        d.kept
    );
}

/// `node`, reporting `condition=status` since `since`.
fn reporting(
    (mut n, claim): (Value, Value),
    condition: &str,
    status: &str,
    since: &str,
) -> (Value, Value) {
    n["status"]["conditions"] = json!([{"type": condition, "status": status, "reason": "Broken", "message": "",
        "lastTransitionTime": since, "lastHeartbeatTime": NOW}]);
    (n, claim)
}

#[test]
fn an_unhealthy_node_past_its_toleration_is_replaced_first_do_not_disrupt_and_pdbs_notwithstanding()
{
    // KernelReady=False for 40 minutes (toleration 30); the node and its pod are annotated
    // do-not-disrupt and a PDB allows no eviction: none of that holds a repair back.
    let sick = reporting(
        node(
            "a",
            "small",
            2,
            LONG_AGO,
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        ),
        "KernelReady",
        "False",
        "2026-11-30T11:20:00Z",
    );
    let mut p1 = pod(
        "p1",
        "a",
        "1",
        json!({"karpenter.sh/do-not-disrupt": "true"}),
    );
    p1["metadata"]["labels"] = json!({"app": "x"});
    let mut snap = snapshot(
        pool(json!({"consolidateAfter": "30s"}), "720h"),
        &[sick, node("b", "small", 2, LONG_AGO, json!({}))],
        &[p1],
    );
    snap.pdbs = vec![from(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "x", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "maxUnavailable": 0},
            "status": {"currentHealthy": 1, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1}}),
    )];
    let c = run(&snap).command.expect("a command");
    // Before emptiness: the empty node b waits for the next round.
    assert_eq!(c.method, Method::Unhealthy);
    assert_eq!(c.candidates, ["claim-a"]);
    assert!(
        c.replacements.is_empty(),
        "its pod fits on b, nothing to launch"
    );
    assert_eq!(c.drain_bound, Some(Duration::from_secs(600)));
    let why = c.why.expect("the condition is named");
    assert!(
        why.contains("KernelReady=False has held for 2400 s, past its toleration of 1800 s"),
        "{why}"
    );
}

#[test]
fn an_unhealthy_node_whose_pods_need_room_gets_a_replacement_launched_first() {
    let sick = reporting(
        node("a", "small", 2, LONG_AGO, json!({})),
        "Ready",
        "Unknown",
        "2026-11-30T11:00:00Z",
    );
    let snap = snapshot(
        pool(json!({"consolidateAfter": "Never"}), "720h"),
        &[sick],
        &[pod("p1", "a", "1", json!({}))],
    );
    let c = run(&snap).command.expect("a command");
    assert_eq!(
        (c.method, c.candidates.as_slice(), c.replacements.len()),
        (Method::Unhealthy, ["claim-a".to_string()].as_slice(), 1)
    );
}

#[test]
fn a_bad_condition_is_tolerated_until_its_time_and_do_not_repair_opts_out() {
    let pool = pool(json!({"consolidateAfter": "Never"}), "720h");
    let young = reporting(
        node("a", "small", 2, LONG_AGO, json!({})),
        "Ready",
        "False",
        "2026-11-30T11:31:00Z",
    );
    let d = run(&snapshot(
        pool.clone(),
        &[young],
        &[pod("p1", "a", "1", json!({}))],
    ));
    assert!(d.command.is_none());
    assert!(
        kept_reason(&d, "claim-a")
            .contains("Ready=False is tolerated for another 60 s before repair"),
        "{:?}",
        d.kept
    );
    let (n, mut claim) = reporting(
        node("a", "small", 2, LONG_AGO, json!({})),
        "Ready",
        "False",
        LONG_AGO,
    );
    claim["metadata"]["annotations"] = json!({"karpenter.sh/do-not-repair": "true"});
    let d = run(&snapshot(
        pool,
        &[(n, claim)],
        &[pod("p1", "a", "1", json!({}))],
    ));
    assert!(d.command.is_none());
    assert!(
        kept_reason(&d, "claim-a").contains("but annotated karpenter.sh/do-not-repair"),
        "{:?}",
        d.kept
    );
}

#[test]
fn repair_waits_for_the_pools_unhealthy_budget_and_only_that_one() {
    let sick = || {
        reporting(
            node("a", "small", 2, LONG_AGO, json!({})),
            "NetworkingReady",
            "False",
            LONG_AGO,
        )
    };
    let pods = [pod("p1", "a", "1", json!({}))];
    let other_reasons = pool(
        json!({"consolidateAfter": "Never", "budgets": [{"nodes": "0", "reasons": ["Drifted", "Underutilized", "Empty"]}]}),
        "720h",
    );
    let c = run(&snapshot(other_reasons, &[sick()], &pods)).command;
    assert_eq!(c.map(|c| c.method), Some(Method::Unhealthy));
    let closed = pool(
        json!({"consolidateAfter": "Never", "budgets": [{"nodes": "0", "reasons": ["Unhealthy"]}]}),
        "720h",
    );
    let d = run(&snapshot(closed, &[sick()], &pods));
    assert!(d.command.is_none());
    assert!(
        kept_reason(&d, "claim-a")
            .contains("NodePool p's disruption budget for Unhealthy allows no disruption now"),
        "{:?}",
        d.kept
    );
}

#[test]
fn a_pool_with_more_than_a_fifth_of_its_nodes_unhealthy_is_not_repaired() {
    let pool = pool(json!({"consolidateAfter": "Never"}), "720h");
    let sick = |name: &str, since: &str| {
        reporting(
            node(name, "small", 2, LONG_AGO, json!({})),
            "StorageReady",
            "False",
            since,
        )
    };
    let fine = |name: &str| node(name, "small", 2, LONG_AGO, json!({}));
    // One of five: repaired.
    let one = [
        sick("a", LONG_AGO),
        fine("b"),
        fine("c"),
        fine("d"),
        fine("e"),
    ];
    let c = run(&snapshot(pool.clone(), &one, &[])).command;
    assert_eq!(c.map(|c| c.candidates), Some(vec!["claim-a".to_string()]));
    // Two of five, one of them still within its toleration: the breaker counts both.
    let two = [
        sick("a", LONG_AGO),
        sick("b", "2026-11-30T11:59:00Z"),
        fine("c"),
        fine("d"),
        fine("e"),
    ];
    let d = run(&snapshot(pool, &two, &[]));
    assert!(d.command.is_none(), "{:?}", d.command);
    assert!(
        kept_reason(&d, "claim-a").contains(
            "2 of NodePool p's 5 nodes report an unhealthy condition, more than 20 % of them (1, rounded up): a correlated failure"
        ),
        "{:?}",
        d.kept
    );
}
