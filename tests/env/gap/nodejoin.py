"""The node-join simulator: plays the booting EC2 instance (nodeadm + kubelet) of the
test environment's simulated nodes, and the cloud controller's node deletion.

Every poll interval it lists the instances in moto that belong to the cluster (tag key
kubernetes.io/cluster/<cluster>, or karpenter.sh/nodepool, present). For each instance
that is running it waits the registration delay, reads and parses its user data in the
shape of its AMI family (AL2023: MIME multipart with an application/node.eks.aws NodeConfig
part, or a bare NodeConfig; AL2: a shell script, or a MIME text/x-shellscript part, calling
/etc/eks/bootstrap.sh; Bottlerocket: TOML settings; Windows: <powershell> calling
Start-EKSBootstrap.ps1), checks it the way that AMI's boot would, and registers a Node
through the local API server as a kubelet would: name = private DNS name, providerID
aws:///<zone>/<id>, the kubelet's and cloud provider's labels, the user data's node labels
and taints, capacity and allocatable from the instance type and the family's defaults. The Node carries the annotation
kwok.x-k8s.io/node=fake, so kwok makes it Ready and runs its pods. Instances whose delay ran
out in the same poll join side by side (JOINS_AT_ONCE), as a launched batch boots. When the instance is
terminated (or gone from moto) the Node is deleted. An instance whose user data cannot be
parsed or would not join is logged once and never joined.

It also plays the kubelet's image pull for the test world's ECR images: a pod with a
container image on 123456789012.dkr.ecr.<region>.amazonaws.com/<repo>[:tag|@digest] is looked
up in the local registry (GET /v2/<repo>/manifests/<ref> with the registry's credentials) and
annotated jointer.dev/image-pull=pulled, or =failed with the pull errors; kwok's stages
(kwok/stages.yaml) start the pod only when pulled, and report ErrImagePull/ImagePullBackOff
when failed. Failed pods are looked up again every few seconds, as a kubelet retries.

Talks to moto directly (not through the gap layer: these calls are not the product's, so
they are neither logged nor subject to injected faults), to the API server with the
admin client certificate and to the registry on 127.0.0.1. Started by up.sh; logs to stdout
(.run/logs/nodejoin.log).
"""

import argparse
import base64
import binascii
import concurrent.futures
import datetime
import email
import email.policy
import json
import os
import re
import shlex
import sys
import threading
import time
import tomllib
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
# The build (kernel version) of each EKS Windows AMI, which its node labels
# node.kubernetes.io/windows-build with (less the revision).
WINDOWS_BUILDS = {"2019": "10.0.17763", "2022": "10.0.20348", "2025": "10.0.26100"}
# Instances joined side by side (each join waits on moto and the API server, not the CPU).
JOINS_AT_ONCE = 8
# Images whose root device is /dev/xvda (the EKS AMIs and the Amazon Linux ones).
EKS_LINUX_IMAGE = re.compile(r"^(amazon-eks-|al2023-ami-|amzn2-ami-)")


# The kubelet's image pull for the test world's ECR (see ImagePuller).
ECR_ACCOUNT = "123456789012"  # moto's account: the only registry of the test world
ECR_IMAGE = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
                       r"(?P<rest>.+)$")
