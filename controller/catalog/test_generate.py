#!/usr/bin/env python3
"""Plain-assert checks for generate.py and the committed aws.json.

Run from the repository root (needs moto 5.2.5, see generate.py):

    "$HOME/.cache/jointer/catalog-venv/bin/python" controller/catalog/test_generate.py
"""

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # keep controller/catalog free of __pycache__

import generate  # noqa: E402

CATALOG, NOTES, FULL = generate.build()
with open(generate.OUTPUT, "rb") as _f:
    COMMITTED = _f.read()
LOADED = json.loads(COMMITTED)


def with_defaults(record):
    out = dict(LOADED["defaults"])
    out.update(record)
    return out


TYPES = {t["name"]: with_defaults(t) for t in LOADED["types"]}


def test_committed_file_is_fresh():
    assert generate.serialise(CATALOG) == COMMITTED, (
        "aws.json is stale: rerun controller/catalog/generate.py"
    )


def test_generation_is_deterministic():
    again, _, _ = generate.build()
    assert generate.serialise(again) == generate.serialise(CATALOG)


def test_shape():
    assert LOADED["source"] == "moto 5.2.5 bundled AWS data"
    assert isinstance(LOADED["price_model"], str) and len(LOADED["price_model"]) > 200
    assert len(COMMITTED) < 1024 * 1024, len(COMMITTED)
    keys = set(generate.DEFAULTS) | {
        "name", "vcpu", "memory_mib", "arch", "family", "category", "generation", "size",
        "cpu_manufacturer", "hypervisor", "enis", "ipv4_per_eni", "network_bandwidth_mbps", "od_price",
    }
    for t in TYPES.values():
        assert set(t) == keys, (t["name"], set(t) ^ keys)


def test_m5_large():
    t = TYPES["m5.large"]
    expect = {
        "vcpu": 2, "memory_mib": 8192, "arch": "amd64", "family": "m5", "category": "m",
        "generation": 5, "size": "large", "cpu_manufacturer": "intel", "hypervisor": "nitro",
        "bare_metal": False, "gpu_count": 0, "gpu_name": None, "accelerator_count": 0,
        "enis": 3, "ipv4_per_eni": 10, "network_bandwidth_mbps": 750, "local_nvme_gb": 0,
        "spot": True, "od_price": 0.096,
    }
    for k, v in expect.items():
        assert t[k] == v, ("m5.large", k, t[k], v)


def test_c6g_large():
    t = TYPES["c6g.large"]
    expect = {
        "vcpu": 2, "memory_mib": 4096, "arch": "arm64", "family": "c6g", "category": "c",
        "generation": 6, "size": "large", "cpu_manufacturer": "aws", "gpu_count": 0,
    }
    for k, v in expect.items():
        assert t[k] == v, ("c6g.large", k, t[k], v)
    assert t["od_price"] < TYPES["c6i.large"]["od_price"]


def test_p3_2xlarge():
    parsed = generate.parse_name("p3.2xlarge")
    assert parsed["family"] == "p3" and parsed["category"] == "p"
    assert parsed["generation"] == 3 and parsed["size"] == "2xlarge"
    if "p3.2xlarge" in TYPES:  # moto 5.2.5 has no p3.* except p3dn.24xlarge
        t = TYPES["p3.2xlarge"]
        assert t["gpu_count"] == 1 and t["gpu_name"] == "v100" and t["gpu_manufacturer"] == "nvidia"
    t = TYPES["p3dn.24xlarge"]
    assert (t["family"], t["category"], t["generation"], t["size"]) == ("p3dn", "p", 3, "24xlarge")
    assert t["gpu_count"] == 8 and t["gpu_name"] == "v100" and t["gpu_memory_mib"] == 32768


def test_odd_names():
    cases = {
        "u-6tb1.112xlarge": ("u-6tb1", "u", 1, "112xlarge"),
        "u7in-16tb.224xlarge": ("u7in-16tb", "u", 7, "224xlarge"),
        "p6-b200.48xlarge": ("p6-b200", "p", 6, "48xlarge"),
        "c7i-flex.large": ("c7i-flex", "c", 7, "large"),
        "hpc7g.16xlarge": ("hpc7g", "hpc", 7, "16xlarge"),
        "trn1n.32xlarge": ("trn1n", "trn", 1, "32xlarge"),
        "m8i.metal-48xl": ("m8i", "m", 8, "metal-48xl"),
    }
    for name, (family, category, gen, size) in cases.items():
        p = generate.parse_name(name)
        assert (p["family"], p["category"], p["generation"], p["size"]) == (family, category, gen, size), (name, p)
        if name in TYPES:
            t = TYPES[name]
            assert (t["family"], t["category"], t["generation"], t["size"]) == (family, category, gen, size), name


def test_every_type_is_sane():
    assert len(TYPES) > 1300
    for t in TYPES.values():
        assert t["vcpu"] > 0 and t["memory_mib"] > 0, t["name"]
        assert t["arch"] in ("amd64", "arm64"), t["name"]
        assert not t["name"].startswith("mac"), t["name"]
        assert t["od_price"] > 0, t["name"]
        assert t["enis"] > 0 and t["ipv4_per_eni"] > 0, t["name"]
        assert t["cpu_manufacturer"] in ("intel", "amd", "aws"), t["name"]
        assert (t["gpu_count"] > 0) == (t["gpu_name"] is not None), t["name"]
        assert (t["accelerator_count"] > 0) == (t["accelerator_name"] is not None), t["name"]


def test_regions():
    assert set(LOADED["regions"]) == set(generate.REGIONS)
    for region, r in LOADED["regions"].items():
        zones = r["zones"]
        assert len(zones) >= 3, region
        assert len(r["zone_ids"]) == len(zones) and len(set(r["zone_ids"])) == len(zones), region
        assert set(r["spot_discount"]) == set(zones), region
        for z, d in r["spot_discount"].items():
            assert 0.55 <= d <= 0.75, (z, d)
        assert len(set(r["spot_discount"].values())) > 1, region
        assert len(r["offerings"]) >= 300, (region, len(r["offerings"]))
        for name, idx in r["offerings"].items():
            assert name in TYPES, (region, name)
            assert idx and idx == sorted(set(idx)), (region, name)
            assert all(0 <= i < len(zones) for i in idx), (region, name)
    use1 = LOADED["regions"]["us-east-1"]
    assert all(z.startswith("us-east-1") for z in use1["zones"])
    assert all(i.startswith("use1-az") for i in use1["zone_ids"])


def test_anchors_within_15_percent():
    rows = generate.anchor_rows(FULL)
    assert len(rows) == len(generate.ANCHORS)
    for name, est, listed, diff, _ in rows:
        assert abs(diff) <= 15.0, (name, est, listed, diff)


def test_metal_matches_largest_size():
    assert TYPES["m5.metal"]["od_price"] == TYPES["m5.24xlarge"]["od_price"]
    assert TYPES["m8i.metal-48xl"]["od_price"] == TYPES["m8i.48xlarge"]["od_price"]
    assert TYPES["m5.metal"]["bare_metal"] is True


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print("ok   %s" % name)
        except Exception:  # report every failure, then fail the run
            failed += 1
            print("FAIL %s" % name)
            traceback.print_exc()
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
