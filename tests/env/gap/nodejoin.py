"""The node-join simulator: plays the booting EC2 instance (nodeadm + kubelet) of the
test environment's simulated nodes, and the cloud controller's node deletion.

Every poll interval it lists the instances in moto that belong to the cluster (tag key
kubernetes.io/cluster/<cluster>, or karpenter.sh/nodepool, present). For each instance
that is running it waits the registration delay, reads and parses its user data (AL2023
MIME multipart with an application/node.eks.aws NodeConfig part, or a bare NodeConfig),
checks it the way nodeadm would, and registers a Node through the local API server as a
kubelet would: name = private DNS name, providerID aws:///<zone>/<id>, the kubelet's and
cloud provider's labels, --node-labels and --register-with-taints from the NodeConfig,
capacity and allocatable from the instance type. The Node carries the annotation
kwok.x-k8s.io/node=fake, so kwok makes it Ready and runs its pods. When the instance is
terminated (or gone from moto) the Node is deleted. An instance whose user data cannot be
parsed or would not join is logged once and never joined.

Talks to moto directly (not through the gap layer: these calls are not the product's, so
they are neither logged nor subject to injected faults) and to the API server with the
admin client certificate. Started by up.sh; logs to stdout (.run/logs/nodejoin.log).
"""

import argparse
import base64
import binascii
import datetime
import email
import email.policy
import json
import os
import re
import sys
import time
from urllib.parse import urlsplit

import boto3
import botocore.config
import botocore.exceptions
import requests
import yaml

# Set on every Node this simulator registers, so a restarted simulator finds its nodes.
INSTANCE_ANNOTATION = "jointer.dev/test-instance-id"
# A test tags an instance `jointer.dev/unhealthy: <condition>=<status>` (e.g. KernelReady=False)
# to have its node report that condition, as the EKS node monitoring agent would, bad since an
# hour ago: past every repair toleration, so node repair can be tested without waiting.
UNHEALTHY_TAG = "jointer.dev/unhealthy"
# Labels a kubelet may set with --node-labels in the kubernetes.io / k8s.io namespaces;
# any other key there makes the kubelet exit at start (so the node never joins).
KUBELET_ALLOWED_LABELS = {
    "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
    "beta.kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
}
KUBELET_ALLOWED_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def log(msg):
    print(f"{datetime.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {msg}", flush=True)


class Rejected(Exception):
    """The instance would not join (bad user data, nodeadm or kubelet would fail)."""


# ---- quantities --------------------------------------------------------------------------

SUFFIXES = {
    "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4,
    "k": 1000, "M": 1000 ** 2, "G": 1000 ** 3, "T": 1000 ** 4, "m": 0.001, "": 1,
}


def quantity(value):
    """A Kubernetes quantity as a float in base units (cores, bytes)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(Ki|Mi|Gi|Ti|k|M|G|T|m)?\s*", str(value))
    if not m:
        raise Rejected(f"invalid quantity {value!r}")
    return float(m.group(1)) * SUFFIXES[m.group(2) or ""]


def eks_kube_reserved_cpu_m(vcpus):
    """The EKS AMIs' kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of
    the next two, 0.25% of the rest (millicores)."""
    reserved, cores = 0.0, vcpus
    for share, span in ((60, 1), (10, 1), (5, 2)):
        take = min(cores, span)
        reserved += share * take
        cores -= take
    reserved += 2.5 * max(cores, 0)
    return int(reserved)


# ---- user data ---------------------------------------------------------------------------


def parse_user_data(raw):
    """The merged NodeConfig spec from the instance's user data (bytes)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("user data is not UTF-8 text")
    docs = []
    if re.search(r"(?im)^content-type:\s*multipart/", text):
        msg = email.message_from_string(text, policy=email.policy.compat32)
        if not msg.is_multipart():
            raise Rejected("MIME user data without parts (check the boundary)")
        for part in msg.walk():
            if part.get_content_type() == "application/node.eks.aws":
                payload = part.get_payload(decode=True) or b""
                docs.append(payload.decode("utf-8", "replace"))
        if not docs:
            raise Rejected("MIME user data has no application/node.eks.aws part")
    elif re.search(r"(?m)^kind:\s*NodeConfig\s*$", text):
        docs.append(text)
    else:
        raise Rejected("user data is neither AL2023 MIME multipart nor a NodeConfig")
    spec = {"cluster": {}, "kubelet": {"config": {}, "flags": []}}
    found = False
    for doc in docs:
        try:
            objs = [o for o in yaml.safe_load_all(doc) if o]
        except yaml.YAMLError as e:
            raise Rejected(f"NodeConfig is not valid YAML: {e}")
        for obj in objs:
            if not isinstance(obj, dict) or obj.get("kind") != "NodeConfig":
                raise Rejected("application/node.eks.aws part holds something other than a NodeConfig")
            if obj.get("apiVersion") not in ("node.eks.aws/v1alpha1", "node.eks.aws/v1beta1"):
                raise Rejected(f"NodeConfig apiVersion {obj.get('apiVersion')!r} is not node.eks.aws/v1alpha1")
            found = True
            s = obj.get("spec") or {}
            # nodeadm merges the documents in order: later scalars win, flags accumulate.
            spec["cluster"].update(s.get("cluster") or {})
            kubelet = s.get("kubelet") or {}
            spec["kubelet"]["config"].update(kubelet.get("config") or {})
            spec["kubelet"]["flags"] += [str(f) for f in (kubelet.get("flags") or [])]
    if not found:
        raise Rejected("no NodeConfig in the user data")
    return spec