PULL_ANNOTATION = "jointer.dev/image-pull"
PULL_ERRORS_ANNOTATION = "jointer.dev/image-pull-errors"
# What containerd asks a registry for when it resolves a reference.
MANIFEST_ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json", "*/*",
])


def log(msg):
    print(f"{datetime.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {msg}", flush=True)


class Rejected(Exception):
    """The instance would not join (bad user data, nodeadm or kubelet would fail)."""

    def __init__(self, message, family=None):
        super().__init__(message)
        self.family = family  # the AMI family whose user data this was, once known


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
#
# Each family's user data comes down to one "boot" record: the family, the cluster it names
# (name, endpoint, base64 CA, and what each is called in that family's user data, for the
# messages), and what reaches the kubelet: labels, taints, max pods, pods per core, reserved
# resources and hard eviction thresholds.


def parse_user_data(raw, image_name=None):
    """The boot record of the instance's user data (bytes). The user data decides the family:
    a real instance runs whatever its user data is, and only the right shape boots."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("user data is not UTF-8 text")
    if re.search(r"(?im)^\s*<powershell>", text):
        return of_family("windows", windows_boot, text)
    if re.search(r"(?im)^content-type:\s*multipart/", text):
        msg = email.message_from_string(text, policy=email.policy.compat32)
        if not msg.is_multipart():
            raise Rejected("MIME user data without parts (check the boundary)")
        docs, scripts = [], []
        for part in msg.walk():
            payload = (part.get_payload(decode=True) or b"").decode("utf-8", "replace") \
                if not part.is_multipart() else ""
            if part.get_content_type() == "application/node.eks.aws":
                docs.append(payload)
            elif part.get_content_type() == "text/x-shellscript":
                scripts.append(payload)
        if docs:
            return of_family("al2023", al2023_boot, docs)
        # AL2: the controller's bootstrap.sh part comes after the user's own parts.
        for script in reversed(scripts):
            if of_family("al2", bootstrap_sh_call, script) is not None:
                return of_family("al2", al2_boot, script)
        raise Rejected("MIME user data has no application/node.eks.aws part (AL2023) and no "
                       "text/x-shellscript part calling /etc/eks/bootstrap.sh (AL2)")
    if re.search(r"(?m)^kind:\s*NodeConfig\s*$", text):
        return of_family("al2023", al2023_boot, [text])
    if text.startswith("#!"):
        return of_family("al2", al2_boot, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # Not every unknown shape was meant for Bottlerocket: say so when nothing suggests it.
        if (image_name or "").startswith("bottlerocket-") or re.search(r"(?m)^\s*\[\s*settings", text):
            raise Rejected(f"Bottlerocket user data is not valid TOML: {e}", "bottlerocket")
        raise Rejected("user data is none of AL2023 (MIME multipart or a NodeConfig), AL2 (a shell "
                       "script calling /etc/eks/bootstrap.sh), Bottlerocket (TOML settings) or "
                       "Windows (<powershell>)")
    return of_family("bottlerocket", bottlerocket_boot, doc)


def of_family(family, parse, *args):
    """parse(*args), its refusals marked as the family's."""
    try:
        return parse(*args)
    except Rejected as e:
        e.family = e.family or family
        raise


def al2023_boot(docs):
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
    cluster = spec["cluster"]
    # nodeadm's validation.
    for field in ("name", "apiServerEndpoint", "certificateAuthority", "cidr"):
        if not cluster.get(field):
            raise Rejected(f"NodeConfig spec.cluster.{field} is missing (nodeadm refuses it)")
    config = spec["kubelet"]["config"]
    boot = flag_settings(spec["kubelet"]["flags"])
    for t in config.get("registerWithTaints") or []:
        if not isinstance(t, dict) or not t.get("key") or t.get("effect") not in TAINT_EFFECTS:
            raise Rejected(f"registerWithTaints item {t!r} is invalid")
        boot["taints"].append({k: t[k] for k in ("key", "value", "effect") if t.get(k)})
    # A kubelet flag replaces its config field.
    boot["max_pods"] = config.get("maxPods") or boot["max_pods"]
    boot["pods_per_core"] = boot["pods_per_core"] or config.get("podsPerCore")
    for key, field in (("kube_reserved", "kubeReserved"), ("system_reserved", "systemReserved"),
                       ("eviction_hard", "evictionHard")):
        boot[key] = boot[key] or dict(config.get(field) or {})
    boot.update(family="al2023", cluster=cluster["name"], endpoint=cluster["apiServerEndpoint"],
                ca=cluster["certificateAuthority"],
                fields=("NodeConfig spec.cluster.name", "NodeConfig apiServerEndpoint",
                        "NodeConfig certificateAuthority"))
    return boot


def bootstrap_sh_call(script):
    """The arguments of the script's /etc/eks/bootstrap.sh call (the last one), or None."""
    call = None
    for line in re.sub(r"\\\r?\n", " ", script).splitlines():
        if "/etc/eks/bootstrap.sh" not in line or line.lstrip().startswith("#"):
            continue
        try:
            tokens = shlex.split(line)
        except ValueError as e:
            raise Rejected(f"the /etc/eks/bootstrap.sh line is not valid shell: {e}")
        for i, tok in enumerate(tokens):
            # As the command run, not as a word of another (echo, grep ...).
            if tok.endswith("/etc/eks/bootstrap.sh") and (
                    i == 0 or tokens[i - 1] in ("sudo", "bash", "sh", "exec", "&&", "||", ";", "then", "do")):
                call = tokens[i + 1:]
                break
    return call


def al2_boot(script):
    args = bootstrap_sh_call(script)
    if args is None:
        raise Rejected("the shell script does not call /etc/eks/bootstrap.sh (an AL2 node would not join)")
    opts, positional = {}, []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            # Every bootstrap.sh option takes a value.
            name, eq, value = arg.partition("=")
            if not eq:
                if i + 1 >= len(args):
                    raise Rejected(f"bootstrap.sh option {name} has no value")
                value, i = args[i + 1], i + 1
            opts[name] = value
        else:
            positional.append(arg)
        i += 1
    if not positional:
        raise Rejected("the bootstrap.sh call names no cluster (its first argument)")
    for required in ("--apiserver-endpoint", "--b64-cluster-ca"):
        if not opts.get(required):
            raise Rejected(f"the bootstrap.sh call has no {required}")
    try:
        extra = shlex.split(opts.get("--kubelet-extra-args", ""))
    except ValueError as e:
        raise Rejected(f"bootstrap.sh --kubelet-extra-args is not valid shell words: {e}")
    boot = flag_settings(extra)
    boot.update(family="al2", cluster=positional[0], endpoint=opts["--apiserver-endpoint"],
                ca=opts["--b64-cluster-ca"],
                # Without its ENI-based maxPods, the kubelet's own default (110) applies.
                use_max_pods=opts.get("--use-max-pods", "true").lower() != "false",
                fields=("bootstrap.sh's cluster name", "bootstrap.sh --apiserver-endpoint",
                        "bootstrap.sh --b64-cluster-ca"))
    return boot


def windows_boot(text):
    m = re.search(r"(?is)<powershell>(.*?)</powershell>", text)
    if not m:
        raise Rejected("Windows user data has no <powershell>...</powershell> block")
    call = re.search(r"(?im)^\s*&\s*(?:\$EKSBootstrapScriptFile|[\"']?[^\"'\r\n]*Start-EKSBootstrap\.ps1[\"']?)"
                     r"[ \t]+(.*)$", m.group(1))
    if not call:
        raise Rejected("the PowerShell script does not call Start-EKSBootstrap.ps1 (& $EKSBootstrapScriptFile ...)")
    rest, pos, params = call.group(1).rstrip(), 0, {}
    param = re.compile(r"\s*-(\w+)(?:[ \t]+('(?:[^']|'')*'|\"[^\"]*\"|(?!-)\S+))?")
    while rest[pos:].strip():
        p = param.match(rest, pos)
        if not p:
            raise Rejected(f"cannot read the Start-EKSBootstrap.ps1 arguments at {rest[pos:pos + 40]!r}")
        value = p.group(2)
        if value and value[0] == "'":
            value = value[1:-1].replace("''", "'")  # PowerShell doubles a quote to escape it
        elif value and value[0] == '"':
            value = value[1:-1]
        params[p.group(1).lower()] = value  # PowerShell parameter names are case-insensitive
        pos = p.end()
    for required in ("EKSClusterName", "APIServerEndpoint", "Base64ClusterCA"):
        if not params.get(required.lower()):
            raise Rejected(f"Start-EKSBootstrap.ps1 is called without -{required}")
    try:
        extra = shlex.split(params.get("kubeletextraargs") or "")
    except ValueError as e:
        raise Rejected(f"-KubeletExtraArgs is not valid kubelet arguments: {e}")
    boot = flag_settings(extra)
    boot.update(family="windows", cluster=params["eksclustername"], endpoint=params["apiserverendpoint"],
                ca=params["base64clusterca"],
                fields=("-EKSClusterName", "-APIServerEndpoint", "-Base64ClusterCA"))
    return boot


def bottlerocket_boot(doc):
    settings = doc.get("settings")
    k8s = settings.get("kubernetes") if isinstance(settings, dict) else None
    if not isinstance(k8s, dict):
        raise Rejected("Bottlerocket user data has no [settings.kubernetes]")
    for required in ("cluster-name", "api-server", "cluster-certificate"):
        if not isinstance(k8s.get(required), str) or not k8s[required]:
            raise Rejected(f"Bottlerocket settings.kubernetes.{required} is missing")

    def table(key):
        value = k8s.get(key) or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise Rejected(f"Bottlerocket settings.kubernetes.{key} must be a table of strings")
        return dict(value)

    def count(key):
        value = k8s.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise Rejected(f"Bottlerocket settings.kubernetes.{key} must be a whole number")
        return value

    taints = []
    node_taints = k8s.get("node-taints") or {}
    if not isinstance(node_taints, dict):
        raise Rejected("Bottlerocket settings.kubernetes.node-taints must be a table")
    for key, values in node_taints.items():
        for item in values if isinstance(values, list) else [values]:
            value, colon, effect = item.rpartition(":") if isinstance(item, str) else ("", "", "")
            if not colon or effect not in TAINT_EFFECTS:
                raise Rejected(f"Bottlerocket settings.kubernetes.node-taints.{key} item {item!r} "
                               "is not value:Effect")
            taints.append({"key": key, "value": value, "effect": effect} if value else
                          {"key": key, "effect": effect})
    return {"family": "bottlerocket", "cluster": k8s["cluster-name"], "endpoint": k8s["api-server"],
            "ca": k8s["cluster-certificate"], "labels": table("node-labels"), "taints": taints,
            "max_pods": count("max-pods"), "pods_per_core": count("pods-per-core"),
            "kube_reserved": table("kube-reserved"), "system_reserved": table("system-reserved"),
            "eviction_hard": table("eviction-hard"),
            "fields": ("settings.kubernetes.cluster-name", "settings.kubernetes.api-server",
                       "settings.kubernetes.cluster-certificate")}


def key_values(value, sep, flag):
    """`a=1,b=2` (or `a<1,b<2` for eviction thresholds) as a dict."""
    out = {}
    for item in filter(None, value.split(",")):
        k, found, v = item.partition(sep)
        if not found:
            raise Rejected(f"{flag} item {item!r} is not key{sep}value")
        out[k.strip()] = v.strip()
    return out


def flag_settings(flags):
    """The kubelet flags the families pass (NodeConfig flags, --kubelet-extra-args,
    -KubeletExtraArgs); others are ignored."""
    boot = {"labels": {}, "taints": [], "max_pods": None, "pods_per_core": None,
            "kube_reserved": {}, "system_reserved": {}, "eviction_hard": {}}
    i = 0
    while i < len(flags):
        flag = flags[i]
        name, _, value = flag.partition("=")
        if not _ and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value, i = flags[i + 1], i + 1
        # nodeadm hands the flags to kubelet through a systemd environment line, whose word
        # splitting removes quotes: upstream Karpenter writes --node-labels="a=b,c=d".
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if name == "--node-labels":
            boot["labels"].update(key_values(value, "=", name))
        elif name == "--register-with-taints":
            for item in filter(None, value.split(",")):
                kv, colon, effect = item.rpartition(":")
                if not colon or effect not in TAINT_EFFECTS:
                    raise Rejected(f"--register-with-taints item {item!r} is not key[=value]:Effect")
                k, _, v = kv.partition("=")
                boot["taints"].append({"key": k, "value": v, "effect": effect} if v else
                                      {"key": k, "effect": effect})
        elif name in ("--max-pods", "--pods-per-core"):
            try:
                boot[name[2:].replace("-", "_")] = int(value)
            except ValueError:
                raise Rejected(f"{name} {value!r} is not a number")
        elif name == "--kube-reserved":
            boot["kube_reserved"] = key_values(value, "=", name)
        elif name == "--system-reserved":
            boot["system_reserved"] = key_values(value, "=", name)
        elif name == "--eviction-hard":
            boot["eviction_hard"] = key_values(value, "<", name)
        i += 1
    return boot


def windows_year(image_name):
    """The Windows Server version of an image, by its name (Windows_Server-2019-...)."""
    m = re.search(r"Windows_Server-(2019|2022|2025)-", image_name or "")
    return m.group(1) if m else "2022"


def check_labels(labels):
    for key in labels:
        prefix = key.split("/", 1)[0] if "/" in key else ""
        restricted = prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or \
            prefix == "k8s.io" or prefix.endswith(".k8s.io")
        if restricted and key not in KUBELET_ALLOWED_LABELS and \
                not any(prefix == ns or prefix.endswith("." + ns) for ns in KUBELET_ALLOWED_NAMESPACES):
            raise Rejected(f"kubelet refuses --node-labels key {key!r} (kubernetes.io/k8s.io namespace)")


# ---- the simulator -----------------------------------------------------------------------


def ecr_reference(image, account=ECR_ACCOUNT):
    """(repository, reference) in the local registry of an image of the test world's ECR, or
    None for any other image. A digest wins over a tag; neither means `latest`."""
    m = ECR_IMAGE.match(image or "")
    if not m or m.group("account") != account:
        return None
    rest, digest = m.group("rest"), None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
    tag = None
    if ":" in rest.rsplit("/", 1)[-1]:
        rest, tag = rest.rsplit(":", 1)
    return rest, digest or tag or "latest"


class ImagePuller:
    """The kubelet's image pull, for pods with images of the test world's ECR: watches every
    pod, looks such images up in the registry, and annotates the pod (see the module doc).
    Runs in its own thread with its own API server session."""

    def __init__(self, args, kube):
        self.args = args
        self.kube = kube
        self.registry = requests.Session()
        self.registry.trust_env = False
        self.registry.headers["User-Agent"] = "jointer-kubelet/1 (node-join simulator)"
        self.failed = {}  # pod uid -> (namespace, name, images, errors) of pods whose pull failed
        self.pulled = set()  # uids of pods annotated pulled (their watch events may lag the patch)
        self.last_recheck = 0.0

    def password(self):
        # Read at every look-up: up.sh writes it before it starts us, and it never changes
        # while the environment is up, but reading it is cheap.
        with open(self.args.registry_password_file, encoding="utf-8") as f:
            return f.read().strip()

    def api(self, method, path, **kw):
        return self.kube.request(method, self.args.apiserver_url + path, timeout=15, **kw)

    @staticmethod
    def ecr_images(pod):
        spec = pod.get("spec") or {}
        images = []
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            img = c.get("image")
            if img and ecr_reference(img) and img not in images:
                images.append(img)
        return images

    def pull_error(self, image):
        """None when the registry has the image's manifest, else the kubelet's error for it."""
        repo, ref = ecr_reference(image)
        url = f"{self.args.registry_url}/v2/{repo}/manifests/{ref}"
        try:
            r = self.registry.get(url, auth=("AWS", self.password()), timeout=10,
                                  headers={"Accept": MANIFEST_ACCEPT})
        except (requests.RequestException, OSError) as e:
            return (f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": '
                    f'failed to resolve reference "{image}": {type(e).__name__}: {e}')
        if r.status_code == 200:
            return None
        detail = ""
        try:
            errs = r.json().get("errors") or []
            detail = "; ".join(e.get("message", "") for e in errs if e.get("message"))
        except ValueError:
            pass
        if r.status_code == 404:
            return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
                    f'failed to resolve reference "{image}": {image}: not found: '
                    f'{detail or "manifest unknown"}')
        return (f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": '
                f'failed to resolve reference "{image}": unexpected status from GET request to '
                f'{url}: {r.status_code} {r.reason}' + (f": {detail}" if detail else ""))

    def annotate(self, ns, name, errors):
        value = "failed" if errors else "pulled"
        patch = {"metadata": {"annotations": {
            PULL_ANNOTATION: value,
            PULL_ERRORS_ANNOTATION: json.dumps(errors, sort_keys=True) if errors else None}}}
        r = self.api("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", data=json.dumps(patch),
                     headers={"Content-Type": "application/merge-patch+json"})
        if r.status_code == 404:
            return False
        if r.status_code != 200:
            raise requests.RequestException(f"annotating pod {ns}/{name}: {r.status_code} {r.text[:200]}")
        return True

    def check(self, pod_key, ns, name, images, previous=None):
        errors = {img: err for img in images if (err := self.pull_error(img))}
        if errors == previous:
            return
        if not self.annotate(ns, name, errors):
            self.failed.pop(pod_key, None)
            return
        if errors:
            self.failed[pod_key] = (ns, name, images, errors)
            if previous is None:
                log(f"pod {ns}/{name}: cannot pull {', '.join(sorted(errors))} (ErrImagePull)")
        else:
            self.failed.pop(pod_key, None)
            self.pulled.add(pod_key)
            log(f"pod {ns}/{name}: pulled {', '.join(images)}")

    def saw(self, kind, pod):
        meta = pod.get("metadata") or {}
        key, ns, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            self.failed.pop(key, None)
            self.pulled.discard(key)
            return
        images = self.ecr_images(pod)
        if not images:
            return
        state = (meta.get("annotations") or {}).get(PULL_ANNOTATION)
        if state == "pulled":
            self.failed.pop(key, None)
        elif key in self.pulled or key in self.failed:
            return  # annotated already; this event is from before the annotation
        elif state == "failed":
            if key not in self.failed:  # e.g. after a restart of the simulator
                try:
                    errors = json.loads(meta["annotations"].get(PULL_ERRORS_ANNOTATION) or "{}")
                except ValueError:
                    errors = {}
                self.failed[key] = (ns, name, images, errors)
        else:
            self.check(key, ns, name, images)

    def recheck(self):
        """The kubelet's retries: a failed pod whose images are now there is pulled."""
        self.last_recheck = time.time()
        for key, (ns, name, images, errors) in list(self.failed.items()):
            self.check(key, ns, name, images, previous=errors)

    def run(self):
        while True:
            try:
                r = self.api("GET", "/api/v1/pods")
                r.raise_for_status()
                listing = r.json()
                for pod in listing.get("items", []):
                    self.saw("ADDED", pod)
                self.watch(listing["metadata"]["resourceVersion"])
            except Exception as e:  # relist after any failure; the log says what broke
                log(f"image puller: {type(e).__name__}: {str(e)[:200]}; relisting pods")
                time.sleep(1)

    def watch(self, rv):
        """Follows pod events from rv; returns (to relist) when the watch has expired."""
        while True:
            # A short server-side timeout, so failed pods are re-checked between watches.
            timeout = max(1, int(self.args.pull_retry_s))
            with self.kube.get(f"{self.args.apiserver_url}/api/v1/pods",
                               params={"watch": "1", "resourceVersion": rv,
                                       "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout)},
                               stream=True, timeout=(5, timeout + 30)) as r:
                if r.status_code == 410:
                    return
                r.raise_for_status()
                buf = b""
                for chunk in r.iter_content(chunk_size=None):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                return
                            raise requests.RequestException(f"watch error: {obj}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if ev.get("type") != "BOOKMARK":
                            self.saw(ev["type"], obj)
                    if time.time() - self.last_recheck >= self.args.pull_retry_s:
                        self.recheck()
            if time.time() - self.last_recheck >= self.args.pull_retry_s:
                self.recheck()


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
        self.images = {}  # image id -> name
        self.ready_written = False
        self.prev_poll = None
        self.joiners = concurrent.futures.ThreadPoolExecutor(max_workers=JOINS_AT_ONCE,
                                                             thread_name_prefix="join")

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

    def image_name(self, image_id):
        """The name of the instance's image (None when moto no longer has it)."""
        if image_id not in self.images:
            try:
                imgs = self.ec2.describe_images(ImageIds=[image_id])["Images"]
            except botocore.exceptions.ClientError:
                imgs = []
            if not imgs:
                return None  # not cached: a reset may bring it back under the same id
            self.images[image_id] = imgs[0].get("Name")
        return self.images[image_id]

    def volume_gib(self, inst, device, default):
        """The size of the volume mapped at `device` (any volume when None): where the kubelet
        keeps its data, so its ephemeral storage; `default` when nothing is mapped there."""
        for bdm in inst.get("BlockDeviceMappings") or []:
            vid = (bdm.get("Ebs") or {}).get("VolumeId")
            if vid and (device is None or bdm.get("DeviceName") == device):
                try:
                    vols = self.ec2.describe_volumes(VolumeIds=[vid])["Volumes"]
                except botocore.exceptions.ClientError:
                    break
                if vols and vols[0].get("Size"):
                    return int(vols[0]["Size"])
                break
        return default

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
        due = []  # instances whose registration delay ran out: joined side by side below
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
                    due.append((iid, inst, st))
                elif st["status"] == "joined":
                    self.report_condition(inst, st)
            elif state in ("shutting-down", "terminated"):
                if st and st["status"] == "joined" and not self.remove(iid, st, f"instance {state}"):
                    continue  # retried next poll
                self.state[iid] = {"seen": now, "status": "gone", "node": None}
        # Hundreds of instances launched in one provisioning pass boot at once, as on EC2: one
        # join after another (three moto calls and a POST each) would add seconds per node.
        list(self.joiners.map(lambda d: self.join(*d), due))
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
            node, family = self.node_for(iid, inst)
        except Rejected as e:
            st["status"] = "rejected"
            log(f"NOT joining {iid}" + (f" ({e.family})" if e.family else "") + f": {e}")
            return
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            log(f"cannot read {iid} from moto ({e}); will retry")
            return
        r = self.api("POST", "/api/v1/nodes", json=node)
        name = node["metadata"]["name"]
        if r.status_code in (200, 201):
            st.update(status="joined", node=name, joined=time.time())
            log(f"joined {iid} ({family}) as node {name} after {(time.time() - st['seen']) * 1000:.0f} ms: "
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
        image = self.image_name(inst.get("ImageId")) or ""
        boot = parse_user_data(raw, image)
        try:
            return self.node_of_boot(iid, inst, boot, image), boot["family"]
        except Rejected as e:
            e.family = e.family or boot["family"]
            raise

    def node_of_boot(self, iid, inst, boot, image):
        family = boot["family"]
        name_field, endpoint_field, ca_field = boot["fields"]
        # What would make the kubelet fail to reach (or be let into) the cluster.
        if not self.joins_cluster(boot["cluster"], inst):
            raise Rejected(f"{name_field} {boot['cluster']!r} is neither {self.args.cluster!r} "
                           f"nor an EKS cluster in moto the instance is tagged for")
        if boot["endpoint"].rstrip("/") != self.args.apiserver_url.rstrip("/"):
            raise Rejected(f"{endpoint_field} {boot['endpoint']!r} is not the cluster's "
                           f"{self.args.apiserver_url!r}")
        try:
            ca = base64.b64decode(boot["ca"])
        except (binascii.Error, ValueError):
            raise Rejected(f"{ca_field} is not base64")
        if ca.strip() != self.ca_pem.strip():
            raise Rejected(f"{ca_field} is not the cluster's CA")
        check_labels(boot["labels"])

        itype_name = inst["InstanceType"]
        itype = self.instance_type(itype_name)
        if itype is None:
            raise Rejected(f"unknown instance type {itype_name}")
        zone = inst["Placement"]["AvailabilityZone"]
        name = inst.get("PrivateDnsName") or f"ip-{inst.get('PrivateIpAddress', '0.0.0.0').replace('.', '-')}.ec2.internal"
        machine = inst.get("Architecture") or itype["ProcessorInfo"]["SupportedArchitectures"][0]
        if family == "windows" and machine != "x86_64":
            raise Rejected(f"Windows user data on an {machine} instance: the EKS Windows AMIs are x86_64 only")
        arch = {"x86_64": "amd64", "arm64": "arm64"}.get(machine, "amd64")
        vcpus = itype["VCpuInfo"]["DefaultVCpus"]
        nominal_mib = itype["MemoryInfo"]["SizeInMiB"]
        net = itype.get("NetworkInfo", {})
        eni_pods = net.get("MaximumNetworkInterfaces", 3) * (net.get("Ipv4AddressesPerInterface", 10) - 1) + 2
        eni_pods = min(eni_pods, 110 if vcpus < 30 else 250)

        # Max pods: the user's, else the family's default; the kubelet then caps it at
        # pods-per-core x cores. Kube-reserved memory is 11 MiB a pod + 255 MiB, counted from
        # the ENI-limited max pods on AL2 and AL2023 (bootstrap.sh and nodeadm compute it from
        # their ENI table, before the user's maxPods), from the node's max pods elsewhere.
        if family == "windows":
            default_pods = 110  # Windows pods do not take ENI addresses
        elif family == "al2" and not boot.get("use_max_pods", True):
            default_pods = 110  # --use-max-pods false: the kubelet's own default
        else:
            default_pods = eni_pods
        max_pods = int(boot["max_pods"] or default_pods)
        if boot["pods_per_core"]:
            max_pods = min(max_pods, int(boot["pods_per_core"]) * vcpus)
        reserve_pods = eni_pods if family in ("al2", "al2023") else max_pods

        # Capacity: what the kubelet reads from the machine. The kernel keeps part of the
        # nominal memory (MemTotal < nominal): modelled as a fixed share.
        mem_capacity = int(nominal_mib * (1 - self.args.memory_overhead_percent / 100.0)) * 1024 ** 2
        if family == "bottlerocket":
            # The kubelet's data is on Bottlerocket's second volume; the first holds the OS.
            ephemeral_gib = self.volume_gib(inst, "/dev/xvdb", 20)
        elif family == "windows":
            ephemeral_gib = self.volume_gib(inst, "/dev/sda1", 50)
        else:
            # The EKS and Amazon Linux images' root is /dev/xvda; the copies the gap layer
            # registers say /dev/sda1, as moto gives every image it did not load itself.
            root = "/dev/xvda" if EKS_LINUX_IMAGE.match(image) else inst.get("RootDeviceName")
            ephemeral_gib = self.volume_gib(inst, root, 20)
        capacity = {"cpu": str(vcpus), "memory": f"{mem_capacity // 1024}Ki",
                    "pods": str(max_pods), "ephemeral-storage": f"{ephemeral_gib}Gi",
                    "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
        gpus = sum(g.get("Count", 0) for g in (itype.get("GpuInfo") or {}).get("Gpus", []))
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        # Allocatable = capacity - kubeReserved - systemReserved - evictionHard, with the EKS
        # AMI defaults for whatever the user data does not set.
        kube_reserved, system_reserved = boot["kube_reserved"], boot["system_reserved"]
        eviction = boot["eviction_hard"]
        cpu_m = vcpus * 1000
        cpu_m -= quantity(kube_reserved["cpu"]) * 1000 if "cpu" in kube_reserved else eks_kube_reserved_cpu_m(vcpus)
        cpu_m -= quantity(system_reserved.get("cpu", "0")) * 1000
        mem = mem_capacity
        mem -= quantity(kube_reserved["memory"]) if "memory" in kube_reserved else (11 * reserve_pods + 255) * 1024 ** 2
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
        os_name = "windows" if family == "windows" else "linux"
        labels = {
            "kubernetes.io/arch": arch, "kubernetes.io/os": os_name,
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": itype_name,
            "topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone,
            "beta.kubernetes.io/arch": arch, "beta.kubernetes.io/os": os_name,
            "beta.kubernetes.io/instance-type": itype_name,
            "failure-domain.beta.kubernetes.io/region": region,
            "failure-domain.beta.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": "spot" if lifecycle == "spot" else "on-demand",
        }
        os_image, kernel, runtime = self.os_of(family, image, machine)
        if family == "windows":
            labels["node.kubernetes.io/windows-build"] = WINDOWS_BUILDS[windows_year(image)]
        zid = self.zone_id(zone)
        if zid:
            labels["topology.k8s.aws/zone-id"] = zid
        labels.update(boot["labels"])
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
                    "architecture": arch, "operatingSystem": os_name,
                    "osImage": os_image, "kernelVersion": kernel,
                    "containerRuntimeVersion": runtime, "kubeletVersion": self.args.kubelet_version,
                    "kubeProxyVersion": "", "machineID": iid.replace("-", ""), "systemUUID": iid,
                    "bootID": iid,
                },
            },
        }
        if boot["taints"]:
            node["spec"]["taints"] = boot["taints"]
        return node

    def os_of(self, family, image, machine):
        """(osImage, kernelVersion, containerRuntimeVersion) a kubelet of the family reports."""
        if family == "al2":
            return "Amazon Linux 2", f"5.10.240-238.959.amzn2.{machine}", "containerd://1.7.27"
        if family == "bottlerocket":
            m = re.match(r"bottlerocket-(aws-k8s-\d+\.\d+(?:-nvidia)?)-", image)
            minor = ".".join(self.args.kubelet_version.lstrip("v").split(".")[:2])
            variant = m.group(1) if m else f"aws-k8s-{minor}"
            return f"Bottlerocket OS 1.50.0 ({variant})", "6.12.46", "containerd://2.1.4+bottlerocket"
        if family == "windows":
            year = windows_year(image)
            return f"Windows Server {year} Datacenter", f"{WINDOWS_BUILDS[year]}.4294", "containerd://1.7.27"
        return ("Amazon Linux 2023.9.20261101", f"6.12.46-66.121.amzn2023.{machine}",
                "containerd://2.1.4")

    def run(self):
        if self.args.registry_url:
            kube = requests.Session()
            kube.trust_env = False
            kube.cert, kube.verify = self.kube.cert, self.kube.verify
            threading.Thread(target=ImagePuller(self.args, kube).run, name="image-puller",
                             daemon=True).start()
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
    ap.add_argument("--registry-url", default=None,
                    help="the local registry (http://127.0.0.1:PORT); without it no image pulls are simulated")
    ap.add_argument("--registry-password-file", default=None)
    ap.add_argument("--pull-retry-s", type=float, default=float(os.environ.get("JOINTER_IMAGE_PULL_RETRY_S", "3")),
                    help="how often a pod whose pull failed is looked up again")
    args = ap.parse_args()
    for url in (args.moto_url, args.apiserver_url) + ((args.registry_url,) if args.registry_url else ()):
        if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit(f"nodejoin.py: {url} is not a loopback address")
    log(f"node-join simulator: cluster {args.cluster}, poll {args.poll_ms} ms, "
        f"registration delay {args.delay_ms} ms")
    Simulator(args).run()


if __name__ == "__main__":
    main()
