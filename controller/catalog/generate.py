#!/usr/bin/env python3
"""Generate controller/catalog/aws.json, the embedded EC2 instance-type catalog.

Regenerate (from the repository root):

    python3 -m venv "$HOME/.cache/jointer/catalog-venv"
    "$HOME/.cache/jointer/catalog-venv/bin/pip" install moto==5.2.5
    "$HOME/.cache/jointer/catalog-venv/bin/python" controller/catalog/generate.py

    # staleness check only (exit 1 if aws.json differs from a fresh build):
    "$HOME/.cache/jointer/catalog-venv/bin/python" controller/catalog/generate.py --check

Input: the AWS data files that moto 5.2.5 (Apache-2.0) ships inside its wheel,
read directly as gzip'd JSON (moto itself is never imported or started):

    moto/ec2/resources/instance_types.json.gz
        DescribeInstanceTypes output for 1,395 types.
    moto/ec2/resources/instance_type_offerings/availability-zone/<region>.json.gz
    moto/ec2/resources/instance_type_offerings/availability-zone-id/<region>.json.gz
        DescribeInstanceTypeOfferings per zone name / per zone id.

Only facts (numbers, names, which zone offers which type) are taken from those
files. Prices are NOT in moto's data: od_price is an estimate produced by the
model documented below. The script uses only the Python standard library.

Output: compact JSON (no whitespace, sorted keys, ASCII, trailing newline);
running the script twice yields identical bytes.

----------------------------------------------------------------------------
Price model (od_price, USD/hour, on-demand Linux, us-east-1-like list prices)
----------------------------------------------------------------------------
Every instance type is priced from its own shape, with per-category rates:

  general (m, c, r, t, z, a, i, im, is, d, h, x, u, hpc and unknown):
      price = G * S * M * (vcpu*CPU + mem_gib*MEM + storage_gb*STO)
  accelerated (g, gr, p, inf, trn, dl, f, vt):
      price = H * M * (vcpu*0.035 + mem_gib*0.004) + sum(units * RATE[device])

  CPU, MEM   per-vCPU and per-GiB hourly rates of the category (CATEGORY_RATES):
             m/r/i/d/z/a/h 0.033 + 0.00375, c 0.035 + 0.00375 (compute: dearer
             vCPU, calibrated on c5), t 0 + 0.0104 (burstable: priced by memory
             only, as T3 list prices are), x 0.010 + 0.0058 and u 0.010 + 0.0082
             (memory-optimised: cheap GiB), hpc 0.022 + 0.0024.
  STO        per-GB local-disk rate: SSD 0.00022 (0.0001 in the storage-optimised
             i, im, is and in hpc); HDD 0.00004, or 0.000012 when the disks are
             10 TB or larger (dense HDD such as d3en).
  G          generation factor for m/c/r/t/i/im/is/d, relative to the category's
             reference generation (m/c/r 5, t 3, i 3, im/is 4, d 3):
             <= -3: 1.45, -2: 1.30, -1: 1.10, 0 and +1: 1.00, +2: 1.05,
             >= +3: 1.10 (older generations cost more per unit; the newest
             carry a small premium, as m7i/m8i list prices do). 1 elsewhere.
  M          processor: Intel 1.00, AWS Graviton 0.80, AMD 0.90 up to
             generation 6 and 1.10 from generation 7 (where a vCPU is a whole
             core).
             hpc ignores M.
  S          family-suffix factor, m/c/r/t only: 'n' (network) x1.30, 'b' (EBS)
             x1.18, 'z' (high frequency) x1.40, '-flex' x0.95, multiplied.
             z1d / a1 get a category factor instead (z 1.30, a 0.80).
  H          host factor of accelerated categories: inf 0.53, f 0.80, else 1.
  units      GPUs (logical count x partition size, so fractional GPUs are
             charged their fraction) or Neuron / inference / media / FPGA
             devices; RATE per device in ACCEL_RATES (e.g. T4 0.30, A10G 0.80,
             L4 0.60, V100 2.55 (32 GB: 3.10), A100 3.10 (80 GB: 4.12),
             H100 5.00, inferentia2 0.65, trainium 0.936). Unknown devices:
             0.03 per GiB of device memory.
  metal      "<family>.metal-<N>xl" costs the same as "<family>.<N>xlarge";
             "<family>.metal" the same as the non-metal size of its family with
             the same vCPUs, memory, GPUs and accelerators (in practice the
             largest size), else the formula, which prices the same shape.
  rounding   4 decimals.

The rates were fitted by hand to us-east-1 on-demand Linux list prices as
remembered (ANCHORS below; not looked up, so they may be slightly off); the
script prints estimate vs. remembered price. Agreement on the anchors is by
construction, not a validation. Against ~45 further remembered prices the
estimates are mostly within 15 %; a few families (d2, c7gn, is4gen, the
1-GPU g4dn.16xlarge) are 15-30 % off.

Spot: regions[r].spot_discount[zone] = 0.55 + 0.20 * u(zone), where u(zone)
is the first 4 bytes of sha256("jointer-spot:" + zone) read as a big-endian
integer / 2**32, rounded to 3 decimals. Spot price = od_price * (1 - discount).
"""