def parse_flags(flags):
    labels, taints, max_pods = {}, [], None
    i = 0
    while i < len(flags):
        flag = flags[i]
        name, _, value = flag.partition("=")
        if not _ and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value, i = flags[i + 1], i + 1
        if name == "--node-labels":
            for item in filter(None, value.split(",")):
                k, eq, v = item.partition("=")
                if not eq:
                    raise Rejected(f"--node-labels item {item!r} is not key=value")
                labels[k.strip()] = v.strip()
        elif name == "--register-with-taints":
            for item in filter(None, value.split(",")):
                kv, colon, effect = item.rpartition(":")
                if not colon or effect not in TAINT_EFFECTS:
                    raise Rejected(f"--register-with-taints item {item!r} is not key[=value]:Effect")
                k, _, v = kv.partition("=")
                taints.append({"key": k, "value": v, "effect": effect} if v else
                              {"key": k, "effect": effect})
        elif name == "--max-pods":
            max_pods = int(value)
        i += 1
    return labels, taints, max_pods


def check_labels(labels):
    for key in labels:
        prefix = key.split("/", 1)[0] if "/" in key else ""
        restricted = prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or \
            prefix == "k8s.io" or prefix.endswith(".k8s.io")
        if restricted and key not in KUBELET_ALLOWED_LABELS and \
                not any(prefix == ns or prefix.endswith("." + ns) for ns in KUBELET_ALLOWED_NAMESPACES):
            raise Rejected(f"kubelet refuses --node-labels key {key!r} (kubernetes.io/k8s.io namespace)")


# ---- the simulator -----------------------------------------------------------------------


