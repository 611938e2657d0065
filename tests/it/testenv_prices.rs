//! `jointer catalog refresh` against the test environment's Pricing and spot-price fixture,
//! and `simulate` preferring the cached prices. Needs tests/env/up.sh.

use crate::support::{testenv, Workspace};

fn fixture() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/env/gap/prices.json"
    ))
    .expect("price fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

#[test]
fn refreshed_prices_match_the_fixture_and_simulate_uses_them() {
    let _turn = testenv::TURN.blocking_lock();
    testenv::require();
    let ws = Workspace::new();
    ws.jointer(&["catalog", "refresh", "--region", "us-east-1"])
        .succeeded();
    let cache: serde_json::Value =
        serde_json::from_str(&ws.read(".cache/prices/us-east-1.json")).expect("cache JSON");
    let expected = &fixture()["us-east-1"];
    let types = expected.as_object().expect("fixture region");
    assert!(!types.is_empty());
    for (name, prices) in types {
        assert_eq!(
            cache["prices"]["on_demand"][name], prices["on_demand"],
            "on-demand price of {name}"
        );
        for (zone, spot) in prices["spot"].as_object().expect("spot prices") {
            assert_eq!(
                cache["prices"]["spot"][name][zone], *spot,
                "spot price of {name} in {zone}"
            );
        }
    }

    let run = ws.jointer(&["simulate", "-o", "json"]);
    let out: serde_json::Value = serde_json::from_str(&run.succeeded().stdout).expect("JSON");
    assert_eq!(out["price_source"], "cached");
    for claim in out["nodeclaims"].as_array().expect("nodeclaims") {
        let (name, zone) = (
            claim["instance_type"].as_str().unwrap_or_default(),
            claim["zone"].as_str().unwrap_or_default(),
        );
        let Some(real) = expected.get(name) else {
            continue;
        };
        let price = if claim["capacity_type"] == "spot" {
            &real["spot"][zone]
        } else {
            &real["on_demand"]
        };
        assert_eq!(
            claim["price_per_hour"], *price,
            "{name} in {zone} priced from the cache"
        );
    }
    let estimated: serde_json::Value = serde_json::from_str(
        &ws.jointer(&["simulate", "-o", "json", "--estimated-prices"])
            .succeeded()
            .stdout,
    )
    .expect("JSON");
    assert_eq!(estimated["price_source"], "estimated");
}