import argparse
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections import defaultdict

MOTO_VERSION = "5.2.5"

REGIONS = [
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-northeast-1",
]

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "aws.json")

# Fields omitted from a type record when they hold these values; the loader
# fills them back from the top-level "defaults" object.
DEFAULTS = {
    "accelerator_count": 0,
    "accelerator_name": None,
    "bare_metal": False,
    "gpu_count": 0,
    "gpu_manufacturer": None,
    "gpu_memory_mib": 0,
    "gpu_name": None,
    "local_nvme_gb": 0,
    "spot": True,
}

# ---------------------------------------------------------------- price model
# category -> (cpu $/vCPU-h, mem $/GiB-h, reference generation or None, factor)
CATEGORY_RATES = {
    "m": (0.033, 0.00375, 5, 1.0),
    "c": (0.035, 0.00375, 5, 1.0),
    "r": (0.033, 0.00375, 5, 1.0),
    "t": (0.0, 0.0104, 3, 1.0),
    "i": (0.033, 0.00375, 3, 1.0),
    "im": (0.033, 0.00375, 4, 1.0),
    "is": (0.033, 0.00375, 4, 1.0),
    "d": (0.033, 0.00375, 3, 1.0),
    "h": (0.033, 0.00375, None, 1.0),
    "z": (0.033, 0.00375, None, 1.30),
    "a": (0.033, 0.00375, None, 0.80),
    "x": (0.010, 0.0058, None, 1.0),
    "u": (0.010, 0.0082, None, 1.0),
    "hpc": (0.022, 0.0024, None, 1.0),
}
FALLBACK_RATES = (0.033, 0.00375, None, 1.0)
SUFFIX_CATEGORIES = {"m", "c", "r", "t"}
CHEAP_SSD_CATEGORIES = {"i", "im", "is", "hpc"}
SSD_RATE = 0.00022
SSD_RATE_CHEAP = 0.0001
HDD_RATE = 0.00004
HDD_RATE_DENSE = 0.000012  # disks of DENSE_HDD_GB or more
DENSE_HDD_GB = 10000

ACCEL_HOST_CPU = 0.035
ACCEL_HOST_MEM = 0.004
ACCELERATED = {"g": 1.0, "gr": 1.0, "p": 1.0, "inf": 0.53, "trn": 1.0, "dl": 1.0, "f": 0.80, "vt": 1.0}

# device (normalised name) -> [(minimum device memory MiB, $/device-h), ...]
ACCEL_RATES = {
    "t4": [(0, 0.30)],
    "t4g": [(0, 0.28)],
    "a10g": [(0, 0.80)],
    "l4": [(0, 0.60)],
    "l40s": [(0, 1.60)],
    "v100": [(0, 2.55), (32768, 3.10)],
    "a100": [(0, 3.10), (81920, 4.12)],
    "h100": [(0, 5.00)],
    "h200": [(0, 6.00)],
    "b200": [(0, 12.00)],
    "b300": [(0, 15.00)],
    "rtx-pro-4500": [(0, 0.90)],
    "rtx-pro-server-6000": [(0, 2.00)],
    "inferentia": [(0, 0.137)],
    "inferentia2": [(0, 0.65)],
    "trainium": [(0, 0.936)],
    "trainium2": [(0, 1.90)],
    "qualcomm-ai100": [(0, 0.31)],
    "u30": [(0, 0.135)],
    "virtex-ultrascale-vu47p": [(0, 0.50)],
}
UNKNOWN_ACCEL_PER_GIB = 0.03