class Simulator:
    def __init__(self, args):
        self.args = args
        self.ec2 = boto3.session.Session().client(
            "ec2", region_name=args.region, endpoint_url=args.moto_url,
            aws_access_key_id="testing", aws_secret_access_key="testing",
            config=botocore.config.Config(retries={"max_attempts": 2}, read_timeout=30))
        self.eks = boto3.session.Session().client(
            "eks", region_name=args.region, endpoint_url=args.moto_url,
            aws_access_key_id="testing", aws_secret_access_key="testing",
            config=botocore.config.Config(retries={"max_attempts": 2}, read_timeout=30))
        self.clusters = {args.cluster}
        self.kube = requests.Session()
        # Not the machine's CA bundle or proxies from the environment (REQUESTS_CA_BUNDLE,
        # HTTPS_PROXY): only the cluster's CA, only loopback.
        self.kube.trust_env = False
        self.kube.cert = (args.client_cert, args.client_key)
        self.kube.verify = args.ca_file
        with open(args.ca_file, "rb") as f:
            self.ca_pem = f.read()
        self.state = {}  # instance id -> {"seen": t, "status": waiting|joined|rejected, "node": name}
        self.itypes = {}
        self.zone_ids = {}
        self.ready_written = False
        self.prev_poll = None

    # -- API server --

    def api(self, method, path, **kw):
        return self.kube.request(method, self.args.apiserver_url + path, timeout=15, **kw)

    def recover(self):
        """Nodes registered by an earlier run of the simulator: re-adopt them."""
        r = self.api("GET", "/api/v1/nodes")
        r.raise_for_status()
        for node in r.json().get("items", []):
            iid = (node["metadata"].get("annotations") or {}).get(INSTANCE_ANNOTATION)
            if iid:
                self.state[iid] = {"seen": time.time(), "status": "joined",
                                   "node": node["metadata"]["name"]}
                log(f"adopted node {node['metadata']['name']} of {iid}")

    # -- moto --

    def instances(self):
        tag_keys = [f"kubernetes.io/cluster/{self.args.cluster}", "karpenter.sh/nodepool"]
        out = {}
        paginator = self.ec2.get_paginator("describe_instances")
        # Terminated instances stay listed in moto forever; leaving them out keeps this
        # poll cheap, and an instance that drops out of the list is treated as gone.
        live = ["pending", "running", "stopping", "stopped", "shutting-down"]
        for page in paginator.paginate(Filters=[{"Name": "tag-key", "Values": tag_keys},
                                                {"Name": "instance-state-name", "Values": live}]):
            for res in page["Reservations"]:
                for inst in res["Instances"]:
                    out[inst["InstanceId"]] = inst
        return out

    def joins_cluster(self, name, inst):
        """Tests make a world (and an EKS cluster in moto) each, all served by the one API
        server: an instance joins the cluster its NodeConfig names when that cluster exists
        and the instance carries its kubernetes.io/cluster/<name> tag."""
        if name == self.args.cluster:
            return True
        tagged = {t["Key"] for t in inst.get("Tags") or []}
        if f"kubernetes.io/cluster/{name}" not in tagged:
            return False
        if name not in self.clusters:
            try:
                self.eks.describe_cluster(name=name)
            except botocore.exceptions.ClientError:
                return False
            self.clusters.add(name)
        return True

    def instance_type(self, name):
        if name not in self.itypes:
            its = self.ec2.describe_instance_types(
                Filters=[{"Name": "instance-type", "Values": [name]}])["InstanceTypes"]
            self.itypes[name] = its[0] if its else None
        return self.itypes[name]

    def zone_id(self, zone):
        if not self.zone_ids:
            for z in self.ec2.describe_availability_zones()["AvailabilityZones"]:
                self.zone_ids[z["ZoneName"]] = z.get("ZoneId")
        return self.zone_ids.get(zone)

    def root_volume_gib(self, inst):
        """The root volume's size (the kubelet's ephemeral storage); 20 GiB, the EKS AMI's
        default, when moto does not say."""
        root = inst.get("RootDeviceName")
        for bdm in inst.get("BlockDeviceMappings") or []:
            vid = (bdm.get("Ebs") or {}).get("VolumeId")
            if vid and (root is None or bdm.get("DeviceName") == root):
                try:
                    vols = self.ec2.describe_volumes(VolumeIds=[vid])["Volumes"]
                except botocore.exceptions.ClientError:
                    break
                if vols and vols[0].get("Size"):
                    return int(vols[0]["Size"])
                break
        return 20

    # -- one pass --

    def tick(self):
        listed_at = time.time()  # an instance missing from this listing launched after it
        try:
            insts = self.instances()
        except Exception as e:  # moto answers 500 to calls that race with its reset
            log(f"cannot list instances in moto ({type(e).__name__}: {str(e).splitlines()[0][:100]}); "
                "next poll retries")
            return
        prev_poll, self.prev_poll = self.prev_poll, listed_at
        now = time.time()
        for iid, inst in insts.items():
            state = inst["State"]["Name"]
            st = self.state.get(iid)
            if state in ("pending", "running"):
                if st is None:
                    # The boot starts at launch, not when this poll happens to see it. moto's
                    # LaunchTime has whole seconds; the instance was not in the previous
                    # listing and is in this one: the launch is the middle of what is left.
                    launched = inst.get("LaunchTime")
                    lower, upper = (launched.timestamp(), launched.timestamp() + 1) if launched \
                        else (listed_at, listed_at)
                    if prev_poll is not None:
                        lower = max(lower, prev_poll)
                    upper = min(upper, now)
                    seen = (lower + upper) / 2 if lower <= upper else upper
                    st = self.state[iid] = {"seen": seen, "status": "waiting", "node": None}
                    log(f"instance {iid} ({inst.get('InstanceType')}, "
                        f"{inst.get('Placement', {}).get('AvailabilityZone')}) {state}; joining "
                        f"{self.args.delay_ms} ms after its launch")
                if st["status"] == "waiting" and state == "running" and \
                        now + 0.005 >= st["seen"] + self.args.delay_ms / 1000.0:
                    self.join(iid, inst, st)
                if st["status"] == "joined":
                    self.report_condition(inst, st)
            elif state in ("shutting-down", "terminated"):
                if st and st["status"] == "joined" and not self.remove(iid, st, f"instance {state}"):
                    continue  # retried next poll
                self.state[iid] = {"seen": now, "status": "gone", "node": None}
        for iid in list(self.state):
            if iid not in insts:
                st = self.state.pop(iid)
                if st["status"] == "joined" and not self.remove(iid, st, "instance terminated or gone"):
                    self.state[iid] = st  # retried next poll

    def report_condition(self, inst, st):
        """The condition the instance's UNHEALTHY_TAG asks for, on its node's status, once."""
        wanted = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}.get(UNHEALTHY_TAG)
        if not wanted or st.get("condition") == wanted:
            return
        kind, _, status = wanted.partition("=")
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
        patch = {"status": {"conditions": [{
            "type": kind, "status": status or "False", "reason": "SimulatedFault",
            "message": f"set by the node-join simulator ({UNHEALTHY_TAG})",
            "lastTransitionTime": since, "lastHeartbeatTime": since}]}}
        try:
            r = self.api("PATCH", f"/api/v1/nodes/{st['node']}/status", data=json.dumps(patch),
                         headers={"Content-Type": "application/strategic-merge-patch+json"})
        except requests.RequestException as e:
            log(f"setting {wanted} on node {st['node']} failed: {e}; will retry")
            return
        if r.status_code == 200:
            st["condition"] = wanted
            log(f"node {st['node']} reports {wanted} since {since} ({UNHEALTHY_TAG})")
        else:
            log(f"setting {wanted} on node {st['node']} failed: {r.status_code} {r.text[:200]}; will retry")

    def remove(self, iid, st, why):
        try:
            r = self.api("DELETE", f"/api/v1/nodes/{st['node']}")
        except requests.RequestException as e:
            log(f"deleting node {st['node']} of {iid} failed: {e}; will retry")
            return False
        if r.status_code in (200, 202, 404):
            log(f"deleted node {st['node']} ({why}: {iid})")
            return True
        log(f"deleting node {st['node']} of {iid} failed: {r.status_code} {r.text[:200]}; will retry")
        return False

    def join(self, iid, inst, st):
        try:
            node = self.node_for(iid, inst)
        except Rejected as e:
            st["status"] = "rejected"
            log(f"NOT joining {iid}: {e}")
            return
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            log(f"cannot read {iid} from moto ({e}); will retry")
            return
        r = self.api("POST", "/api/v1/nodes", json=node)
        name = node["metadata"]["name"]
        if r.status_code in (200, 201):
            st.update(status="joined", node=name, joined=time.time())
            log(f"joined {iid} as node {name} after {(time.time() - st['seen']) * 1000:.0f} ms: "
                f"labels={node['metadata']['labels']} taints={node['spec'].get('taints', [])}")
        elif r.status_code == 409:
            st.update(status="joined", node=name)
            log(f"node {name} for {iid} already exists; adopted")
        else:
            log(f"registering node {name} for {iid} failed: {r.status_code} {r.text[:300]}; will retry")

    def node_for(self, iid, inst):
        ud = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        raw_b64 = (ud.get("UserData") or {}).get("Value")
        if not raw_b64:
            raise Rejected("instance has no user data")
        try:
            raw = base64.b64decode(raw_b64)
        except (binascii.Error, ValueError):
            raise Rejected("user data is not base64")
        spec = parse_user_data(raw)
        cluster = spec["cluster"]
        # nodeadm's validation, then what would make the kubelet fail to reach the cluster.
        for field in ("name", "apiServerEndpoint", "certificateAuthority", "cidr"):
            if not cluster.get(field):
                raise Rejected(f"NodeConfig spec.cluster.{field} is missing (nodeadm refuses it)")
        if not self.joins_cluster(cluster["name"], inst):
            raise Rejected(f"NodeConfig names cluster {cluster['name']!r}, which is neither "
                           f"{self.args.cluster!r} nor an EKS cluster in moto the instance is tagged for")
        if cluster["apiServerEndpoint"].rstrip("/") != self.args.apiserver_url.rstrip("/"):
            raise Rejected(f"NodeConfig apiServerEndpoint {cluster['apiServerEndpoint']!r} is not the "
                           f"cluster's {self.args.apiserver_url!r}")
        try:
            ca = base64.b64decode(cluster["certificateAuthority"])
        except (binascii.Error, ValueError):
            raise Rejected("NodeConfig certificateAuthority is not base64")
        if ca.strip() != self.ca_pem.strip():
            raise Rejected("NodeConfig certificateAuthority is not the cluster's CA")
        config = spec["kubelet"]["config"]
        labels_flag, taints, max_pods_flag = parse_flags(spec["kubelet"]["flags"])
        check_labels(labels_flag)
        for t in config.get("registerWithTaints") or []:
            if not isinstance(t, dict) or not t.get("key") or t.get("effect") not in TAINT_EFFECTS:
                raise Rejected(f"registerWithTaints item {t!r} is invalid")
            taints.append({k: t[k] for k in ("key", "value", "effect") if t.get(k)})

        itype_name = inst["InstanceType"]
        itype = self.instance_type(itype_name)
        if itype is None:
            raise Rejected(f"unknown instance type {itype_name}")
        zone = inst["Placement"]["AvailabilityZone"]
        name = inst.get("PrivateDnsName") or f"ip-{inst.get('PrivateIpAddress', '0.0.0.0').replace('.', '-')}.ec2.internal"
        machine = inst.get("Architecture") or itype["ProcessorInfo"]["SupportedArchitectures"][0]
        arch = {"x86_64": "amd64", "arm64": "arm64"}.get(machine, "amd64")
        vcpus = itype["VCpuInfo"]["DefaultVCpus"]
        nominal_mib = itype["MemoryInfo"]["SizeInMiB"]
        net = itype.get("NetworkInfo", {})
        eni_pods = net.get("MaximumNetworkInterfaces", 3) * (net.get("Ipv4AddressesPerInterface", 10) - 1) + 2
        max_pods = config.get("maxPods") or max_pods_flag or min(eni_pods, 110 if vcpus < 30 else 250)
        max_pods = int(max_pods)

        # Capacity: what the kubelet reads from the machine. The kernel keeps part of the
        # nominal memory (MemTotal < nominal): modelled as a fixed share.
        mem_capacity = int(nominal_mib * (1 - self.args.memory_overhead_percent / 100.0)) * 1024 ** 2
        ephemeral_gib = self.root_volume_gib(inst)
        capacity = {"cpu": str(vcpus), "memory": f"{mem_capacity // 1024}Ki",
                    "pods": str(max_pods), "ephemeral-storage": f"{ephemeral_gib}Gi",
                    "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
        gpus = sum(g.get("Count", 0) for g in (itype.get("GpuInfo") or {}).get("Gpus", []))
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        # Allocatable = capacity - kubeReserved - systemReserved - evictionHard, with the EKS
        # AMI defaults for whatever the NodeConfig does not set.
        kube_reserved = config.get("kubeReserved") or {}
        system_reserved = config.get("systemReserved") or {}
        eviction = config.get("evictionHard") or {}
        cpu_m = vcpus * 1000
        cpu_m -= quantity(kube_reserved["cpu"]) * 1000 if "cpu" in kube_reserved else eks_kube_reserved_cpu_m(vcpus)
        cpu_m -= quantity(system_reserved.get("cpu", "0")) * 1000
        mem = mem_capacity
        mem -= quantity(kube_reserved["memory"]) if "memory" in kube_reserved else (11 * max_pods + 255) * 1024 ** 2
        mem -= quantity(system_reserved.get("memory", "0"))
        evict_mem = eviction.get("memory.available", "100Mi")
        mem -= mem_capacity * float(evict_mem[:-1]) / 100 if evict_mem.endswith("%") else quantity(evict_mem)
        eph = ephemeral_gib * 1024 ** 3
        eph -= quantity(kube_reserved.get("ephemeral-storage", "1Gi"))
        eph -= eph * 0.10 if "nodefs.available" not in eviction else (
            eph * float(eviction["nodefs.available"][:-1]) / 100 if eviction["nodefs.available"].endswith("%")
            else quantity(eviction["nodefs.available"]))
        allocatable = dict(capacity)
        allocatable["cpu"] = f"{int(max(cpu_m, 0))}m"
        allocatable["memory"] = f"{int(max(mem, 0)) // 1024}Ki"
        allocatable["ephemeral-storage"] = f"{int(max(eph, 0)) // 1024}Ki"

        region = self.args.region
        lifecycle = inst.get("InstanceLifecycle") or "on-demand"
        labels = {
            "kubernetes.io/arch": arch, "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": itype_name,
            "topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone,
            "beta.kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/instance-type": itype_name,
            "failure-domain.beta.kubernetes.io/region": region,
            "failure-domain.beta.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": "spot" if lifecycle == "spot" else "on-demand",
        }
        zid = self.zone_id(zone)
        if zid:
            labels["topology.k8s.aws/zone-id"] = zid
        labels.update(labels_flag)
        addresses = []
        if inst.get("PrivateIpAddress"):
            addresses.append({"type": "InternalIP", "address": inst["PrivateIpAddress"]})
        addresses += [{"type": "InternalDNS", "address": name}, {"type": "Hostname", "address": name}]
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name, "labels": labels,
                "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    INSTANCE_ANNOTATION: iid,
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {"providerID": f"aws:///{zone}/{iid}"},
            "status": {
                "capacity": capacity, "allocatable": allocatable, "addresses": addresses,
                "nodeInfo": {
                    "architecture": arch, "operatingSystem": "linux",
                    "osImage": "Amazon Linux 2023.9.20261101", "kernelVersion": f"6.12.46-66.121.amzn2023.{machine}",
                    "containerRuntimeVersion": "containerd://2.1.4", "kubeletVersion": self.args.kubelet_version,
                    "kubeProxyVersion": "", "machineID": iid.replace("-", ""), "systemUUID": iid,
                    "bootID": iid,
                },
            },
        }
        if taints:
            node["spec"]["taints"] = taints
        return node

    def run(self):
        while True:
            try:
                self.recover()
                break
            except requests.RequestException as e:
                log(f"API server not reachable yet ({e}); retrying")
                time.sleep(1)
        while True:
            started = time.time()
            try:
                self.tick()
                if not self.ready_written and self.args.ready_file:
                    with open(self.args.ready_file, "w") as f:
                        f.write(f"{os.getpid()}\n")
                    self.ready_written = True
                    log("ready")
            except requests.RequestException as e:
                log(f"API server error: {e}")
            except Exception as e:  # keep simulating; the log shows what broke
                import traceback
                traceback.print_exc()
                log(f"tick failed: {e}")
            # Next poll, or earlier when an instance's registration delay runs out.
            wake = [started + self.args.poll_ms / 1000.0] + [
                st["seen"] + self.args.delay_ms / 1000.0
                for st in self.state.values() if st["status"] == "waiting"]
            time.sleep(max(0.02, min(wake) - time.time()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moto-url", required=True)
    ap.add_argument("--apiserver-url", required=True)
    ap.add_argument("--ca-file", required=True)
    ap.add_argument("--client-cert", required=True)
    ap.add_argument("--client-key", required=True)
    ap.add_argument("--cluster", default="jointer-test")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--kubelet-version", default="v1.34.4")
    ap.add_argument("--ready-file", default=None)
    ap.add_argument("--poll-ms", type=int, default=int(os.environ.get("JOINTER_NODE_JOIN_POLL_MS", "1000")))
    ap.add_argument("--delay-ms", type=int, default=int(os.environ.get("JOINTER_NODE_JOIN_DELAY_MS", "2000")))
    ap.add_argument("--memory-overhead-percent", type=float,
                    default=float(os.environ.get("JOINTER_NODE_MEMORY_OVERHEAD_PERCENT", "5")))
    args = ap.parse_args()
    for url in (args.moto_url, args.apiserver_url):
        if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit(f"nodejoin.py: {url} is not a loopback address")
    log(f"node-join simulator: cluster {args.cluster}, poll {args.poll_ms} ms, "
        f"registration delay {args.delay_ms} ms")
    Simulator(args).run()


if __name__ == "__main__":
    main()
