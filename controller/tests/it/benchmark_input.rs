//! `jointer bench scheduling --profile upstream` generates the same kind of workload as
//! upstream's scheduling benchmark: its distributions are compared with those of upstream's own
//! generator, exported by `bench/upstream` (`--inputs-only`, 5,000 pods, seed 42) into
//! `upstream_benchmark_summary.json`. The random sources differ (SplitMix64 here, Go's
//! `math/rand` there), so the counts are compared statistically, not value by value.

use std::collections::BTreeMap;

use jointer_controller::api::labels;
use jointer_controller::core::benchmark;
use jointer_controller::core::scheduling::SchedPod;
use serde_json::Value;

type Histograms = BTreeMap<String, BTreeMap<String, i64>>;

/// The summary `bench/upstream/main.go` writes, computed for jointer's generator.
#[derive(Default)]
struct Summary {
    kinds: BTreeMap<String, i64>,
    own_values: Histograms,
    selector_values: Histograms,
    self_selecting: BTreeMap<String, i64>,
    resources: Histograms,
}

fn kind(pod: &SchedPod) -> &'static str {
    match (
        pod.spreads.first().map(|s| s.topology_key.as_str()),
        pod.affinity.is_empty(),
        pod.anti_affinity.is_empty(),
    ) {
        (Some(labels::ZONE), ..) => "zonespread",
        (Some(_), ..) => "hostspread",
        (None, false, _) => "zoneaffinity",
        (None, true, false) => "hostanti",
        (None, true, true) => "generic",
    }
}

fn summarize(pods: &[SchedPod]) -> Summary {
    let mut s = Summary::default();
    let bump = |h: &mut Histograms, k: &str, v: String| {
        *h.entry(k.into()).or_default().entry(v).or_default() += 1;
    };
    for pod in pods {
        let k = kind(pod);
        *s.kinds.entry(k.into()).or_default() += 1;
        for key in ["my-label", "my-affininity"] {
            if let Some(v) = pod.labels.get(key) {
                bump(&mut s.own_values, k, v.clone());
            }
        }
        for spread in &pod.spreads {
            let selected = spread.selector.terms[0].2[0].clone();
            if pod.labels.get("my-label") == Some(&selected) {
                *s.self_selecting.entry(k.into()).or_default() += 1;
            }
            bump(&mut s.selector_values, k, selected);
        }
        bump(&mut s.resources, "cpu_millis", pod.requests.cpu.to_string());
        bump(
            &mut s.resources,
            "memory_mib",
            (pod.requests.memory >> 20).to_string(),
        );
    }
    s
}

fn histograms(v: &Value) -> Histograms {
    serde_json::from_value(v.clone()).expect("histograms")
}

/// Two samples of `n` draws agree on a value's share when the shares differ by at most four
/// standard deviations of the difference of two independent sample proportions.
fn agree(what: &str, ours: &BTreeMap<String, i64>, theirs: &BTreeMap<String, i64>) {
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "{what}: the values drawn"
    );
    let n = |h: &BTreeMap<String, i64>| h.values().sum::<i64>() as f64;
    let (n_ours, n_theirs) = (n(ours), n(theirs));
    for (value, count) in theirs {
        let p_theirs = *count as f64 / n_theirs;
        let p_ours = ours[value] as f64 / n_ours;
        let sd = (p_theirs * (1.0 - p_theirs) * (1.0 / n_ours + 1.0 / n_theirs)).sqrt();
        assert!(
            (p_ours - p_theirs).abs() <= 4.0 * sd,
            "{what}={value}: {p_ours:.3} here, {p_theirs:.3} upstream (sd {sd:.3})"
        );
    }
}

#[test]
fn the_upstream_profile_draws_upstreams_workload() {
    let upstream: Value =
        serde_json::from_str(include_str!("upstream_benchmark_summary.json")).expect("summary");
    let pods = upstream["pods"].as_u64().expect("pods") as usize;
    let ours = summarize(&benchmark::upstream(pods, 400, 42).pods);

    let kinds: BTreeMap<String, i64> =
        serde_json::from_value(upstream["kinds"].clone()).expect("kinds");
    assert_eq!(ours.kinds, kinds, "pods of each kind");
    for (k, h) in histograms(&upstream["own_values"]) {
        agree(&format!("{k} own label"), &ours.own_values[&k], &h);
    }
    for (k, h) in histograms(&upstream["selector_values"]) {
        agree(&format!("{k} selector"), &ours.selector_values[&k], &h);
        // Selectors drawn independently of the pod's own label: about one in seven selects
        // its own pod.
        let total = h.values().sum::<i64>();
        let selves = BTreeMap::from([
            ("self".to_string(), ours.self_selecting[&k]),
            ("other".to_string(), total - ours.self_selecting[&k]),
        ]);
        let theirs_self = upstream["self_selecting"][&k]
            .as_i64()
            .expect("self_selecting");
        let theirs = BTreeMap::from([
            ("self".to_string(), theirs_self),
            ("other".to_string(), total - theirs_self),
        ]);
        agree(&format!("{k} selecting itself"), &selves, &theirs);
    }
    for resource in ["cpu_millis", "memory_mib"] {
        let theirs: BTreeMap<String, i64> =
            serde_json::from_value(upstream[resource].clone()).expect("resource histogram");
        agree(resource, &ours.resources[resource], &theirs);
    }
}