def generation_factor(delta):
    if delta <= -3:
        return 1.45
    if delta == -2:
        return 1.30
    if delta == -1:
        return 1.10
    if delta <= 1:
        return 1.00
    if delta == 2:
        return 1.05
    return 1.10


def manufacturer_factor(manufacturer, generation):
    if manufacturer == "aws":
        return 0.80
    if manufacturer == "amd":
        return 0.90 if generation <= 6 else 1.10
    return 1.00


def suffix_factor(suffix):
    head, _, tail = suffix.partition("-")
    f = 1.0
    if "n" in head:
        f *= 1.30
    if "b" in head:
        f *= 1.18
    if "z" in head:
        f *= 1.40
    if tail == "flex":
        f *= 0.95
    return f


def accel_rate(name, mem_mib):
    tiers = ACCEL_RATES.get(name)
    if tiers is None:
        return UNKNOWN_ACCEL_PER_GIB * mem_mib / 1024.0
    rate = tiers[0][1]
    for floor, r in tiers:
        if mem_mib >= floor:
            rate = r
    return rate


def estimate_price(spec):
    """Formula price (before the metal rule) of a spec dict with keys
    category, generation, suffix, vcpu, memory_mib, cpu_manufacturer,
    storage_gb, storage_kind ('ssd'/'hdd'/'dense-hdd'/None) and devices
    ([(normalised name, units, memory MiB per device)])."""
    cat = spec["category"]
    gen = spec["generation"]
    mem_gib = spec["memory_mib"] / 1024.0
    mfr = manufacturer_factor(spec["cpu_manufacturer"], gen)
    if cat in ACCELERATED:
        host = ACCELERATED[cat] * mfr * (spec["vcpu"] * ACCEL_HOST_CPU + mem_gib * ACCEL_HOST_MEM)
        devices = sum(units * accel_rate(name, mem) for name, units, mem in spec["devices"])
        return host + devices
    cpu, mem, ref_gen, cat_factor = CATEGORY_RATES.get(cat, FALLBACK_RATES)
    kind = spec["storage_kind"]
    if kind == "dense-hdd":
        sto = HDD_RATE_DENSE
    elif kind == "hdd":
        sto = HDD_RATE
    elif kind == "ssd":
        sto = SSD_RATE_CHEAP if cat in CHEAP_SSD_CATEGORIES else SSD_RATE
    else:
        sto = 0.0
    g = generation_factor(gen - ref_gen) if ref_gen is not None else 1.0
    s = suffix_factor(spec["suffix"]) if cat in SUFFIX_CATEGORIES else 1.0
    if cat == "hpc":
        mfr = 1.0
    base = spec["vcpu"] * cpu + mem_gib * mem + spec["storage_gb"] * sto
    return cat_factor * g * s * mfr * base


# (name, remembered us-east-1 on-demand Linux $/h, synthetic spec or None).
# A synthetic spec is used for types that moto's data does not contain.
ANCHORS = [
    ("m5.large", 0.096, None),
    ("c5.large", 0.085, None),
    ("r5.large", 0.126, None),
    ("m6g.large", 0.077, None),
    ("t3.medium", 0.0416, None),
    ("c6i.xlarge", 0.17, None),
    ("m5.24xlarge", 4.608, None),
    (
        "p3.2xlarge",
        3.06,
        {  # not in moto 5.2.5's data: 8 vCPU, 61 GiB, 1x V100 16 GB, Intel
            "category": "p", "generation": 3, "suffix": "", "vcpu": 8,
            "memory_mib": 62464, "cpu_manufacturer": "intel", "storage_gb": 0,
            "storage_kind": None, "devices": [("v100", 1.0, 16384)],
        },
    ),
    ("g5.xlarge", 1.006, None),
    # secondary anchors (also checked by test_generate.py)
    ("m5d.large", 0.113, None),
    ("m7g.large", 0.0816, None),
    ("t4g.medium", 0.0336, None),
    ("m6a.large", 0.0864, None),
    ("r6g.large", 0.1008, None),
    ("c7i.large", 0.08925, None),
    ("g4dn.xlarge", 0.526, None),
    ("p4d.24xlarge", 32.7726, None),
    ("inf2.xlarge", 0.7582, None),
    ("trn1.2xlarge", 1.3438, None),
    ("x2iedn.xlarge", 0.83375, None),
    ("i3.large", 0.156, None),
    ("z1d.large", 0.186, None),
    ("d3.xlarge", 0.499, None),
    ("hpc6a.48xlarge", 2.88, None),
    ("u-6tb1.112xlarge", 54.6, None),
    ("a1.large", 0.051, None),
]
PRIMARY_ANCHORS = 9

PRICE_MODEL = (
    "Estimated on-demand Linux USD/hour; moto has no prices, so these are NOT AWS list prices. "
    "General categories: price = G*S*M*(vcpu*CPU + mem_gib*MEM + storage_gb*STO) with per-category "
    "(CPU, MEM): m/r/i/d/z/a/h (0.033, 0.00375), c (0.035, 0.00375), t (0, 0.0104), x (0.010, 0.0058), "
    "u (0.010, 0.0082), hpc (0.022, 0.0024); STO per GB of local disk: SSD 0.00022 (0.0001 in i/im/is/hpc), "
    "HDD 0.00004 (0.000012 when every disk is >= 10 TB); G = generation factor for m/c/r/t/i/im/is/d relative to reference generation "
    "(m/c/r 5, t 3, i 3, im/is 4, d 3): <=-3 1.45, -2 1.30, -1 1.10, 0/+1 1.00, +2 1.05, >=+3 1.10; "
    "M = processor factor: Intel 1.00, AWS Graviton 0.80, AMD 0.90 (generation<=6) or 1.10 (>=7), "
    "not applied to hpc; S = family-suffix factor for m/c/r/t: n 1.30, b 1.18, z 1.40, -flex 0.95; "
    "category factor z 1.30, a 0.80. Accelerated categories (g, gr, p, inf, trn, dl, f, vt): "
    "price = H*M*(vcpu*0.035 + mem_gib*0.004) + sum(device units * device rate), H = 0.53 for inf, "
    "0.80 for f, else 1; device rates per hour: t4 0.30, t4g 0.28, a10g 0.80, l4 0.60, l40s 1.60, "
    "v100 2.55 (32 GB 3.10), a100 3.10 (80 GB 4.12), h100 5.00, h200 6.00, b200 12.00, b300 15.00, "
    "rtx-pro-4500 0.90, rtx-pro-server-6000 2.00, inferentia 0.137, inferentia2 0.65, trainium 0.936, "
    "trainium2 1.90, qualcomm-ai100 0.31, u30 0.135, virtex-ultrascale-vu47p 0.50, other devices "
    "0.03 per GiB of device memory; fractional GPUs count their partition size. "
    "Metal: '<f>.metal-<N>xl' = price of '<f>.<N>xlarge', '<f>.metal' = price of the non-metal size of "
    "the family with the same vCPUs, memory, GPUs and accelerators if any, else the formula. Rounded to 4 decimals. Calibrated to within ~15% of remembered us-east-1 "
    "list prices of m5.large, c5.large, r5.large, m6g.large, t3.medium, c6i.xlarge, m5.24xlarge, "
    "p3.2xlarge, g5.xlarge (fitted to them); other types are mostly within 15%, a few 15-30% off."
)

SPOT_MODEL = (
    "spot price = od_price * (1 - spot_discount[zone]); spot_discount[zone] = 0.55 + 0.20 * "
    "(first 4 bytes of sha256('jointer-spot:' + zone name) as a big-endian integer / 2**32), "
    "rounded to 3 decimals. Synthetic: deterministic, per zone, within [0.55, 0.75]."
)

# ------------------------------------------------------------------ parsing
NAME_RE = re.compile(r"^([a-z]+)(?:-\d+tb)?(\d+)(.*)$")


def parse_name(name):
    """Split an instance type name the way Karpenter's labels do.

    family = part before the dot, size = part after it, category = leading
    letters of the family, generation = first digit run after the category
    (a "-<N>tb" memory tag right after the category, as in u-6tb1, is skipped),
    suffix = what follows the generation (e.g. "gd", "i-flex", "-b200").
    """
    family, dot, size = name.partition(".")
    if not dot or not size:
        raise ValueError("instance type without a size: %r" % name)
    m = NAME_RE.match(family)
    if not m:
        raise ValueError("unparseable instance family: %r" % family)
    return {
        "family": family,
        "size": size,
        "category": m.group(1),
        "generation": int(m.group(2)),
        "suffix": m.group(3),
    }


def label_value(text):
    """Lower-case, label-safe form of a device name ("RTX PRO 4500" -> "rtx-pro-4500")."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


FIXED_BANDWIDTH_RE = re.compile(r"^(?:(\d+)x )?([\d.]+) Gigabit$")


def bandwidth_mbps(net):
    """Fixed figures ("25 Gigabit", "4x 100 Gigabit") are taken as stated;
    "Up to N Gigabit" / "Low" / "Moderate" / "High" use the sum of the
    network cards' BaselineBandwidthInGbps (a single card for those types)."""
    m = FIXED_BANDWIDTH_RE.match(net.get("NetworkPerformance", ""))
    if m:
        gbps = int(m.group(1) or 1) * float(m.group(2))
    else:
        gbps = sum(c.get("BaselineBandwidthInGbps", 0.0) for c in net.get("NetworkCards", []))
    return int(round(gbps * 1000))


def default_card_enis(net):
    idx = net.get("DefaultNetworkCardIndex", 0)
    for card in net.get("NetworkCards", []):
        if card.get("NetworkCardIndex") == idx and "MaximumNetworkInterfaces" in card:
            return card["MaximumNetworkInterfaces"]
    return net["MaximumNetworkInterfaces"]


# -------------------------------------------------------------------- input
def moto_resources():
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("moto is not installed; see the command at the top of %s" % __file__)
    version = importlib.metadata.version("moto")
    if version != MOTO_VERSION:
        sys.exit("moto %s found, %s required (the output records the version)" % (version, MOTO_VERSION))
    return os.path.join(list(spec.submodule_search_locations)[0], "ec2", "resources")


def load_gz_json(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


# -------------------------------------------------------------------- build
def build_type(info, notes):
    name = info["InstanceType"]
    parsed = parse_name(name)
    archs = info["ProcessorInfo"]["SupportedArchitectures"]
    if "x86_64" in archs:
        arch = "amd64"
    elif "arm64" in archs:
        arch = "arm64"
    else:
        return None
    if len(archs) > 1:
        notes["multi_arch"].append(name)
    manufacturer = info["ProcessorInfo"].get("Manufacturer", "").lower() or None
    net = info["NetworkInfo"]
    hypervisor = info.get("Hypervisor")
    if hypervisor is None:
        notes["no_hypervisor_metal" if info.get("BareMetal") else "no_hypervisor"].append(name)

    storage = info.get("InstanceStorageInfo")
    storage_gb, storage_kind, nvme_gb = 0, None, 0
    if storage:
        storage_gb = storage.get("TotalSizeInGB", 0)
        disks = storage.get("Disks", [])
        if disks and all(d.get("Type") == "hdd" for d in disks):
            dense = all(d.get("SizeInGB", 0) >= DENSE_HDD_GB for d in disks)
            storage_kind = "dense-hdd" if dense else "hdd"
        else:
            storage_kind = "ssd"
        if storage.get("NvmeSupport", "unsupported") != "unsupported":
            nvme_gb = storage_gb

    devices = []
    gpu_count, gpu_name, gpu_mfr, gpu_mem = 0, None, None, 0
    gpu_info = info.get("GpuInfo")
    if gpu_info and gpu_info.get("Gpus"):
        g0 = gpu_info["Gpus"][0]
        gpu_name = label_value(g0["Name"])
        gpu_mfr = label_value(g0.get("Manufacturer", "")) or None
        gpu_mem = g0.get("MemoryInfo", {}).get("SizeInMiB", 0)
        for g in gpu_info["Gpus"]:
            count = g.get("Count", 0)
            logical = g.get("LogicalGpuCount", count)
            fraction = g.get("GpuPartitionSize", 1.0)
            if count == 0 and logical:
                notes["fractional_gpu"].append(name)
            gpu_count += count or logical
            units = count if count else logical * fraction
            devices.append((label_value(g["Name"]), units, g.get("MemoryInfo", {}).get("SizeInMiB", 0)))

    acc_count, acc_name = 0, None
    for key, list_key in (
        ("NeuronInfo", "NeuronDevices"),
        ("InferenceAcceleratorInfo", "Accelerators"),
        ("MediaAcceleratorInfo", "Accelerators"),
        ("FpgaInfo", "Fpgas"),
    ):
        block = info.get(key)
        if not block or not block.get(list_key):
            continue
        acc_name = label_value(block[list_key][0]["Name"])
        for a in block[list_key]:
            acc_count += a.get("Count", 0)
            devices.append((label_value(a["Name"]), a.get("Count", 0), a.get("MemoryInfo", {}).get("SizeInMiB", 0)))
        break  # inf1 lists its chips under both Neuron and Inference info: count once

    record = {
        "name": name,
        "vcpu": info["VCpuInfo"]["DefaultVCpus"],
        "memory_mib": info["MemoryInfo"]["SizeInMiB"],
        "arch": arch,
        "family": parsed["family"],
        "category": parsed["category"],
        "generation": parsed["generation"],
        "size": parsed["size"],
        "cpu_manufacturer": manufacturer,
        "hypervisor": hypervisor,
        "bare_metal": bool(info.get("BareMetal", False)),
        "gpu_count": gpu_count,
        "gpu_name": gpu_name,
        "gpu_manufacturer": gpu_mfr,
        "gpu_memory_mib": gpu_mem,
        "accelerator_count": acc_count,
        "accelerator_name": acc_name,
        "enis": default_card_enis(net),
        "ipv4_per_eni": net["Ipv4AddressesPerInterface"],
        "network_bandwidth_mbps": bandwidth_mbps(net),
        "local_nvme_gb": nvme_gb,
        "spot": "spot" in info.get("SupportedUsageClasses", []),
    }
    spec = {
        "category": parsed["category"],
        "generation": parsed["generation"],
        "suffix": parsed["suffix"],
        "vcpu": record["vcpu"],
        "memory_mib": record["memory_mib"],
        "cpu_manufacturer": manufacturer,
        "storage_gb": storage_gb,
        "storage_kind": storage_kind,
        "devices": devices,
    }
    record["od_price"] = estimate_price(spec)
    return record


def apply_metal_rule(records):
    by_name = {r["name"]: r for r in records}
    by_family = defaultdict(list)
    for r in records:
        by_family[r["family"]].append(r)
    for r in records:
        size = r["size"]
        if not size.startswith("metal"):
            continue
        m = re.match(r"^metal-(\d+)xl$", size)
        twin = None
        if m:
            twin = by_name.get("%s.%sxlarge" % (r["family"], m.group(1)))
        elif size == "metal":
            shape = (r["vcpu"], r["memory_mib"], r["gpu_count"], r["accelerator_count"])
            twins = [
                o
                for o in by_family[r["family"]]
                if not o["size"].startswith("metal")
                and (o["vcpu"], o["memory_mib"], o["gpu_count"], o["accelerator_count"]) == shape
            ]
            if twins:
                twin = min(twins, key=lambda o: o["name"])
        if twin is not None:
            r["od_price"] = twin["od_price"]


def zone_abbrev_prefix(region):
    """'us-east-1' -> 'use1', 'ap-southeast-1' -> 'apse1' (fallback zone ids only)."""
    parts = region.split("-")
    short = {"north": "n", "south": "s", "east": "e", "west": "w", "central": "c"}
    direction = parts[1]
    for word in ("north", "south"):
        if direction.startswith(word) and direction != word:
            direction = short[word] + short[direction[len(word):]]
            break
    else:
        direction = short.get(direction, direction[:1])
    return parts[0] + direction + parts[-1]


def spot_discount(zone):
    digest = hashlib.sha256(("jointer-spot:" + zone).encode("ascii")).digest()
    u = int.from_bytes(digest[:4], "big") / 2.0 ** 32
    return round(0.55 + 0.20 * u, 3)


def build_region(resources, region, known, notes):
    az_path = os.path.join(resources, "instance_type_offerings", "availability-zone", region + ".json.gz")
    if not os.path.exists(az_path):
        notes["missing_regions"].append(region)
        return None
    by_zone = defaultdict(set)
    for o in load_gz_json(az_path):
        by_zone[o["Location"]].add(o["InstanceType"])
    zones = sorted(by_zone)

    # Zone ids: moto stores the offerings a second time keyed by zone id. The
    # zone-name -> zone-id mapping is recovered by matching identical offering
    # sets; if that is not a unique 1:1 match, ids are derived from the order.
    zone_ids = None
    id_path = os.path.join(resources, "instance_type_offerings", "availability-zone-id", region + ".json.gz")
    if os.path.exists(id_path):
        by_id = defaultdict(set)
        for o in load_gz_json(id_path):
            by_id[o["Location"]].add(o["InstanceType"])
        matched = []
        for z in zones:
            hits = [i for i in sorted(by_id) if by_id[i] == by_zone[z]]
            matched.append(hits[0] if len(hits) == 1 else None)
        if None not in matched and len(set(matched)) == len(zones):
            zone_ids = matched
    if zone_ids is None:
        notes["derived_zone_ids"].append(region)
        prefix = zone_abbrev_prefix(region)
        zone_ids = ["%s-az%d" % (prefix, i + 1) for i in range(len(zones))]

    offerings = defaultdict(list)
    for idx, z in enumerate(zones):
        for t in by_zone[z]:
            if t in known:
                offerings[t].append(idx)
            else:
                notes["offered_but_skipped"].add(t)
    return {
        "zones": zones,
        "zone_ids": zone_ids,
        "spot_discount": {z: spot_discount(z) for z in zones},
        "offerings": {t: sorted(v) for t, v in sorted(offerings.items())},
    }


def compact_record(record):
    return {k: v for k, v in record.items() if not (k in DEFAULTS and DEFAULTS[k] == v and type(DEFAULTS[k]) is type(v))}


def build():
    """Return (catalog dict, notes dict, full records keyed by name)."""
    resources = moto_resources()
    raw = load_gz_json(os.path.join(resources, "instance_types.json.gz"))
    notes = defaultdict(list)
    notes["offered_but_skipped"] = set()
    records = []
    for name in sorted(raw):
        if name.startswith("mac"):
            notes["skipped_mac"].append(name)
            continue
        rec = build_type(raw[name], notes)
        if rec is None:
            notes["skipped_arch"].append(name)
            continue
        records.append(rec)
    apply_metal_rule(records)
    for r in records:
        r["od_price"] = round(r["od_price"], 4)
    known = {r["name"] for r in records}
    regions = {}
    for region in REGIONS:
        built = build_region(resources, region, known, notes)
        if built is not None:
            regions[region] = built
    catalog = {
        "source": "moto %s bundled AWS data" % MOTO_VERSION,
        "price_model": PRICE_MODEL,
        "spot_model": SPOT_MODEL,
        "defaults": DEFAULTS,
        "types": [compact_record(r) for r in records],
        "regions": regions,
    }
    return catalog, notes, {r["name"]: r for r in records}


def serialise(catalog):
    text = json.dumps(catalog, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return (text + "\n").encode("ascii")


def anchor_rows(full):
    rows = []
    for name, listed, synthetic in ANCHORS:
        if synthetic is not None:
            est = round(estimate_price(synthetic), 4)
            origin = "synthetic"
        elif name in full:
            est = full[name]["od_price"]
            origin = "catalog"
        else:
            continue
        rows.append((name, est, listed, 100.0 * (est - listed) / listed, origin))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if aws.json is stale; write nothing")
    ap.add_argument("--output", default=OUTPUT)
    args = ap.parse_args()

    catalog, notes, full = build()
    data = serialise(catalog)

    print("%-18s %10s %10s %8s  %s" % ("anchor", "estimate", "list", "diff", "from"))
    for name, est, listed, diff, origin in anchor_rows(full):
        print("%-18s %10.4f %10.4f %+7.1f%%  %s" % (name, est, listed, diff, origin))
    print("types: %d, regions: %s" % (len(catalog["types"]), ", ".join(catalog["regions"])))
    for key in ("skipped_mac", "skipped_arch", "missing_regions", "derived_zone_ids"):
        if notes.get(key):
            print("%s: %s" % (key, ", ".join(notes[key])))

    if args.check:
        try:
            with open(args.output, "rb") as f:
                current = f.read()
        except FileNotFoundError:
            current = b""
        if current != data:
            print("STALE: %s differs from a fresh generation" % args.output)
            return 1
        print("up to date: %s (%d bytes)" % (args.output, len(data)))
        return 0
    with open(args.output, "wb") as f:
        f.write(data)
    print("wrote %s (%d bytes)" % (args.output, len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
