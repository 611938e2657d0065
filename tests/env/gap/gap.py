"""The gap layer: a small HTTP server in front of moto that answers what moto lacks.

Every request it does not handle goes to moto unchanged (method, path, query, headers,
body) and moto's answer comes back unchanged. It handles:

- EKS: access entries (and their access policies), pod identity associations, add-ons,
  and DescribeCluster overlaid with the local API server's endpoint and CA, the cluster
  security group, accessConfig.
- Pricing GetProducts and EC2 DescribeSpotPriceHistory, from a price fixture (prices.json,
  replaceable at runtime with PUT /_gap/prices).
- SSM GetParameter(s) for the public AMI parameters of the EKS AMI families (AL2023, AL2,
  Bottlerocket, Windows), each naming a moto image of that family's name and architecture
  (registered in moto when it has none); a test can move one with PUT /_gap/parameters.
- EC2 CreateFleet Type=instant: picks overrides by the fixture prices, honours injected
  insufficient-capacity errors, launches through moto's RunInstances with the launch
  template's settings applied; a launch template targeting a capacity reservation launches
  into it (its instance type and zone, while it has room).
- EC2 capacity reservations: Create, Describe (ids, filters, pages), Cancel; the available
  count is the total less the reservation's instances that are not terminated.
- ECR: GetAuthorizationToken pointing at the local registry (distribution) with its
  credentials; DescribeImages, ListImages, BatchGetImage, BatchDeleteImage answered from (and
  done in) that registry; DeleteRepository refusing a repository with images unless forced,
  and then deleting them; DescribeRepositories pages. The rest of ECR is moto's.
- Fault injection (throttling, 5xx, latency, fail the Nth mutating call, ICE) and a call
  log, controlled under /_gap/ (see README.md); the registry's requests since the last reset
  (GET /_gap/registry/requests).

Listens on 127.0.0.1 only and talks only to moto and the registry on 127.0.0.1. Started by up.sh with the
moto venv's python (boto3 and PyYAML are there).
"""

import argparse
import base64
import contextlib
import datetime
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

import boto3
import botocore.config
import botocore.exceptions

import roles

ACCOUNT = "123456789012"  # moto's default account
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "content-length", "expect",
}
JSON_TARGET_SERVICES = {
    "AmazonSSM": "ssm", "AWSPriceListService": "pricing", "AmazonSQS": "sqs",
    "AWSEvents": "events", "AWSCognitoIdentityService": "cognito-identity",
    "DynamoDB_20120810": "dynamodb", "Logs_20140328": "logs", "TrentService": "kms",
    "secretsmanager": "secretsmanager", "AmazonEC2ContainerRegistry_V20150921": "ecr",
    "AWSSecurityTokenServiceV20110615": "sts",
}
# Verbs that change state; everything else (Describe, List, Get, Receive, Search, Lookup,
# Assume, ...) is a read. Order does not matter, prefixes are matched on the operation.
MUTATING_VERBS = (
    "Create", "Delete", "Put", "Update", "Modify", "Attach", "Detach", "Add", "Remove",
    "Tag", "Untag", "BatchDelete", "Run", "Terminate", "Start", "Stop", "Reboot", "Associate",
    "Disassociate", "Register", "Deregister", "Set", "Enable", "Disable", "Send",
    "Change", "Replace", "Import", "Copy", "Authorize", "Revoke", "Allocate", "Release",
    "Assign", "Unassign", "Accept", "Reject", "Cancel", "Request", "Purchase", "Reset",
    "Restore", "Upload", "Publish", "Subscribe", "Unsubscribe", "Apply", "Purge",
    "Activate", "Deactivate", "Upgrade", "Rotate", "Label", "Unlabel", "Resume", "Suspend",
)
LOCATIONS = {
    "us-east-1": "US East (N. Virginia)", "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)", "us-west-2": "US West (Oregon)",
    "eu-west-1": "EU (Ireland)", "eu-west-2": "EU (London)", "eu-central-1": "EU (Frankfurt)",
    "ap-southeast-1": "Asia Pacific (Singapore)", "ap-southeast-2": "Asia Pacific (Sydney)",
    "ap-northeast-1": "Asia Pacific (Tokyo)", "ap-south-1": "Asia Pacific (Mumbai)",
    "ca-central-1": "Canada (Central)", "sa-east-1": "South America (Sao Paulo)",
}
USAGE_PREFIX = {
    "us-east-1": "", "us-east-2": "USE2-", "us-west-1": "USW1-", "us-west-2": "USW2-",
    "eu-west-1": "EU-", "eu-west-2": "EUW2-", "eu-central-1": "EUC1-",
    "ap-southeast-1": "APS1-", "ap-southeast-2": "APS2-", "ap-northeast-1": "APN1-",
    "ap-south-1": "APS3-", "ca-central-1": "CAN1-", "sa-east-1": "SAE1-",
}
# The EKS AMI families' public SSM parameters. One release of each exists: `recommended` /
# `latest` is it, and it can also be named by its version; any other version does not exist.
K8S_VERSIONS = tuple(f"1.{m}" for m in range(28, 36))
AL2_VERSIONS = tuple(f"1.{m}" for m in range(28, 33))  # AL2 reached end of support after 1.32
EKS_RELEASE = "v20261101"  # AL2023 and AL2
BOTTLEROCKET_RELEASE = "1.50.0"
BOTTLEROCKET_BUILD = "3c1d7a5e"  # the commit in Bottlerocket's image names
WINDOWS_RELEASE = "2026.11.11"
EKS_AMI_LEAF = r"(?P<leaf>/image_id|/image_name|/release_version)?$"
AL2023_PARAM = re.compile(
    r"^/aws/service/eks/optimized-ami/(?P<k>1\.\d+)/amazon-linux-2023/(?P<arch>x86_64|arm64)/"
    r"(?P<variant>standard|nvidia|neuron)/"
    r"(?:recommended|amazon-eks-node-al2023-(?P=arch)-(?P=variant)-(?P=k)-(?P<release>v\d+))"
    + EKS_AMI_LEAF)
AL2_PARAM = re.compile(
    r"^/aws/service/eks/optimized-ami/(?P<k>1\.\d+)/amazon-linux-2(?P<suffix>|-arm64|-gpu)/"
    r"(?:recommended|amazon-eks(?P=suffix)-node-(?P=k)-(?P<release>v\d+))" + EKS_AMI_LEAF)
BOTTLEROCKET_PARAM = re.compile(
    r"^/aws/service/bottlerocket/aws-k8s-(?P<k>1\.\d+)(?P<nvidia>-nvidia)?/(?P<arch>x86_64|arm64)/"
    r"(?:latest|(?P<release>\d+\.\d+\.\d+))(?P<leaf>/image_id|/image_version)$")
WINDOWS_PARAM = re.compile(
    r"^/aws/service/ami-windows-latest/Windows_Server-(?P<year>2019|2022|2025)-English-Core-"
    r"EKS_Optimized-(?P<k>1\.\d+)(?P<leaf>/image_id)$")
# Every other name under these is one AWS does not publish (ParameterNotFound); the rest of
# /aws/service/ (e.g. ami-amazon-linux-latest) is moto's.
OWNED_PUBLIC_PARAM = re.compile(
    r"^/aws/service/(?:eks/optimized-ami/|bottlerocket/|ami-windows-latest/[^/]*EKS_Optimized)")
ACCESS_ENTRY_TYPES = {
    "STANDARD", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "EC2", "HYBRID_LINUX",
    "HYPERPOD_LINUX",
}


def log(msg):
    print(f"{datetime.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {msg}", flush=True)


def is_mutating(operation):
    return operation.startswith(MUTATING_VERBS)


class AwsError(Exception):
    def __init__(self, code, message, status=400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body


def json_response(obj, status=200, content_type="application/json"):
    return Response(status, [("Content-Type", content_type)], json.dumps(obj).encode())


def ec2_response(action, inner_xml):
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{EC2_NS}">'
        f"<requestId>{uuid.uuid4()}</requestId>{inner_xml}</{action}Response>"
    )
    return Response(200, [("Content-Type", "text/xml;charset=UTF-8")], body.encode())


def x(tag, value):
    """One XML element, or nothing for None."""
    if value is None:
        return ""
    return f"<{tag}>{escape(str(value))}</{tag}>"


def encode_token(offset):
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode()


def decode_token(token):
    if not token:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(token.encode()))["o"])
    except Exception:
        raise AwsError("InvalidNextToken", "The specified pagination token is not valid.")


def unflatten(pairs):
    """Query-protocol parameters (A.1.B=v) into nested dicts and lists."""
    root = {}
    for key, value in pairs:
        node = root
        parts = key.split(".")
        for i, part in enumerate(parts):
            k = int(part) if part.isdigit() else part
            if i == len(parts) - 1:
                node[k] = value
            else:
                nxt = node.get(k)
                if not isinstance(nxt, dict):
                    nxt = node[k] = {}
                node = nxt

    def listify(node):
        if isinstance(node, dict):
            if node and all(isinstance(k, int) for k in node):
                return [listify(node[k]) for k in sorted(node)]
            return {k: listify(v) for k, v in node.items()}
        return node

    return listify(root)


def as_list(value):
    if value is None:
        return []
    if isinstance(value, list):
        return value
    return [value]


# ---- the call being handled -------------------------------------------------------------


class Call:
    """One incoming request, with the service, region, protocol and operation worked out."""

    def __init__(self, method, raw_target, headers, body, default_region):
        self.method = method
        self.raw_target = raw_target
        split = urlsplit(raw_target)
        self.raw_path = split.path
        self.query = parse_qsl(split.query, keep_blank_values=True)
        self.headers = headers  # list of (name, value)
        self.body = body
        self.target = self.header("X-Amz-Target")
        self.service, self.region = None, default_region
        m = re.search(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/([^/]+)/aws4_request",
                      self.header("Authorization") or "")
        self.access_key = m.group(1) if m else None
        if m:
            self.region, self.service = m.group(2), m.group(3)
        self.form = []
        ctype = (self.header("Content-Type") or "").lower()
        if method == "POST" and "x-www-form-urlencoded" in ctype:
            self.form = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        action = dict(self.query).get("Action") or dict(self.form).get("Action")
        if self.target:
            self.protocol = "json"
            self.operation = self.target.rsplit(".", 1)[-1]
            if not self.service:
                self.service = JSON_TARGET_SERVICES.get(self.target.split(".")[0], "unknown")
        elif action:
            self.operation = action
            params = dict(self.query + self.form)
            if not self.service:
                self.service = "ec2" if params.get("Version") == "2016-11-15" else "unknown"
            self.protocol = "ec2" if self.service == "ec2" else "query"
        elif self.raw_path.startswith("/clusters") or self.service == "eks" or \
                self.raw_path.startswith("/addons"):
            self.service = "eks"
            self.protocol = "rest-json"
            self.operation = eks_operation_name(method, self.segments())
        else:
            self.service = self.service or "unknown"
            self.protocol = "rest"
            self.operation = f"{method} {self.raw_path}"
        self.params = unflatten(self.query + self.form) if self.protocol in ("ec2", "query") else {}
        if self.protocol == "rest":
            self.mutating = method in ("POST", "PUT", "DELETE", "PATCH")
        else:
            self.mutating = is_mutating(self.operation)

    def header(self, name):
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return None

    def segments(self):
        return [unquote(s) for s in self.raw_path.strip("/").split("/") if s != ""]

    def json_body(self):
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except ValueError:
            raise AwsError("SerializationException", "request body is not valid JSON")

    def qs(self):
        return dict(self.query)


EKS_RESOURCES = {
    "access-entries": ("AccessEntry", "AccessEntries"),
    "access-policies": ("AccessPolicy", "AssociatedAccessPolicies"),
    "pod-identity-associations": ("PodIdentityAssociation", "PodIdentityAssociations"),
    "addons": ("Addon", "Addons"),
    "node-groups": ("Nodegroup", "Nodegroups"),
    "fargate-profiles": ("FargateProfile", "FargateProfiles"),
    "updates": ("Update", "Updates"),
    "insights": ("Insight", "Insights"),
}


def eks_operation_name(method, seg):
    """The EKS API operation of a REST path, by the usual collection/item conventions."""
    if seg[:1] == ["tags"]:
        return {"GET": "ListTagsForResource", "POST": "TagResource",
                "DELETE": "UntagResource"}.get(method, f"{method} tags")
    if seg == ["addons", "supported-versions"]:
        return "DescribeAddonVersions"
    if seg[:1] != ["clusters"]:
        return f"{method} /{'/'.join(seg)}"
    if len(seg) == 1:
        return {"GET": "ListClusters", "POST": "CreateCluster"}.get(method, f"{method} clusters")
    if len(seg) == 2:
        return {"GET": "DescribeCluster", "DELETE": "DeleteCluster",
                "POST": "UpdateCluster"}.get(method, f"{method} cluster")
    if seg[2] == "update-config":
        return "UpdateClusterConfig"
    if seg[2] == "updates" and method == "POST":
        return "UpdateClusterVersion"
    # The innermost known collection decides: .../access-entries/X/access-policies/Y.
    coll_index = max((i for i in range(2, len(seg)) if seg[i] in EKS_RESOURCES), default=None)
    if coll_index is None:
        return f"{method} /{'/'.join(seg)}"
    one, many = EKS_RESOURCES[seg[coll_index]]
    item = len(seg) > coll_index + 1
    if seg[coll_index] == "access-policies":
        return {("POST", False): "AssociateAccessPolicy",
                ("GET", False): "ListAssociatedAccessPolicies",
                ("DELETE", True): "DisassociateAccessPolicy"}.get((method, item), f"{method} access-policies")
    if item and len(seg) > coll_index + 2 and seg[coll_index + 2] == "update":
        return f"Update{one}Config" if one == "Nodegroup" else f"Update{one}"
    return {
        ("GET", False): f"List{many}", ("POST", False): f"Create{one}",
        ("GET", True): f"Describe{one}", ("DELETE", True): f"Delete{one}",
        ("POST", True): f"Update{one}",
    }.get((method, item), f"{method} {seg[coll_index]}")


# ---- errors in each protocol's shape ----------------------------------------------------


def error_response(call, code, message, status):
    rid = str(uuid.uuid4())
    if call.protocol == "ec2":
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>{x("Code", code)}'
                f'{x("Message", message)}</Error></Errors>{x("RequestID", rid)}</Response>')
        return Response(status, [("Content-Type", "text/xml;charset=UTF-8")], body.encode())
    if call.protocol == "query":
        kind = "Receiver" if status >= 500 else "Sender"
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse><Error>{x("Type", kind)}'
                f'{x("Code", code)}{x("Message", message)}</Error>{x("RequestId", rid)}</ErrorResponse>')
        return Response(status, [("Content-Type", "text/xml"), ("x-amzn-RequestId", rid)], body.encode())
    if call.protocol == "json":
        ctype = call.header("Content-Type") or "application/x-amz-json-1.1"
        body = json.dumps({"__type": code, "message": message}).encode()
        return Response(status, [("Content-Type", ctype), ("x-amzn-RequestId", rid),
                                 ("x-amzn-ErrorType", code)], body)
    if call.protocol == "rest-json":
        body = json.dumps({"message": message}).encode()
        return Response(status, [("Content-Type", "application/json"), ("x-amzn-RequestId", rid),
                                 ("x-amzn-ErrorType", code)], body)
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error>{x("Code", code)}{x("Message", message)}'
            f'{x("RequestId", rid)}</Error>')
    return Response(status, [("Content-Type", "application/xml")], body.encode())


def throttle_code(call):
    if call.protocol == "ec2":
        return "RequestLimitExceeded", "Request limit exceeded."
    if call.protocol == "query":
        return "Throttling", "Rate exceeded"
    return "ThrottlingException", "Rate exceeded"


def server_error_code(call):
    if call.protocol == "ec2":
        return "InternalError", "An internal error has occurred"
    return {
        "eks": "ServerException", "ssm": "InternalServerError",
        "pricing": "InternalErrorException",
    }.get(call.service, "InternalFailure"), "We encountered an internal error. Please try again."


# ---- the gap layer's state --------------------------------------------------------------


class Gap:
    def __init__(self, args):
        self.args = args
        self.lock = threading.RLock()
        self.reservation_lock = threading.Lock()
        self.moto = urlsplit(args.moto_url)
        self.fixture_prices = self._load_prices(args.prices)
        self._clients = {}
        self._itypes = {}  # instance type -> moto DescribeInstanceTypes record (or None)
        self._images = {}  # (region, image id) -> architecture
        # Finding a family's image and registering it when missing is one step: two
        # concurrent look-ups must not register it twice.
        self.image_lock = threading.Lock()
        self.reset_cv = threading.Condition()
        self.resetting = False
        self.registry = Registry(args.registry_url, args.registry_password_file, args.registry_storage,
                                 args.registry_access_log) if args.registry_url else None
        # Calls received and not yet answered (id(call) -> summary): a test that kills a client
        # mid-call waits until the call has reached AWS, not for a log line before it.
        self.in_flight = {}
        # Role sessions handed out by the Pod Identity agent and IAM decisions on their calls;
        # kept across world resets so a whole suite's decisions add up.
        self.roles = roles.Roles(self, ACCOUNT)
        self.reset_state()
        if self.registry is not None:
            self.registry.mark()  # the request log starts with the gap layer

    @staticmethod
    def _load_prices(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    # moto answers 500 to calls that arrive while it resets (its backends are half
    # rebuilt), so calls through the gap layer wait for a reset to finish.
    def begin_reset(self):
        with self.reset_cv:
            while self.resetting:
                self.reset_cv.wait()
            self.resetting = True

    def end_reset(self):
        with self.reset_cv:
            self.resetting = False
            self.reset_cv.notify_all()

    def wait_not_resetting(self):
        with self.reset_cv:
            while self.resetting:
                self.reset_cv.wait()

    def reset_state(self):
        with self.lock:
            self.prices = json.loads(json.dumps(self.fixture_prices))
            self.prices_time = time.time()
            self.access_entries = {}  # (region, cluster) -> {principalArn: entry}
            self.access_policies = {}  # (region, cluster, principalArn) -> {policyArn: assoc}
            self.associations = {}  # (region, cluster) -> {associationId: association}
            self.addons = {}  # (region, cluster) -> {name: addon}
            self.reservations = {}  # region -> {capacityReservationId: reservation}
            self.reserved_instances = {}  # instance id -> capacityReservationId
            # (region, ClientToken) -> the CreateFleet request and answer that token names
            self.fleet_tokens = {}
            # (region, cluster) -> {"oidc": False, "authenticationMode": ...}: how a test
            # makes DescribeCluster report a cluster moto cannot express.
            self.cluster_overrides = {}
            self.ami_cache = {}  # (region, family, variant, arch, k) -> (image id, name)
            # Public parameters a test moved: name -> value; and every name's changes so far,
            # name -> (version, time), so a moved parameter reports a new Version as SSM does.
            self.parameter_overrides = {}
            self.parameter_changes = {}
            self.calls = []
            self.clear_faults()

    def clear_faults(self):
        with self.lock:
            self.fault_rules = []  # throttle / server_error rules
            self.latency_rules = []
            self.ice_rules = []
            self.fail_nth = None

    def faults_view(self):
        with self.lock:
            return {
                "rules": self.fault_rules, "latency": self.latency_rules,
                "ice": self.ice_rules, "fail_nth_mutating": self.fail_nth,
            }

    def client(self, service, region):
        key = (service, region)
        with self.lock:
            c = self._clients.get(key)
            if c is None:
                c = boto3.session.Session().client(
                    service, region_name=region, endpoint_url=self.args.moto_url,
                    aws_access_key_id="testing", aws_secret_access_key="testing",
                    config=botocore.config.Config(retries={"total_max_attempts": 1},
                                                  read_timeout=120, connect_timeout=5),
                )
                self._clients[key] = c
            return c

    # ---- forwarding ----

    def forward(self, call):
        conn = http.client.HTTPConnection(self.moto.hostname, self.moto.port, timeout=300)
        try:
            conn.putrequest(call.method, call.raw_target, skip_host=True, skip_accept_encoding=True)
            for k, v in call.headers:
                if k.lower() not in HOP_BY_HOP:
                    conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(call.body)))
            conn.endheaders(call.body)
            resp = conn.getresponse()
            data = resp.read()
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
            return Response(resp.status, headers, data)
        finally:
            conn.close()

    # ---- faults ----

    def apply_faults(self, call):
        """Sleeps for injected latency; returns (fault kind, Response) or (None, None)."""
        with self.lock:
            delay = sum(r["ms"] for r in self.latency_rules if self._matches(r, call))
        if delay:
            time.sleep(delay / 1000.0)
        with self.lock:
            if call.mutating and self.fail_nth is not None:
                self.fail_nth["remaining"] -= 1
                if self.fail_nth["remaining"] <= 0:
                    rule, self.fail_nth = self.fail_nth, None
                    code, msg = server_error_code(call)
                    code = rule.get("code") or code
                    return "fail_nth_mutating", error_response(
                        call, code, rule.get("message") or msg, int(rule.get("status") or 500))
            for rule in self.fault_rules:
                if not self._matches(rule, call):
                    continue
                if rule["count"] is not None:
                    if rule["count"] <= 0:
                        continue
                    rule["count"] -= 1
                if rule["kind"] == "throttle":
                    code, msg = throttle_code(call)
                    default_status = 400
                else:
                    code, msg = server_error_code(call)
                    default_status = 500
                return rule["kind"], error_response(
                    call, rule.get("code") or code, rule.get("message") or msg,
                    int(rule.get("status") or default_status))
        return None, None

    @staticmethod
    def _matches(rule, call):
        for key, actual in (("service", call.service), ("operation", call.operation)):
            want = rule.get(key)
            if want is None:
                continue
            wanted = want if isinstance(want, list) else [want]
            if actual not in wanted:
                return False
        return True

    def add_faults(self, spec):
        with self.lock:
            for kind, aliases in (("throttle", ("throttle",)),
                                  ("server_error", ("server_error", "error5xx"))):
                for alias in aliases:
                    for rule in as_list(spec.get(alias)):
                        if not isinstance(rule, dict):
                            raise ValueError(f"{alias} must be an object or a list of objects")
                        self.fault_rules.append({
                            "kind": kind, "count": rule.get("count"),
                            "service": rule.get("service"), "operation": rule.get("operation"),
                            "status": rule.get("status"), "code": rule.get("code"),
                            "message": rule.get("message"),
                        })
            if "latency_ms" in spec:
                self.latency_rules.append({"ms": int(spec["latency_ms"])})
            for rule in as_list(spec.get("latency")):
                self.latency_rules.append({
                    "ms": int(rule["ms"]), "service": rule.get("service"),
                    "operation": rule.get("operation"),
                })
            for rule in as_list(spec.get("ice")):
                self.ice_rules.append({
                    "instance_type": rule.get("instance_type"), "zone": rule.get("zone"),
                    "capacity_type": rule.get("capacity_type"), "count": rule.get("count"),
                })
            nth = spec.get("fail_nth_mutating")
            if nth is not None:
                if not isinstance(nth, dict):
                    nth = {"n": nth}
                n = int(nth["n"])
                if n < 1:
                    raise ValueError("fail_nth_mutating.n must be >= 1")
                self.fail_nth = {"n": n, "remaining": n, "code": nth.get("code"),
                                 "status": nth.get("status"), "message": nth.get("message")}

    def ice_hit(self, instance_type, zone, capacity_type):
        with self.lock:
            for rule in self.ice_rules:
                if rule["instance_type"] not in (None, instance_type):
                    continue
                if rule["zone"] not in (None, zone):
                    continue
                if rule["capacity_type"] not in (None, capacity_type):
                    continue
                if rule["count"] is not None:
                    if rule["count"] <= 0:
                        continue
                    rule["count"] -= 1
                return True
        return False

    def record(self, call, status, ms, fault, started):
        with self.lock:
            self.calls.append({
                "service": call.service, "operation": call.operation,
                "mutating": call.mutating, "status": status, "ms": round(ms, 1),
                "t": round(started, 3), "fault": fault,
            })

    # ---- moto look-ups ----

    def instance_type_info(self, names):
        """moto's DescribeInstanceTypes records for the names (None for unknown ones)."""
        missing = [n for n in names if n not in self._itypes]
        if missing:
            ec2 = self.client("ec2", self.args.region)
            found = {}
            for i in range(0, len(missing), 100):
                chunk = missing[i:i + 100]
                pages = ec2.get_paginator("describe_instance_types").paginate(
                    Filters=[{"Name": "instance-type", "Values": chunk}])
                for page in pages:
                    for it in page["InstanceTypes"]:
                        found[it["InstanceType"]] = it
            with self.lock:
                for n in missing:
                    self._itypes[n] = found.get(n)
        return {n: self._itypes.get(n) for n in names}

    def image_architecture(self, region, image_id):
        key = (region, image_id)
        if key not in self._images:
            try:
                imgs = self.client("ec2", region).describe_images(ImageIds=[image_id])["Images"]
            except botocore.exceptions.ClientError:
                imgs = []
            arch = imgs[0].get("Architecture") if imgs else None
            if arch is None:
                return None
            self._images[key] = arch
        return self._images[key]

    def cluster_or_404(self, region, name):
        try:
            return self.client("eks", region).describe_cluster(name=name)["cluster"]
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] == "ResourceNotFoundException":
                raise AwsError("ResourceNotFoundException", f"No cluster found for name: {name}.", 404)
            raise


# ---- EKS ---------------------------------------------------------------------------------


def page(items, qs, default=100, max_allowed=100):
    try:
        limit = int(qs.get("maxResults") or default)
    except ValueError:
        raise AwsError("InvalidParameterException", "maxResults must be a number")
    if limit < 1 or limit > max_allowed:
        raise AwsError("InvalidParameterException",
                       f"maxResults must be between 1 and {max_allowed}")
    start = decode_token(qs.get("nextToken"))
    chunk = items[start:start + limit]
    token = encode_token(start + limit) if start + limit < len(items) else None
    return chunk, token


def handle_eks(gap, call):
    seg = call.segments()
    if len(seg) < 2 or seg[0] != "clusters":
        return None
    region, cluster = call.region, seg[1]
    if len(seg) == 2 and call.method == "GET":
        return describe_cluster(gap, call, cluster)
    if len(seg) == 2 and call.method == "DELETE":
        resp = gap.forward(call)
        if resp.status == 200:
            with gap.lock:
                key = (region, cluster)
                gap.access_entries.pop(key, None)
                gap.associations.pop(key, None)
                gap.addons.pop(key, None)
        return resp
    if len(seg) < 3 or seg[2] not in ("access-entries", "pod-identity-associations", "addons"):
        return None
    if seg[2] == "addons" and len(seg) >= 4 and seg[3] == "supported-versions":
        return None
    moto_cluster = gap.cluster_or_404(region, cluster)
    key = (region, cluster)
    if seg[2] == "access-entries":
        return access_entries(gap, call, key, moto_cluster, seg[3:])
    if seg[2] == "pod-identity-associations":
        return pod_identity(gap, call, key, seg[3:])
    return addons(gap, call, key, moto_cluster, seg[3:])


def describe_cluster(gap, call, name):
    resp = gap.forward(call)
    if resp.status != 200:
        return resp
    doc = json.loads(resp.body)
    c = doc.get("cluster", {})
    with open(gap.args.ca_file, "rb") as f:
        ca = f.read()
    c["endpoint"] = gap.args.apiserver_url
    c["certificateAuthority"] = {"data": base64.b64encode(ca).decode()}
    vpc = c.setdefault("resourcesVpcConfig", {})
    if not vpc.get("vpcId") and vpc.get("subnetIds"):
        try:
            subnets = gap.client("ec2", call.region).describe_subnets(
                SubnetIds=vpc["subnetIds"][:1])["Subnets"]
            if subnets:
                vpc["vpcId"] = subnets[0]["VpcId"]
        except botocore.exceptions.ClientError:
            pass
    sg = cluster_security_group(gap, call.region, name, vpc.get("vpcId"))
    if sg:
        vpc["clusterSecurityGroupId"] = sg
    vpc.setdefault("publicAccessCidrs", ["0.0.0.0/0"])
    access = c.setdefault("accessConfig", {})
    access.setdefault("authenticationMode", "API_AND_CONFIG_MAP")
    access.setdefault("bootstrapClusterCreatorAdminPermissions", True)
    c["version"] = c.get("version") or "1.34"
    net = c.setdefault("kubernetesNetworkConfig", {})
    net.setdefault("serviceIpv4Cidr", "10.96.0.0/16")
    net.setdefault("ipFamily", "ipv4")
    # moto gives every cluster the same issuer; EKS gives each its own.
    c.setdefault("identity", {}).setdefault("oidc", {})["issuer"] = (
        f"https://oidc.eks.{call.region}.amazonaws.com/id/"
        + hashlib.sha256(name.encode()).hexdigest()[:32].upper())
    c.setdefault("status", "ACTIVE")
    with gap.lock:
        override = dict(gap.cluster_overrides.get((call.region, name), {}))
    if override.get("oidc") is False:
        c.pop("identity", None)
    if override.get("authenticationMode"):
        access["authenticationMode"] = override["authenticationMode"]
    if override.get("ipFamily"):
        net["ipFamily"] = override["ipFamily"]
    return json_response(doc)


def cluster_security_group(gap, region, cluster, vpc_id):
    """The cluster security group: found by EKS's naming (eks-cluster-sg-<cluster>...) in the
    cluster's VPC in moto, else the world fixture's (.run/world.json)."""
    filters = [{"Name": "group-name", "Values": [f"eks-cluster-sg-{cluster}*"]}]
    if vpc_id:
        filters.append({"Name": "vpc-id", "Values": [vpc_id]})
    try:
        groups = gap.client("ec2", region).describe_security_groups(Filters=filters)["SecurityGroups"]
    except botocore.exceptions.ClientError:
        groups = []
    if groups:
        return sorted(g["GroupId"] for g in groups)[0]
    world = gap.args.world_file
    if world and os.path.exists(world):
        try:
            with open(world, encoding="utf-8") as f:
                w = json.load(f)
            if w.get("cluster", {}).get("name") == cluster and w.get("region", region) == region:
                return w.get("securityGroups", {}).get("cluster")
        except (OSError, ValueError):
            pass
    return None


def principal_name(arn):
    m = re.match(r"^arn:aws[\w-]*:iam::(\d{12}):(role|user)/(?:.*/)?([\w+=,.@-]+)$", arn or "")
    return m.groups() if m else None


def access_entries(gap, call, key, cluster, rest):
    region, name = key
    entries = gap.access_entries.setdefault(key, {})
    if not rest:
        if call.method == "POST":
            return create_access_entry(gap, call, key, cluster, entries)
        if call.method == "GET":
            qs = call.qs()
            with gap.lock:
                arns = sorted(entries)
                if qs.get("associatedPolicyArn"):
                    arns = [a for a in arns
                            if qs["associatedPolicyArn"] in gap.access_policies.get(key + (a,), {})]
            chunk, token = page(arns, qs)
            out = {"accessEntries": chunk}
            if token:
                out["nextToken"] = token
            return json_response(out)
        return None
    arn = rest[0]
    with gap.lock:
        entry = entries.get(arn)
    if entry is None:
        raise AwsError("ResourceNotFoundException",
                       f"The specified access entry resource is not found (principalArn: {arn}).", 404)
    if len(rest) == 1:
        if call.method == "GET":
            return json_response({"accessEntry": entry})
        if call.method == "DELETE":
            with gap.lock:
                entries.pop(arn, None)
                gap.access_policies.pop(key + (arn,), None)
            return json_response({})
        if call.method == "POST":
            body = call.json_body()
            with gap.lock:
                if "kubernetesGroups" in body:
                    if entry["type"] != "STANDARD" and body["kubernetesGroups"]:
                        raise AwsError("InvalidParameterException",
                                       f"kubernetesGroups can't be specified for access entries of type {entry['type']}.")
                    entry["kubernetesGroups"] = list(body["kubernetesGroups"] or [])
                if body.get("username"):
                    entry["username"] = body["username"]
                entry["modifiedAt"] = time.time()
            return json_response({"accessEntry": entry})
        return None
    if rest[1] != "access-policies":
        return None
    policies = gap.access_policies.setdefault(key + (arn,), {})
    if len(rest) == 2 and call.method == "POST":
        body = call.json_body()
        policy = body.get("policyArn") or ""
        scope = body.get("accessScope") or {}
        if not policy.startswith("arn:aws:eks::aws:cluster-access-policy/"):
            raise AwsError("InvalidParameterException", f"The policyArn {policy!r} is not valid.")
        if scope.get("type") not in ("cluster", "namespace"):
            raise AwsError("InvalidParameterException", "accessScope.type must be cluster or namespace.")
        if entry["type"] != "STANDARD":
            raise AwsError("InvalidRequestException",
                           f"Access policies can't be associated with access entries of type {entry['type']}.")
        now = time.time()
        with gap.lock:
            prev = policies.get(policy)
            assoc = {"policyArn": policy, "accessScope": {"type": scope["type"],
                                                          "namespaces": scope.get("namespaces", [])},
                     "associatedAt": prev["associatedAt"] if prev else now, "modifiedAt": now}
            policies[policy] = assoc
        return json_response({"clusterName": name, "principalArn": arn,
                              "associatedAccessPolicy": assoc})
    if len(rest) == 2 and call.method == "GET":
        with gap.lock:
            items = [policies[p] for p in sorted(policies)]
        chunk, token = page(items, call.qs())
        out = {"clusterName": name, "principalArn": arn, "associatedAccessPolicies": chunk}
        if token:
            out["nextToken"] = token
        return json_response(out)
    if len(rest) == 3 and call.method == "DELETE":
        with gap.lock:
            if policies.pop(rest[2], None) is None:
                raise AwsError("ResourceNotFoundException",
                               f"The specified access policy {rest[2]} is not associated.", 404)
        return json_response({})
    return None


def create_access_entry(gap, call, key, cluster, entries):
    region, name = key
    body = call.json_body()
    arn = body.get("principalArn")
    parsed = principal_name(arn)
    if not parsed:
        raise AwsError("InvalidParameterException",
                       f"The specified principalArn is invalid: {arn!r} is not an IAM role or user ARN.")
    account, kind, pname = parsed
    etype = body.get("type") or "STANDARD"
    if etype not in ACCESS_ENTRY_TYPES:
        raise AwsError("InvalidParameterException", f"The type {etype!r} is not valid.")
    groups = body.get("kubernetesGroups") or []
    if etype != "STANDARD" and groups:
        raise AwsError("InvalidParameterException",
                       f"kubernetesGroups can't be specified for access entries of type {etype}.")
    if etype != "STANDARD" and body.get("username"):
        raise AwsError("InvalidParameterException",
                       f"username can't be specified for access entries of type {etype}.")
    if etype in ("EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "HYBRID_LINUX") and kind != "role":
        raise AwsError("InvalidParameterException", f"Access entries of type {etype} need an IAM role.")
    # EKS checks that the principal exists.
    iam = gap.client("iam", region)
    try:
        if kind == "role":
            iam.get_role(RoleName=pname)
        else:
            iam.get_user(UserName=pname)
    except botocore.exceptions.ClientError as e:
        if e.response["Error"]["Code"] == "NoSuchEntity":
            raise AwsError("InvalidParameterException",
                           f"The specified principalArn is invalid: invalid principal ({arn}).")
        raise
    if etype in ("EC2_LINUX", "EC2_WINDOWS", "HYBRID_LINUX"):
        username = "system:node:{{EC2PrivateDNSName}}"
        groups = ["system:nodes"]
    elif etype == "FARGATE_LINUX":
        username = "system:node:{{SessionName}}"
        groups = ["system:nodes"]
    elif body.get("username"):
        username = body["username"]
    elif kind == "role":
        username = f"arn:aws:sts::{account}:assumed-role/{pname}/{{{{SessionName}}}}"
    else:
        username = arn
    now = time.time()
    entry = {
        "clusterName": name, "principalArn": arn, "kubernetesGroups": groups,
        "accessEntryArn": (f"arn:aws:eks:{region}:{ACCOUNT}:access-entry/{name}/{kind}/"
                           f"{account}/{pname}/{uuid.uuid4()}"),
        "createdAt": now, "modifiedAt": now, "tags": body.get("tags") or {},
        "username": username, "type": etype,
    }
    with gap.lock:
        if arn in entries:
            raise AwsError("ResourceInUseException",
                           "The specified access entry resource is already in use on this cluster.", 409)
        entries[arn] = entry
    return json_response({"accessEntry": entry})


def pod_identity(gap, call, key, rest):
    region, name = key
    assocs = gap.associations.setdefault(key, {})
    if not rest:
        if call.method == "POST":
            body = call.json_body()
            ns, sa, role = body.get("namespace"), body.get("serviceAccount"), body.get("roleArn")
            if not ns or not sa or not role:
                raise AwsError("InvalidParameterException",
                               "namespace, serviceAccount and roleArn are required.")
            if not principal_name(role) or principal_name(role)[1] != "role":
                raise AwsError("InvalidParameterException", f"The roleArn {role!r} is not valid.")
            with gap.lock:
                for a in assocs.values():
                    if a["namespace"] == ns and a["serviceAccount"] == sa:
                        raise AwsError("ResourceInUseException",
                                       f"Association already exists: {a['associationId']}", 409)
                aid = "a-" + uuid.uuid4().hex[:17]
                now = time.time()
                assoc = {
                    "clusterName": name, "namespace": ns, "serviceAccount": sa, "roleArn": role,
                    "associationArn": (f"arn:aws:eks:{region}:{ACCOUNT}:podidentityassociation/"
                                       f"{name}/{aid}"),
                    "associationId": aid, "tags": body.get("tags") or {},
                    "createdAt": now, "modifiedAt": now,
                    "disableSessionTags": bool(body.get("disableSessionTags", False)),
                }
                if body.get("targetRoleArn"):
                    assoc["targetRoleArn"] = body["targetRoleArn"]
                assocs[aid] = assoc
            return json_response({"association": assoc})
        if call.method == "GET":
            qs = call.qs()
            with gap.lock:
                items = sorted(assocs.values(), key=lambda a: a["createdAt"])
            items = [a for a in items
                     if (not qs.get("namespace") or a["namespace"] == qs["namespace"])
                     and (not qs.get("serviceAccount") or a["serviceAccount"] == qs["serviceAccount"])]
            chunk, token = page(items, qs)
            out = {"associations": [
                {k: a[k] for k in ("clusterName", "namespace", "serviceAccount",
                                   "associationArn", "associationId")} for a in chunk]}
            if token:
                out["nextToken"] = token
            return json_response(out)
        return None
    aid = rest[0]
    with gap.lock:
        assoc = assocs.get(aid)
    if assoc is None:
        raise AwsError("ResourceNotFoundException",
                       f"The specified pod identity association {aid} is not found.", 404)
    if len(rest) > 1:
        return None
    if call.method == "GET":
        return json_response({"association": assoc})
    if call.method == "DELETE":
        with gap.lock:
            assocs.pop(aid, None)
        return json_response({"association": assoc})
    if call.method == "POST":
        body = call.json_body()
        with gap.lock:
            if body.get("roleArn"):
                assoc["roleArn"] = body["roleArn"]
            if "disableSessionTags" in body:
                assoc["disableSessionTags"] = bool(body["disableSessionTags"])
            assoc["modifiedAt"] = time.time()
        return json_response({"association": assoc})
    return None


def default_addons(region, cluster):
    now = time.time()
    return {"eks-pod-identity-agent": {
        "addonName": "eks-pod-identity-agent", "clusterName": cluster, "status": "ACTIVE",
        "addonVersion": "v1.3.8-eksbuild.2", "health": {"issues": []},
        "addonArn": (f"arn:aws:eks:{region}:{ACCOUNT}:addon/{cluster}/eks-pod-identity-agent/"
                     f"{uuid.uuid5(uuid.NAMESPACE_URL, cluster)}"),
        "createdAt": now, "modifiedAt": now, "tags": {},
    }}


def addons(gap, call, key, cluster, rest):
    region, name = key
    with gap.lock:
        if key not in gap.addons:
            gap.addons[key] = default_addons(region, name)
        items = gap.addons[key]
    if not rest:
        if call.method == "GET":
            chunk, token = page(sorted(items), call.qs())
            out = {"addons": chunk}
            if token:
                out["nextToken"] = token
            return json_response(out)
        if call.method == "POST":
            body = call.json_body()
            addon = body.get("addonName")
            if not addon:
                raise AwsError("InvalidParameterException", "addonName is required.")
            with gap.lock:
                if addon in items:
                    raise AwsError("ResourceInUseException", f"Addon {addon} already exists.", 409)
                now = time.time()
                items[addon] = {
                    "addonName": addon, "clusterName": name, "status": "ACTIVE",
                    "addonVersion": body.get("addonVersion") or "v1.0.0-eksbuild.1",
                    "health": {"issues": []},
                    "addonArn": f"arn:aws:eks:{region}:{ACCOUNT}:addon/{name}/{addon}/{uuid.uuid4()}",
                    "createdAt": now, "modifiedAt": now, "tags": body.get("tags") or {},
                }
                if body.get("serviceAccountRoleArn"):
                    items[addon]["serviceAccountRoleArn"] = body["serviceAccountRoleArn"]
            return json_response({"addon": items[addon]})
        return None
    addon = rest[0]
    with gap.lock:
        item = items.get(addon)
    if item is None:
        raise AwsError("ResourceNotFoundException", f"No addon: {addon} found in cluster: {name}", 404)
    if len(rest) == 1 and call.method == "GET":
        return json_response({"addon": item})
    if len(rest) == 1 and call.method == "DELETE":
        with gap.lock:
            items.pop(addon, None)
        gone = dict(item, status="DELETING")
        return json_response({"addon": gone})
    return None


# ---- prices ------------------------------------------------------------------------------


def sku_of(region, itype, tenancy="Shared"):
    key = f"{region}/{itype}" if tenancy == "Shared" else f"{region}/{itype}/{tenancy}"
    return hashlib.sha256(key.encode()).hexdigest()[:16].upper()


def instance_family_name(itype):
    letters = re.match(r"[a-z]+", itype).group(0)
    return {"c": "Compute optimized", "r": "Memory optimized", "x": "Memory optimized",
            "z": "Memory optimized", "g": "GPU instance", "p": "GPU instance",
            "i": "Storage optimized", "d": "Storage optimized", "h": "Storage optimized",
            "inf": "Machine Learning ASIC Instances", "trn": "Machine Learning ASIC Instances",
            }.get(letters, "General purpose")


def fmt_gib(mib):
    gib = mib / 1024
    return (f"{gib:,.0f}" if gib == int(gib) else f"{gib:g}") + " GiB"


def products(gap):
    """Every product of the current price list, as (what filters match, product doc). A
    product's family sits beside its attributes, yet filters on it like one. Bare-metal types
    are their own family, listed under shared and dedicated tenancy (upstream Karpenter asks
    for the dedicated one, jointer for the shared one)."""
    with gap.lock:
        prices = gap.prices
    names = sorted({t for r in prices.values() for t in r})
    info = gap.instance_type_info(names)
    out = []
    for region in sorted(prices):
        for itype in sorted(prices[region]):
            od = prices[region][itype].get("on_demand")
            if od is None:
                continue
            it = info.get(itype) or {}
            attrs = {
                "servicecode": "AmazonEC2", "servicename": "Amazon Elastic Compute Cloud",
                "location": LOCATIONS.get(region, region), "locationType": "AWS Region",
                "regionCode": region, "instanceType": itype,
                "instanceFamily": instance_family_name(itype), "currentGeneration": "Yes",
                "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                "capacitystatus": "Used", "licenseModel": "No License required",
                "marketoption": "OnDemand", "operation": "RunInstances",
                "usagetype": f"{USAGE_PREFIX.get(region, region.upper() + '-')}BoxUsage:{itype}",
                "processorArchitecture": "64-bit", "storage": "EBS only",
            }
            if it:
                attrs["vcpu"] = str(it["VCpuInfo"]["DefaultVCpus"])
                attrs["memory"] = fmt_gib(it["MemoryInfo"]["SizeInMiB"])
                archs = it.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
                attrs["physicalProcessor"] = ("AWS Graviton2 Processor" if "arm64" in archs
                                              else "Intel Xeon Platinum 8175")
                perf = it.get("NetworkInfo", {}).get("NetworkPerformance")
                if perf:
                    attrs["networkPerformance"] = perf
                gpus = it.get("GpuInfo", {}).get("Gpus") or []
                if gpus:
                    attrs["gpu"] = str(sum(g.get("Count", 0) for g in gpus))
            metal = itype.endswith(".metal")
            family = "Compute Instance (bare metal)" if metal else "Compute Instance"
            for tenancy in ("Shared", "Dedicated") if metal else ("Shared",):
                attrs = {**attrs, "tenancy": tenancy}
                doc = product_doc(sku_of(region, itype, tenancy), family, attrs, itype, od)
                out.append(({**attrs, "productFamily": family}, doc))
    return out


def product_doc(sku, family, attrs, itype, od):
    """A price-list entry as GetProducts returns it (one JSON document per product)."""
    term = "JRTCKXETXF"
    rate = f"{sku}.{term}.6YS6EN2CT7"
    return {
        "product": {"productFamily": family, "attributes": attrs, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {f"{sku}.{term}": {
            "priceDimensions": {rate: {
                "unit": "Hrs", "endRange": "Inf",
                "description": f"${od:g} per On Demand Linux {itype} Instance Hour",
                "appliesTo": [], "rateCode": rate, "beginRange": "0",
                "pricePerUnit": {"USD": f"{od:.10f}"},
            }},
            "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z",
            "offerTermCode": term, "termAttributes": {},
        }}},
        "version": "20261101000000", "publicationDate": "2026-11-01T00:00:00Z",
    }


def filter_matches(attrs, flt):
    field, value = flt.get("Field"), flt.get("Value", "")
    ftype = (flt.get("Type") or "TERM_MATCH").upper()
    actual = attrs.get(field)
    if field in ("ServiceCode", "serviceCode"):
        actual = "AmazonEC2"
    if actual is None:
        return ftype == "NONE_OF"
    if ftype in ("TERM_MATCH", "EQUALS"):
        return actual.lower() == value.lower()
    if ftype == "CONTAINS":
        return value.lower() in actual.lower()
    values = [v.strip().lower() for v in value.split(",")]
    if ftype == "ANY_OF":
        return actual.lower() in values
    if ftype == "NONE_OF":
        return actual.lower() not in values
    raise AwsError("InvalidParameterException", f"Unsupported filter type {ftype}.")


def handle_pricing(gap, call):
    body = call.json_body()
    if call.operation != "GetProducts":
        raise AwsError("UnknownOperationException", f"{call.operation} is not supported here.")
    if body.get("ServiceCode") != "AmazonEC2":
        return json_response({"FormatVersion": "aws_v1", "PriceList": []},
                             content_type="application/x-amz-json-1.1")
    filters = body.get("Filters") or []
    items = [doc for attrs, doc in products(gap) if all(filter_matches(attrs, f) for f in filters)]
    limit = int(body.get("MaxResults") or 100)
    if limit < 1 or limit > 100:
        raise AwsError("InvalidParameterException", "MaxResults must be between 1 and 100.")
    start = decode_token(body.get("NextToken"))
    out = {"FormatVersion": "aws_v1",
           "PriceList": [json.dumps(d) for d in items[start:start + limit]]}
    if start + limit < len(items):
        out["NextToken"] = encode_token(start + limit)
    return json_response(out, content_type="application/x-amz-json-1.1")


def handle_spot_price_history(gap, call):
    p = call.params
    types = set(as_list(p.get("InstanceType")))
    descs = set(as_list(p.get("ProductDescription")))
    zones = {p["AvailabilityZone"]} if p.get("AvailabilityZone") else set()
    for flt in as_list(p.get("Filter")):
        vals = set(as_list(flt.get("Value")))
        name = flt.get("Name")
        if name == "instance-type":
            types = types & vals if types else vals
        elif name == "availability-zone":
            zones = zones & vals if zones else vals
        elif name == "product-description":
            descs = descs & vals if descs else vals
    stamp = datetime.datetime.fromtimestamp(gap.prices_time, datetime.timezone.utc)
    if descs and not any(d.startswith("Linux/UNIX") for d in descs):
        items = []
    else:
        with gap.lock:
            region_prices = gap.prices.get(call.region, {})
            items = []
            for itype in sorted(region_prices):
                if types and itype not in types:
                    continue
                for zone, price in sorted((region_prices[itype].get("spot") or {}).items()):
                    if zones and zone not in zones:
                        continue
                    items.append((itype, zone, price))
    # The documented range is 1-1000, but EC2 takes larger page sizes without complaint and
    # upstream Karpenter asks for 2000: refuse only what EC2 refuses, serve 1000 at most.
    limit = int(p.get("MaxResults") or 1000)
    if limit < 1:
        raise AwsError("InvalidParameterValue", "MaxResults must be at least 1.")
    limit = min(limit, 1000)
    start = decode_token(p.get("NextToken"))
    chunk = items[start:start + limit]
    token = encode_token(start + limit) if start + limit < len(items) else None
    ts = stamp.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    xml = "<spotPriceHistorySet>" + "".join(
        f"<item>{x('instanceType', t)}{x('productDescription', 'Linux/UNIX')}"
        f"{x('spotPrice', f'{pr:.6f}')}{x('timestamp', ts)}{x('availabilityZone', z)}</item>"
        for t, z, pr in chunk) + "</spotPriceHistorySet>" + x("nextToken", token)
    return ec2_response("DescribeSpotPriceHistory", xml)


# ---- SSM ---------------------------------------------------------------------------------


def parse_public_parameter(name):
    """What a public AMI parameter name asks for: {family, variant, arch, k, leaf}, or None
    when AWS publishes no such parameter."""
    if m := AL2023_PARAM.match(name):
        spec = {"family": "al2023", "variant": m.group("variant"), "arch": m.group("arch")}
        if spec["variant"] == "neuron" and spec["arch"] != "x86_64":
            return None
        versions, releases = K8S_VERSIONS, (None, EKS_RELEASE)
    elif m := AL2_PARAM.match(name):
        suffix = m.group("suffix")
        spec = {"family": "al2", "variant": "gpu" if suffix == "-gpu" else "standard",
                "arch": "arm64" if suffix == "-arm64" else "x86_64"}
        versions, releases = AL2_VERSIONS, (None, EKS_RELEASE)
    elif m := BOTTLEROCKET_PARAM.match(name):
        spec = {"family": "bottlerocket", "variant": "nvidia" if m.group("nvidia") else "standard",
                "arch": m.group("arch")}
        versions, releases = K8S_VERSIONS, (None, BOTTLEROCKET_RELEASE)
    elif m := WINDOWS_PARAM.match(name):
        spec = {"family": "windows", "variant": m.group("year"), "arch": "x86_64"}
        versions, releases = K8S_VERSIONS, (None,)
    else:
        return None
    release = m.groupdict().get("release")
    if m.group("k") not in versions or release not in releases:
        return None
    return dict(spec, k=m.group("k"), leaf=m.group("leaf"))


def image_recipe(spec):
    """(name patterns of moto's built-in images that can stand for it, the name to register
    when none does, windows?) for a family's image."""
    family, variant, arch, k = spec["family"], spec["variant"], spec["arch"], spec["k"]
    if family == "al2023":
        builtin = ["al2023-ami-2023.*"] if variant == "standard" else []
        return builtin, f"amazon-eks-node-al2023-{arch}-{variant}-{k}-{EKS_RELEASE}", False
    if family == "al2":
        if variant == "gpu":
            return [], f"amazon-eks-gpu-node-{k}-{EKS_RELEASE}", False
        builtin = [f"amzn2-ami-kernel-5.10-hvm-*-{arch}-gp2", f"amzn2-ami-hvm-*-{arch}-gp2"]
        return builtin, f"amazon-eks{'-arm64' if arch == 'arm64' else ''}-node-{k}-{EKS_RELEASE}", False
    if family == "bottlerocket":
        nvidia = "-nvidia" if variant == "nvidia" else ""
        machine = "aarch64" if arch == "arm64" else "x86_64"
        return [], (f"bottlerocket-aws-k8s-{k}{nvidia}-{machine}-v{BOTTLEROCKET_RELEASE}-"
                    f"{BOTTLEROCKET_BUILD}"), False
    return [], f"Windows_Server-{variant}-English-Core-EKS_Optimized-{k}-{WINDOWS_RELEASE}", True


def images_named(ec2, pattern, arch):
    imgs = ec2.describe_images(Filters=[{"Name": "name", "Values": [pattern]},
                                        {"Name": "architecture", "Values": [arch]}])["Images"]
    return [i for i in imgs if i.get("Architecture") == arch]


def family_image(gap, region, spec):
    """(image id, name) of the moto image standing for a family's AMI: the newest built-in one
    of a fitting name, else the one registered under the family's name (found by name, so a
    restarted gap layer reuses what it registered before), else a new copy of a built-in image
    of that architecture (and platform: CopyImage keeps both; RegisterImage drops them)."""
    key = (region, spec["family"], spec["variant"], spec["arch"], spec["k"])
    with gap.lock:
        cached = gap.ami_cache.get(key)
    if cached:
        return cached
    builtin, name, windows = image_recipe(spec)
    arch = spec["arch"]
    ec2 = gap.client("ec2", region)
    with gap.image_lock:
        with gap.lock:
            cached = gap.ami_cache.get(key)
        if cached:
            return cached
        for pattern in builtin:
            imgs = images_named(ec2, pattern, arch)
            if imgs:
                best = max(imgs, key=lambda i: (i.get("Name", ""), i["ImageId"]))
                break
        else:
            # Of duplicates (another gap layer raced this one), the oldest, as every caller picks.
            found = sorted(images_named(ec2, name, arch),
                           key=lambda i: (str(i.get("CreationDate", "")), i["ImageId"]))
            best = found[0] if found else None
            if best is None:
                best = register_image(gap, ec2, region, name, arch, windows)
        result = (best["ImageId"], best.get("Name", ""))
        with gap.lock:
            gap.ami_cache[key] = result
    return result


def register_image(gap, ec2, region, name, arch, windows):
    if windows:
        sources = [i for i in ec2.describe_images(Filters=[
            {"Name": "platform", "Values": ["windows"]},
            {"Name": "architecture", "Values": [arch]}])["Images"] if i.get("Architecture") == arch]
        sources.sort(key=lambda i: ("EKS_Optimized" not in i.get("Name", ""), i["ImageId"]))
    else:
        sources = images_named(ec2, "al2023-ami-2023.*", arch) or [
            i for i in ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}])["Images"]
            if i.get("Architecture") == arch and not i.get("Platform")]
        sources.sort(key=lambda i: (i.get("Name", ""), i["ImageId"]), reverse=True)
    if not sources:
        raise AwsError("InternalServerError",
                       f"moto has no {arch}{' Windows' if windows else ''} image to copy as {name}", 500)
    image_id = ec2.copy_image(SourceImageId=sources[0]["ImageId"], SourceRegion=region, Name=name,
                              Description=f"{name} (stands for the EKS AMI in the test environment)"
                              )["ImageId"]
    log(f"registered image {image_id} {name} ({arch}) in {region}, a copy of {sources[0]['ImageId']}")
    return {"ImageId": image_id, "Name": name}


def public_parameter(gap, region, name):
    """The SSM parameter record of a public AMI parameter, or None when AWS has none such."""
    spec = parse_public_parameter(name)
    if spec is None:
        return None
    with gap.lock:
        override = gap.parameter_overrides.get(name)
        version, changed = gap.parameter_changes.get(name, (1, gap.prices_time))
    if override is not None:
        value = override
    else:
        image_id, image_name = family_image(gap, region, spec)
        k, leaf = spec["k"], spec["leaf"]
        release = f"{k}.0-{EKS_RELEASE[1:]}"
        values = {"/image_id": image_id, "/image_name": image_name, "/release_version": release,
                  "/image_version": f"{BOTTLEROCKET_RELEASE}-{BOTTLEROCKET_BUILD}"}
        if leaf:
            value = values[leaf]
        else:
            value = json.dumps({"image_id": image_id, "image_name": image_name,
                                "release_version": release}, separators=(",", ":"))
    return {
        "Name": name, "Type": "String", "Value": value, "Version": version,
        "LastModifiedDate": changed, "ARN": f"arn:aws:ssm:{region}::parameter{name}",
        "DataType": "text",
    }


def handle_ssm(gap, call):
    body = call.json_body()
    ctype = "application/x-amz-json-1.1"
    if call.operation == "GetParameter":
        name = body.get("Name") or ""
        param = public_parameter(gap, call.region, name)
        if param is None:
            if OWNED_PUBLIC_PARAM.match(name):
                raise AwsError("ParameterNotFound", "")
            return None
        return json_response({"Parameter": param}, content_type=ctype)
    names = body.get("Names") or []
    ours, others, invalid = [], [], []
    for n in names:
        p = public_parameter(gap, call.region, n)
        if p is not None:
            ours.append(p)
        elif OWNED_PUBLIC_PARAM.match(n):
            invalid.append(n)
        else:
            others.append(n)
    if not ours and not invalid:
        return None
    out = {"Parameters": ours, "InvalidParameters": invalid}
    if others:
        sub_body = dict(body, Names=others)
        sub = Call(call.method, call.raw_target, call.headers, json.dumps(sub_body).encode(),
                   call.region)
        resp = gap.forward(sub)
        if resp.status != 200:
            return resp
        moto_out = json.loads(resp.body)
        out["Parameters"] += moto_out.get("Parameters", [])
        out["InvalidParameters"] += moto_out.get("InvalidParameters", [])
    return json_response(out, content_type=ctype)


def set_parameter_override(gap, name, value):
    """Moves (or, value None, puts back) a public parameter: SSM bumps its Version."""
    with gap.lock:
        if value is None and name not in gap.parameter_overrides:
            return
        if value is None:
            gap.parameter_overrides.pop(name)
        else:
            gap.parameter_overrides[name] = value
        version, _ = gap.parameter_changes.get(name, (1, None))
        gap.parameter_changes[name] = (version + 1, time.time())


# ---- CreateFleet (instant) ---------------------------------------------------------------


def resolve_launch_template(gap, region, spec):
    ec2 = gap.client("ec2", region)
    version = spec.get("Version") or "$Default"
    kwargs = {"Versions": [version]}
    if spec.get("LaunchTemplateId"):
        kwargs["LaunchTemplateId"] = spec["LaunchTemplateId"]
    elif spec.get("LaunchTemplateName"):
        kwargs["LaunchTemplateName"] = spec["LaunchTemplateName"]
    else:
        raise AwsError("MissingParameter", "LaunchTemplateId or LaunchTemplateName is required.")
    versions = ec2.describe_launch_template_versions(**kwargs)["LaunchTemplateVersions"]
    if not versions:
        raise AwsError("InvalidLaunchTemplateId.VersionNotFound",
                       f"Could not find launch template version {version}.")
    return versions[0]


def tag_specs_for_instances(fleet_specs, lt_specs):
    """RunInstances TagSpecifications: the launch template's, then the fleet's on top."""
    merged = {}
    for specs in (lt_specs, fleet_specs):
        for spec in specs:
            rtype = spec.get("ResourceType")
            if rtype not in ("instance", "volume", "network-interface", "spot-instances-request"):
                continue
            tags = merged.setdefault(rtype, {})
            for t in spec.get("Tags") or []:
                tags[t["Key"]] = t.get("Value", "")
    return [{"ResourceType": r, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            for r, tags in merged.items() if tags]


def run_args(lt_data, override, subnet_id, lifecycle, tag_specs):
    args = {"MinCount": 1, "MaxCount": 1,
            "ImageId": override.get("ImageId") or lt_data.get("ImageId"),
            "InstanceType": override.get("InstanceType") or lt_data.get("InstanceType")}
    nics = lt_data.get("NetworkInterfaces") or []
    if nics:
        nic = {k: v for k, v in nics[0].items()
               if k in ("AssociatePublicIpAddress", "DeleteOnTermination", "Description",
                        "DeviceIndex", "Groups", "InterfaceType", "NetworkCardIndex")}
        nic.setdefault("DeviceIndex", 0)
        if subnet_id or nics[0].get("SubnetId"):
            nic["SubnetId"] = subnet_id or nics[0]["SubnetId"]
        if not nic.get("Groups") and lt_data.get("SecurityGroupIds"):
            nic["Groups"] = lt_data["SecurityGroupIds"]
        args["NetworkInterfaces"] = [nic]
    else:
        if subnet_id:
            args["SubnetId"] = subnet_id
        if lt_data.get("SecurityGroupIds"):
            args["SecurityGroupIds"] = lt_data["SecurityGroupIds"]
        elif lt_data.get("SecurityGroups"):
            args["SecurityGroups"] = lt_data["SecurityGroups"]
    if not subnet_id and override.get("AvailabilityZone"):
        args["Placement"] = {"AvailabilityZone": override["AvailabilityZone"]}
    if lt_data.get("IamInstanceProfile"):
        args["IamInstanceProfile"] = {k: v for k, v in lt_data["IamInstanceProfile"].items()
                                      if k in ("Arn", "Name")}
    if lt_data.get("MetadataOptions"):
        args["MetadataOptions"] = {k: v for k, v in lt_data["MetadataOptions"].items()
                                   if k in ("HttpTokens", "HttpPutResponseHopLimit", "HttpEndpoint",
                                            "HttpProtocolIpv6", "InstanceMetadataTags")}
    if lt_data.get("UserData"):
        args["UserData"] = base64.b64decode(lt_data["UserData"])
    if lt_data.get("BlockDeviceMappings"):
        args["BlockDeviceMappings"] = lt_data["BlockDeviceMappings"]
    if lt_data.get("KeyName"):
        args["KeyName"] = lt_data["KeyName"]
    if lt_data.get("Monitoring"):
        args["Monitoring"] = {"Enabled": bool(lt_data["Monitoring"].get("Enabled"))}
    if lifecycle == "spot":
        spot = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        if override.get("MaxPrice"):
            spot["MaxPrice"] = override["MaxPrice"]
        args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    if tag_specs:
        args["TagSpecifications"] = tag_specs
    return args


def overrides_xml(cand):
    spec = cand["lt_spec"]
    ov = cand["override"]
    lt = (x("launchTemplateId", cand["lt_id"]) if cand.get("lt_id")
          else x("launchTemplateName", spec.get("LaunchTemplateName")))
    lt += x("version", spec.get("Version") or "$Default")
    o = (x("instanceType", cand["instance_type"]) + x("maxPrice", ov.get("MaxPrice"))
         + x("subnetId", ov.get("SubnetId")) + x("availabilityZone", cand["zone"])
         + x("weightedCapacity", ov.get("WeightedCapacity")) + x("priority", ov.get("Priority"))
         + x("imageId", ov.get("ImageId")))
    return (f"<launchTemplateAndOverrides><launchTemplateSpecification>{lt}"
            f"</launchTemplateSpecification><overrides>{o}</overrides></launchTemplateAndOverrides>")


def handle_create_fleet(gap, call):
    """CreateFleet (instant), idempotent by ClientToken as EC2 is: the SDKs fill the token in
    and resend it on retry, so a retry after a lost answer must get the same fleet, not a
    second instance. A token reused with other parameters is refused; an answer that launched
    nothing is not kept, so its retry tries again."""
    p = call.params
    if (p.get("Type") or "maintain") != "instant":
        return None
    token = p.get("ClientToken")
    if not token:
        return launch_fleet(gap, call)
    request = json.dumps({k: v for k, v in p.items() if k != "ClientToken"}, sort_keys=True, default=str)
    with gap.lock:
        entry = gap.fleet_tokens.get((call.region, token))
        first = entry is None
        if first:
            entry = {"request": request, "done": threading.Event(), "response": None}
            gap.fleet_tokens[(call.region, token)] = entry
    if entry["request"] != request:
        raise AwsError("IdempotentParameterMismatch",
                       f"The client token {token} was used before with different parameters.")
    if not first:
        entry["done"].wait()  # the first request with this token is still being answered
        if entry["response"] is not None:
            log(f"CreateFleet token {token}: answered again with the fleet it launched")
            return entry["response"]
        return handle_create_fleet(gap, call)
    try:
        resp = launch_fleet(gap, call)
        if b"<instanceIds><item>" in resp.body:
            entry["response"] = resp
    finally:
        with gap.lock:
            if entry["response"] is None:
                gap.fleet_tokens.pop((call.region, token), None)
        entry["done"].set()
    return resp


def launch_fleet(gap, call):
    p = call.params
    region = call.region
    if str(p.get("DryRun", "")).lower() == "true":
        raise AwsError("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)
    tcs = p.get("TargetCapacitySpecification") or {}
    try:
        total = int(tcs.get("TotalTargetCapacity"))
    except (TypeError, ValueError):
        raise AwsError("MissingParameter",
                       "The request must contain the parameter TargetCapacitySpecification.TotalTargetCapacity")
    default_type = tcs.get("DefaultTargetCapacityType") or "on-demand"
    if default_type not in ("spot", "on-demand"):
        raise AwsError("InvalidParameterValue",
                       f"DefaultTargetCapacityType {default_type} is not supported by the test environment.")
    want = {"on-demand": int(tcs.get("OnDemandTargetCapacity") or 0),
            "spot": int(tcs.get("SpotTargetCapacity") or 0)}
    want[default_type] += max(0, total - want["on-demand"] - want["spot"])
    fleet_tags = []
    for spec in as_list(p.get("TagSpecification")) + as_list(p.get("TagSpecifications")):
        fleet_tags.append({"ResourceType": spec.get("ResourceType"),
                           "Tags": as_list(spec.get("Tag")) + as_list(spec.get("Tags"))})
    configs = as_list(p.get("LaunchTemplateConfigs"))
    if not configs:
        raise AwsError("MissingParameter", "The request must contain the parameter LaunchTemplateConfigs")

    ec2 = gap.client("ec2", region)
    errors = []  # (candidate, lifecycle, code, message)
    candidates = []
    for ci, cfg in enumerate(configs):
        spec = cfg.get("LaunchTemplateSpecification") or {}
        overrides = as_list(cfg.get("Overrides")) or [{}]
        try:
            ltv = resolve_launch_template(gap, region, spec)
            lt_err = None
        except botocore.exceptions.ClientError as e:
            ltv, lt_err = None, (e.response["Error"]["Code"], e.response["Error"]["Message"])
        except AwsError as e:
            ltv, lt_err = None, (e.code, e.message)
        for oi, ov in enumerate(overrides):
            data = (ltv or {}).get("LaunchTemplateData", {})
            cand = {"index": (ci, oi), "lt_spec": spec, "override": ov,
                    "lt_id": (ltv or {}).get("LaunchTemplateId") or spec.get("LaunchTemplateId"),
                    "lt_data": data,
                    "instance_type": ov.get("InstanceType") or data.get("InstanceType"),
                    "subnet": ov.get("SubnetId") or
                    ((data.get("NetworkInterfaces") or [{}])[0].get("SubnetId")),
                    "zone": ov.get("AvailabilityZone")}
            if lt_err:
                for lifecycle in (lc for lc in want if want[lc]):
                    errors.append((cand, lifecycle) + lt_err)
                continue
            candidates.append(cand)
    subnet_ids = sorted({c["subnet"] for c in candidates if c["subnet"]})
    subnet_zone = {}
    for sid in subnet_ids:
        try:
            for s in ec2.describe_subnets(SubnetIds=[sid])["Subnets"]:
                subnet_zone[s["SubnetId"]] = s["AvailabilityZone"]
        except botocore.exceptions.ClientError:
            pass
    with gap.lock:
        prices = gap.prices.get(region, {})
    for c in candidates:
        if c["subnet"] and not c["zone"]:
            c["zone"] = subnet_zone.get(c["subnet"])
        if not c["zone"]:
            c["zone"] = ((c["lt_data"].get("Placement") or {}).get("AvailabilityZone"))
        entry = prices.get(c["instance_type"]) or {}
        spot = entry.get("spot") or {}
        c["price"] = {"on-demand": entry.get("on_demand"),
                      "spot": spot.get(c["zone"]) if c["zone"] else (min(spot.values()) if spot else None)}
    type_info = gap.instance_type_info(sorted({c["instance_type"] for c in candidates if c["instance_type"]}))

    launched = {}  # (override index, lifecycle) -> (candidate, lifecycle, [instance ids])
    for lifecycle in ("on-demand", "spot"):
        need = want[lifecycle]
        if need <= 0:
            continue
        if lifecycle == "spot":
            strategy = (p.get("SpotOptions") or {}).get("AllocationStrategy") or "lowest-price"
        else:
            strategy = (p.get("OnDemandOptions") or {}).get("AllocationStrategy") or "lowest-price"
        inf = float("inf")

        def price_of(c):
            pr = c["price"][lifecycle]
            return pr if pr is not None else inf

        def prio(c):
            try:
                return float(c["override"].get("Priority"))
            except (TypeError, ValueError):
                return inf

        if strategy in ("prioritized", "capacity-optimized-prioritized"):
            order = sorted(candidates, key=lambda c: (prio(c), price_of(c), c["index"]))
        else:
            order = sorted(candidates, key=lambda c: (price_of(c), c["index"]))
        usable = []
        for c in order:
            ov = c["override"]
            if lifecycle == "spot" and ov.get("MaxPrice") and c["price"]["spot"] is not None \
                    and float(ov["MaxPrice"]) < c["price"]["spot"]:
                errors.append((c, lifecycle, "SpotMaxPriceTooLow",
                               f"Your Spot request price of {ov['MaxPrice']} is lower than the minimum "
                               f"required Spot request fulfillment price of {c['price']['spot']:.6f}."))
                continue
            usable.append(c)
        per_pool = strategy == "diversified"
        pools = list(usable)
        while need > 0 and pools:
            progressed = False
            for c in list(pools):
                if need <= 0:
                    break
                if gap.ice_hit(c["instance_type"], c["zone"], lifecycle):
                    errors.append((c, lifecycle, "InsufficientInstanceCapacity",
                                   f"We currently do not have sufficient {c['instance_type']} capacity "
                                   f"in the Availability Zone you requested ({c['zone']}). Our system will "
                                   f"be working on provisioning additional capacity. You can currently get "
                                   f"{c['instance_type']} capacity by not specifying an Availability Zone "
                                   f"in your request or choosing other Availability Zones."))
                    pools.remove(c)
                    continue
                # Checking a reservation's room and launching into it is one step: concurrent
                # fleets must not both take its last slot.
                with gap.reservation_lock if targeted_reservation(c) else contextlib.nullcontext():
                    err = arch_mismatch(gap, region, c, type_info) or reservation_refusal(gap, region, c)
                    ids, failed = [], None
                    if not err:
                        ids, failed = launch(ec2, c, lifecycle, fleet_tags,
                                             1 if per_pool or targeted_reservation(c) else need)
                        if ids and targeted_reservation(c):
                            with gap.lock:
                                for i in ids:
                                    gap.reserved_instances[i] = targeted_reservation(c)
                if err:
                    errors.append((c, lifecycle) + err)
                    pools.remove(c)
                    continue
                if ids:
                    launched.setdefault((c["index"], lifecycle), (c, lifecycle, []))[2].extend(ids)
                    need -= len(ids)
                    progressed = True
                if failed:
                    errors.append((c, lifecycle) + failed)
                    pools.remove(c)
            if not progressed:
                break
        if need > 0 and not any(e[1] == lifecycle for e in errors) and not usable:
            errors.append(({"lt_spec": {}, "override": {}, "instance_type": None, "zone": None,
                            "lt_id": None}, lifecycle, "UnfulfillableCapacity",
                           "There is no Spot capacity available that matches your request."
                           if lifecycle == "spot" else "No capacity matches the request."))

    fleet_id = f"fleet-{uuid.uuid4()}"
    err_xml = "".join(
        f"<item>{overrides_xml(c)}{x('lifecycle', lc)}{x('errorCode', code)}{x('errorMessage', msg)}</item>"
        for c, lc, code, msg in errors)
    inst_xml = "".join(
        f"<item>{overrides_xml(c)}{x('lifecycle', lc)}<instanceIds>"
        + "".join(x("item", i) for i in ids)
        + f"</instanceIds>{x('instanceType', c['instance_type'])}</item>"
        for c, lc, ids in launched.values())
    log(f"CreateFleet {fleet_id} (token {p.get('ClientToken') or '-'}): launched "
        + (", ".join(f"{c['instance_type']}/{c['zone']}/{lc} {' '.join(ids)}" for c, lc, ids in launched.values()) or "nothing")
        + ("; errors " + ", ".join(f"{c['instance_type']}/{c['zone']}/{lc}:{code}"
                                    for c, lc, code, _ in errors) if errors else ""))
    return ec2_response("CreateFleet", f"<fleetId>{fleet_id}</fleetId><errorSet>{err_xml}</errorSet>"
                                       f"<fleetInstanceSet>{inst_xml}</fleetInstanceSet>")


def launch(ec2, cand, lifecycle, fleet_tags, count):
    """RunInstances `count` times for one candidate: (instance ids, first error or None)."""
    args = run_args(cand["lt_data"], cand["override"], cand["subnet"], lifecycle,
                    tag_specs_for_instances(fleet_tags, cand["lt_data"].get("TagSpecifications") or []))
    # EC2 reports an instance's security groups as its primary interface's; moto reports only
    # those given outside NetworkInterfaces (none, when the template names them on the
    # interface, as upstream Karpenter's do, which then sees every node as drifted).
    interface_groups = (args.get("NetworkInterfaces") or [{}])[0].get("Groups")
    ids = []
    for _ in range(count):
        try:
            r = ec2.run_instances(**args)
            ids.append(r["Instances"][0]["InstanceId"])
            if interface_groups:
                ec2.modify_instance_attribute(InstanceId=ids[-1], Groups=interface_groups)
        except botocore.exceptions.ClientError as e:
            return ids, (e.response["Error"]["Code"], e.response["Error"]["Message"])
    return ids, None


def targeted_reservation(cand):
    spec = cand["lt_data"].get("CapacityReservationSpecification") or {}
    return (spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId")


def reservation_refusal(gap, region, cand):
    """Why EC2 would not launch this candidate into the reservation its template targets."""
    rid = targeted_reservation(cand)
    if not rid:
        return None
    with gap.lock:
        r = gap.reservations.get(region, {}).get(rid)
    if r is None or r["state"] != "active":
        return ("InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{rid}' does not exist or is not active.")
    if r["instanceType"] != cand["instance_type"] or r["availabilityZone"] != cand["zone"]:
        return ("InvalidParameterValue",
                f"The instance type and Availability Zone ({cand['instance_type']}, {cand['zone']}) "
                f"do not match those of capacity reservation {rid} "
                f"({r['instanceType']}, {r['availabilityZone']}).")
    if available_in(gap, region, r) < 1:
        return ("ReservationCapacityExceeded",
                "The requested number of instances exceeds the capacity available in the "
                f"targeted Capacity Reservation {rid}.")
    return None


def available_in(gap, region, r):
    with gap.lock:
        ids = [i for i, rid in gap.reserved_instances.items() if rid == r["capacityReservationId"]]
    used = 0
    if ids:
        ec2 = gap.client("ec2", region)
        for res in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
            for inst in res["Instances"]:
                if inst["State"]["Name"] not in ("terminated", "shutting-down"):
                    used += 1
    return max(0, r["totalInstanceCount"] - used)


# ---- capacity reservations ---------------------------------------------------------------


def handle_create_capacity_reservation(gap, call):
    p = call.params
    for required in ("InstanceType", "InstancePlatform", "InstanceCount"):
        if not p.get(required):
            raise AwsError("MissingParameter", f"The request must contain the parameter {required}")
    zone = p.get("AvailabilityZone")
    if not zone:
        raise AwsError("MissingParameter", "The request must contain the parameter AvailabilityZone")
    tags = {}
    for spec in as_list(p.get("TagSpecifications")) + as_list(p.get("TagSpecification")):
        for t in as_list(spec.get("Tag")) + as_list(spec.get("Tags")):
            tags[t["Key"]] = t.get("Value", "")
    rid = "cr-" + uuid.uuid4().hex[:17]
    r = {"capacityReservationId": rid, "ownerId": ACCOUNT,
         "capacityReservationArn": f"arn:aws:ec2:{call.region}:{ACCOUNT}:capacity-reservation/{rid}",
         "availabilityZone": zone, "instanceType": p["InstanceType"],
         "instancePlatform": p["InstancePlatform"], "totalInstanceCount": int(p["InstanceCount"]),
         "state": "active", "instanceMatchCriteria": p.get("InstanceMatchCriteria") or "open",
         "endDateType": p.get("EndDateType") or "unlimited", "endDate": p.get("EndDate"),
         "reservationType": "default", "tags": tags}
    with gap.lock:
        gap.reservations.setdefault(call.region, {})[rid] = r
    return ec2_response("CreateCapacityReservation",
                        f"<capacityReservation>{reservation_xml(gap, call.region, r)}</capacityReservation>")


def reservation_xml(gap, region, r):
    keys = ("capacityReservationId", "ownerId", "capacityReservationArn", "availabilityZone",
            "instanceType", "instancePlatform", "totalInstanceCount", "state",
            "instanceMatchCriteria", "endDateType", "endDate", "reservationType")
    body = "".join(x(k, r[k]) for k in keys)
    body += x("availableInstanceCount", available_in(gap, region, r))
    body += "<tagSet>" + "".join(f"<item>{x('key', k)}{x('value', v)}</item>"
                                 for k, v in sorted(r["tags"].items())) + "</tagSet>"
    return body


def handle_describe_capacity_reservations(gap, call):
    p = call.params
    ids = set(as_list(p.get("CapacityReservationId")))
    with gap.lock:
        known = dict(gap.reservations.get(call.region, {}))
    missing = sorted(i for i in ids if i not in known)
    if missing:
        raise AwsError("InvalidCapacityReservationId.NotFound",
                       f"The capacity reservation ID '{missing[0]}' does not exist.")
    def keep(r):
        if ids and r["capacityReservationId"] not in ids:
            return False
        for flt in as_list(p.get("Filter")):
            name, vals = flt.get("Name", ""), set(as_list(flt.get("Value")))
            if name.startswith("tag:"):
                ok = r["tags"].get(name[4:]) in vals
            elif name == "tag-key":
                ok = bool(vals & set(r["tags"]))
            else:
                field = {"owner-id": "ownerId", "state": "state", "instance-type": "instanceType",
                         "availability-zone": "availabilityZone",
                         "instance-match-criteria": "instanceMatchCriteria"}.get(name)
                if field is None:
                    raise AwsError("InvalidParameterValue", f"The filter '{name}' is invalid")
                ok = str(r[field]) in vals
            if not ok:
                return False
        return True
    items = [r for _, r in sorted(known.items()) if keep(r)]
    limit = int(p.get("MaxResults") or 1000)
    start = decode_token(p.get("NextToken"))
    chunk = items[start:start + limit]
    token = encode_token(start + limit) if start + limit < len(items) else None
    xml = ("<capacityReservationSet>"
           + "".join(f"<item>{reservation_xml(gap, call.region, r)}</item>" for r in chunk)
           + "</capacityReservationSet>" + x("nextToken", token))
    return ec2_response("DescribeCapacityReservations", xml)


def handle_cancel_capacity_reservation(gap, call):
    rid = call.params.get("CapacityReservationId")
    with gap.lock:
        r = gap.reservations.get(call.region, {}).get(rid)
        if r is None:
            raise AwsError("InvalidCapacityReservationId.NotFound",
                           f"The capacity reservation ID '{rid}' does not exist.")
        r["state"] = "cancelled"
    return ec2_response("CancelCapacityReservation", x("return", "true"))


def arch_mismatch(gap, region, cand, type_info):
    image = cand["override"].get("ImageId") or cand["lt_data"].get("ImageId")
    info = type_info.get(cand["instance_type"])
    if not image or not info:
        return None
    arch = gap.image_architecture(region, image)
    supported = info.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
    if arch and supported and arch not in supported:
        return ("InvalidParameterValue",
                f"The architecture '{supported[0]}' of the specified instance type does not match "
                f"the architecture '{arch}' of the specified AMI. Specify an instance type and an "
                f"AMI that have matching architectures, and try again.")
    return None


# ---- ECR, backed by the local registry ---------------------------------------------------
#
# moto keeps the repositories (create, describe, policies, tags, ...); the images are what the
# real registry (distribution, on 127.0.0.1) holds in the repository of the same name, where
# clients push with GetAuthorizationToken's credentials. The gap layer reads and deletes them
# through the registry's HTTP API with those credentials, and reads the push times (which the
# API does not give) and the untagged manifests (which it cannot list) from its storage.

ECR_TARGET = "AmazonEC2ContainerRegistry_V20150921."
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = [
    OCI_INDEX, "application/vnd.oci.image.manifest.v1+json", DOCKER_LIST,
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
]
ACCESS_LOG_LINE = re.compile(
    r'^(?P<host>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<path>\S+) '
    r'[^"]*" (?P<status>\d{3}) (?P<bytes>\d+|-)(?: "(?P<referer>[^"]*)" "(?P<ua>[^"]*)")?')
GAP_USER_AGENT = "jointer-gap/1"
AUTH_TOKEN_HOURS = 12


class Registry:
    """The local registry, as the gap layer reaches it: HTTP API with the registry's
    credentials, and its storage directory (filesystem driver)."""

    def __init__(self, url, password_file, storage, access_log):
        split = urlsplit(url)
        self.url, self.host, self.port = url.rstrip("/"), split.hostname, split.port
        self.password_file, self.storage, self.access_log = password_file, storage, access_log
        self.log_offset = 0  # where the access log stood at the last reset

    def password(self):
        with open(self.password_file, encoding="utf-8") as f:
            return f.read().strip()

    def request(self, method, path, headers=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            auth = base64.b64encode(f"AWS:{self.password()}".encode()).decode()
            conn.request(method, path, headers={
                "Authorization": f"Basic {auth}", "User-Agent": GAP_USER_AGENT, **(headers or {})})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        except OSError as e:
            raise AwsError("ServerException", f"the local registry is not reachable: {e}", 500)
        finally:
            conn.close()

    def repo_dir(self, repo):
        return os.path.join(self.storage, "docker", "registry", "v2", "repositories", repo)

    def manifest(self, repo, ref):
        """(digest, media type, body) of a manifest, or None when the registry has none."""
        status, headers, body = self.request(
            "GET", f"/v2/{repo}/manifests/{ref}", {"Accept": ", ".join(MANIFEST_TYPES)})
        if status == 404:
            return None
        if status != 200:
            raise AwsError("ServerException", f"registry GET manifest {repo}:{ref}: {status}", 500)
        digest = headers.get("docker-content-digest") or "sha256:" + hashlib.sha256(body).hexdigest()
        return digest, headers.get("content-type", "").split(";")[0], body

    def tags(self, repo):
        out, path = [], f"/v2/{repo}/tags/list"
        while path:
            status, headers, body = self.request("GET", path)
            if status == 404:
                return out
            if status != 200:
                raise AwsError("ServerException", f"registry GET tags {repo}: {status}", 500)
            out += json.loads(body).get("tags") or []
            m = re.match(r"<([^>]+)>", headers.get("link", ""))
            path = m.group(1) if m else None
        return out

    def revisions(self, repo):
        """digest -> push time of every manifest the repository holds (tagged or not)."""
        base = os.path.join(self.repo_dir(repo), "_manifests", "revisions")
        out = {}
        with contextlib.suppress(FileNotFoundError):
            for algo in os.listdir(base):
                for hexd in os.listdir(os.path.join(base, algo)):
                    link = os.path.join(base, algo, hexd, "link")
                    with contextlib.suppress(FileNotFoundError):
                        out[f"{algo}:{hexd}"] = os.stat(link).st_mtime
        return out

    def delete_manifest(self, repo, ref):
        status, _, body = self.request("DELETE", f"/v2/{repo}/manifests/{ref}")
        if status not in (202, 404):
            raise AwsError("ServerException", f"registry DELETE {repo}:{ref}: {status} {body[:200]!r}", 500)
        return status == 202

    def mark(self):
        """The request log starts here."""
        with contextlib.suppress(FileNotFoundError):
            self.log_offset = os.path.getsize(self.access_log)

    def wipe(self):
        """Empties the storage (a reset): the registry has no cache, so it sees this at once."""
        shutil.rmtree(os.path.join(self.storage, "docker"), ignore_errors=True)
        self.mark()

    def remove_repository(self, repo):
        shutil.rmtree(self.repo_dir(repo), ignore_errors=True)

    def requests_since_reset(self, everything=False):
        """The access log's requests since the last reset or DELETE /_gap/registry/requests."""
        out = []
        with contextlib.suppress(FileNotFoundError):
            with open(self.access_log, "rb") as f:
                f.seek(self.log_offset)
                data = f.read()
            for raw in data.decode("utf-8", "replace").splitlines():
                m = ACCESS_LOG_LINE.match(raw)
                if not m:
                    continue
                ua = m.group("ua") or ""
                if not everything and ua.startswith(GAP_USER_AGENT):
                    continue
                try:
                    t = datetime.datetime.strptime(m.group("time"), "%d/%b/%Y:%H:%M:%S %z").timestamp()
                except ValueError:
                    t = None
                b = m.group("bytes")
                out.append({"method": m.group("method"), "path": m.group("path"),
                            "status": int(m.group("status")), "bytes": 0 if b == "-" else int(b),
                            "user_agent": ua, "t": t})
        return out


def image_size(registry, repo, media_type, body, depth=0):
    """ECR's imageSizeInBytes: the layers' (compressed) sizes; an index's, its images'."""
    try:
        doc = json.loads(body)
    except ValueError:
        return len(body)
    if media_type in (OCI_INDEX, DOCKER_LIST) or "manifests" in doc:
        total = 0
        for d in doc.get("manifests") or []:
            child = registry.manifest(repo, d.get("digest")) if depth < 2 else None
            total += image_size(registry, repo, child[1], child[2], depth + 1) if child else int(d.get("size") or 0)
        return total
    return sum(int(layer.get("size") or 0) for layer in doc.get("layers") or [])


def ecr_repository(gap, call, body):
    """moto's record of the call's repository (RepositoryNotFoundException as ECR answers)."""
    kw = {"repositoryNames": [body.get("repositoryName") or ""]}
    if body.get("registryId"):
        kw["registryId"] = body["registryId"]
    return gap.client("ecr", call.region).describe_repositories(**kw)["repositories"][0]


def ecr_images(gap, repo):
    """Every image the registry holds in the repository: digest -> details."""
    reg = gap.registry
    pushed = reg.revisions(repo)
    images = {}
    for tag in reg.tags(repo):
        m = reg.manifest(repo, tag)
        if m is None:
            continue
        digest = m[0]
        img = images.get(digest)
        if img is None:
            img = images[digest] = {"digest": digest, "tags": [], "mediaType": m[1], "body": m[2]}
        img["tags"].append(tag)
    for digest in pushed:
        if digest not in images:
            m = reg.manifest(repo, digest)
            if m is not None:
                images[digest] = {"digest": digest, "tags": [], "mediaType": m[1], "body": m[2]}
    for img in images.values():
        img["pushedAt"] = pushed.get(img["digest"], time.time())
        img["tags"].sort()
    return images


def image_id_text(image_id):
    return (f"{{imageDigest:'{image_id.get('imageDigest') or 'null'}', "
            f"imageTag:'{image_id.get('imageTag') or 'null'}'}}")


def find_image(images, image_id):
    """(image, failure code) of one imageId."""
    digest, tag = image_id.get("imageDigest"), image_id.get("imageTag")
    if not digest and not tag:
        return None, "MissingDigestAndTag"
    by_tag = next((i for i in images.values() if tag in i["tags"]), None) if tag else None
    if digest:
        img = images.get(digest)
        if img and tag and by_tag is not img:
            return None, "ImageTagDoesNotMatchDigest"
        return img, (None if img else "ImageNotFound")
    return by_tag, (None if by_tag else "ImageNotFound")


FAILURE_REASONS = {
    "ImageNotFound": "Requested image not found",
    "MissingDigestAndTag": "Invalid request parameters: both tag and digest cannot be null",
    "ImageTagDoesNotMatchDigest": "Invalid image tag for the specified image digest",
    "UnsupportedImageType": "Unsupported image type",
}


def image_detail(repo_rec, repo, img, gap):
    d = {
        "registryId": repo_rec["registryId"], "repositoryName": repo,
        "imageDigest": img["digest"],
        "imageSizeInBytes": image_size(gap.registry, repo, img["mediaType"], img["body"]),
        "imagePushedAt": round(img["pushedAt"], 3), "imageManifestMediaType": img["mediaType"],
    }
    if img["tags"]:
        d["imageTags"] = list(img["tags"])
    with contextlib.suppress(ValueError, AttributeError):
        cfg = (json.loads(img["body"]).get("config") or {}).get("mediaType")
        if cfg:
            d["artifactMediaType"] = cfg
    return d


def handle_ecr(gap, call):
    op = call.operation
    if op == "GetAuthorizationToken":
        return ecr_authorization_token(gap, call)
    if op not in ("DescribeImages", "BatchGetImage", "BatchDeleteImage", "ListImages",
                  "DeleteRepository", "DescribeRepositories"):
        return None
    body = call.json_body()
    ctype = call.header("Content-Type") or "application/x-amz-json-1.1"
    if op == "DescribeRepositories":
        return ecr_describe_repositories(gap, call, body, ctype)
    repo = body.get("repositoryName") or ""
    repo_rec = ecr_repository(gap, call, body)
    if op == "DeleteRepository":
        images = ecr_images(gap, repo)
        if images and not body.get("force"):
            raise AwsError("RepositoryNotEmptyException",
                           f"The repository with name '{repo}' in registry with id "
                           f"'{repo_rec['registryId']}' cannot be deleted because it still contains images")
        resp = gap.forward(call)
        if resp.status == 200:
            for digest in images:
                gap.registry.delete_manifest(repo, digest)
            gap.registry.remove_repository(repo)
        return resp
    images = ecr_images(gap, repo)
    if op == "DescribeImages":
        ids = body.get("imageIds")
        if ids:
            if body.get("maxResults") or body.get("nextToken"):
                raise AwsError("InvalidParameterException",
                               "Invalid parameter at 'maxResults' or 'nextToken': cannot be used with imageIds")
            found = []
            for image_id in ids:
                img, _ = find_image(images, image_id)
                if img is None:
                    raise AwsError("ImageNotFoundException",
                                   f"The image with imageId {image_id_text(image_id)} does not exist within "
                                   f"the repository with name '{repo}' in the registry with id "
                                   f"'{repo_rec['registryId']}'")
                if img not in found:
                    found.append(img)
            return json_response({"imageDetails": [image_detail(repo_rec, repo, i, gap) for i in found]},
                                 content_type=ctype)
        status = ((body.get("filter") or {}).get("tagStatus") or "ANY").upper()
        listed = sorted(images.values(), key=lambda i: (i["pushedAt"], i["digest"]))
        if status == "TAGGED":
            listed = [i for i in listed if i["tags"]]
        elif status == "UNTAGGED":
            listed = [i for i in listed if not i["tags"]]
        chunk, token = ecr_page(body, listed, 100, 1000)
        out = {"imageDetails": [image_detail(repo_rec, repo, i, gap) for i in chunk]}
        if token:
            out["nextToken"] = token
        return json_response(out, content_type=ctype)
    if op == "ListImages":
        status = ((body.get("filter") or {}).get("tagStatus") or "ANY").upper()
        ids = []
        for img in sorted(images.values(), key=lambda i: (i["pushedAt"], i["digest"])):
            if img["tags"] and status in ("ANY", "TAGGED"):
                ids += [{"imageDigest": img["digest"], "imageTag": t} for t in img["tags"]]
            elif not img["tags"] and status in ("ANY", "UNTAGGED"):
                ids.append({"imageDigest": img["digest"]})
        chunk, token = ecr_page(body, ids, 100, 1000)
        out = {"imageIds": chunk}
        if token:
            out["nextToken"] = token
        return json_response(out, content_type=ctype)
    ids = body.get("imageIds") or []
    done, failures = [], []
    if op == "BatchGetImage":
        accepted = body.get("acceptedMediaTypes") or [
            "application/vnd.docker.distribution.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.v2+json",
            "application/vnd.oci.image.manifest.v1+json"]
        for image_id in ids:
            img, code = find_image(images, image_id)
            if img is not None and img["mediaType"] not in accepted:
                img, code = None, "UnsupportedImageType"
            if img is None:
                failures.append({"imageId": image_id, "failureCode": code,
                                 "failureReason": FAILURE_REASONS[code]})
                continue
            done.append({
                "registryId": repo_rec["registryId"], "repositoryName": repo,
                "imageId": {"imageDigest": img["digest"],
                            **({"imageTag": image_id["imageTag"]} if image_id.get("imageTag") else {})},
                "imageManifest": img["body"].decode("utf-8"),
                "imageManifestMediaType": img["mediaType"]})
        return json_response({"images": done, "failures": failures}, content_type=ctype)
    # BatchDeleteImage: by digest deletes the image with its tags; by tag removes the tag,
    # and the image with it when that was its last tag (as ECR does).
    for image_id in ids:
        img, code = find_image(images, image_id)
        if img is None:
            failures.append({"imageId": image_id, "failureCode": code,
                             "failureReason": FAILURE_REASONS[code]})
            continue
        tag = image_id.get("imageTag")
        if tag and not image_id.get("imageDigest"):
            gap.registry.delete_manifest(repo, tag)
            img["tags"].remove(tag)
            if not img["tags"]:
                gap.registry.delete_manifest(repo, img["digest"])
                images.pop(img["digest"], None)
            done.append({"imageDigest": img["digest"], "imageTag": tag})
        else:
            gap.registry.delete_manifest(repo, img["digest"])
            images.pop(img["digest"], None)
            done += [{"imageDigest": img["digest"], "imageTag": t} for t in img["tags"]] or \
                [{"imageDigest": img["digest"]}]
    return json_response({"imageIds": done, "failures": failures}, content_type=ctype)


def ecr_page(body, items, default, max_allowed):
    limit = body.get("maxResults") or default
    if not isinstance(limit, int) or limit < 1 or limit > max_allowed:
        raise AwsError("InvalidParameterException",
                       f"Invalid parameter at 'maxResults' failed to satisfy constraint: "
                       f"'Member must have value between 1 and {max_allowed}'")
    start = decode_token(body.get("nextToken"))
    chunk = items[start:start + limit]
    return chunk, (encode_token(start + limit) if start + limit < len(items) else None)


def ecr_describe_repositories(gap, call, body, ctype):
    """moto's answer, paged (moto ignores maxResults and nextToken)."""
    if not body.get("maxResults") and not body.get("nextToken"):
        return None
    if body.get("repositoryNames"):
        raise AwsError("InvalidParameterException",
                       "Invalid parameter at 'maxResults' or 'nextToken': cannot be used with repositoryNames")
    resp = gap.forward(Call(call.method, call.raw_target, call.headers,
                            json.dumps({k: v for k, v in body.items()
                                        if k not in ("maxResults", "nextToken")}).encode(), call.region))
    if resp.status != 200:
        return resp
    chunk, token = ecr_page(body, json.loads(resp.body).get("repositories") or [], 100, 1000)
    out = {"repositories": chunk}
    if token:
        out["nextToken"] = token
    return json_response(out, content_type=ctype)


def ecr_authorization_token(gap, call):
    body = call.json_body()
    ids = body.get("registryIds") or [ACCOUNT]
    token = base64.b64encode(f"AWS:{gap.registry.password()}".encode()).decode()
    expires = round(time.time() + AUTH_TOKEN_HOURS * 3600, 3)
    data = [{"authorizationToken": token, "expiresAt": expires, "proxyEndpoint": gap.registry.url}
            for _ in ids]
    return json_response({"authorizationData": data},
                         content_type=call.header("Content-Type") or "application/x-amz-json-1.1")


# ---- dispatch ----------------------------------------------------------------------------


def route(gap, call):
    if call.operation == "AssumeRoleWithWebIdentity":
        return assume_role_with_web_identity(gap, call)
    if call.service == "eks" and call.protocol == "rest-json":
        return handle_eks(gap, call)
    if call.target and call.target.startswith(ECR_TARGET) and gap.registry is not None:
        return handle_ecr(gap, call)
    if call.target and call.target.startswith("AWSPriceListService."):
        return handle_pricing(gap, call)
    if call.target in ("AmazonSSM.GetParameter", "AmazonSSM.GetParameters"):
        return handle_ssm(gap, call)
    if call.protocol == "ec2":
        if call.operation == "DescribeSpotPriceHistory":
            return handle_spot_price_history(gap, call)
        if call.operation == "CreateFleet":
            return handle_create_fleet(gap, call)
        if call.operation == "CreateCapacityReservation":
            return handle_create_capacity_reservation(gap, call)
        if call.operation == "DescribeCapacityReservations":
            return handle_describe_capacity_reservations(gap, call)
        if call.operation == "CancelCapacityReservation":
            return handle_cancel_capacity_reservation(gap, call)
    return None


def handle_control(gap, method, path, body, query=""):
    """The /_gap/ API. Returns (status, JSON-able)."""
    def parse():
        if not body:
            return {}
        return json.loads(body)

    if path == "/_gap/health" and method == "GET":
        return 200, {"ok": True}
    if path == "/_gap/calls/in-flight" and method == "GET":
        with gap.lock:
            return 200, list(gap.in_flight.values())
    if path == "/_gap/calls":
        if method == "GET":
            with gap.lock:
                return 200, list(gap.calls)
        if method == "DELETE":
            with gap.lock:
                gap.calls = []
            return 200, {"cleared": True}
    if path == "/_gap/iam":
        if method == "GET":
            return 200, gap.roles.report(dict(parse_qsl(query)).get("cluster"))
        if method == "DELETE":
            gap.roles.clear()
            return 200, {"cleared": True}
    if path == "/_gap/faults":
        if method == "GET":
            return 200, gap.faults_view()
        if method == "POST":
            spec = parse()
            if not isinstance(spec, dict):
                return 400, {"error": "body must be a JSON object"}
            unknown = set(spec) - {"throttle", "server_error", "error5xx", "latency_ms", "latency",
                                   "ice", "fail_nth_mutating"}
            if unknown:
                return 400, {"error": f"unknown fault kinds: {sorted(unknown)}"}
            try:
                gap.add_faults(spec)
            except (ValueError, KeyError, TypeError) as e:
                return 400, {"error": str(e)}
            return 200, gap.faults_view()
        if method == "DELETE":
            gap.clear_faults()
            return 200, gap.faults_view()
    if path == "/_gap/prices":
        if method == "GET":
            with gap.lock:
                return 200, gap.prices
        if method == "PUT":
            prices = parse()
            try:
                for region, types in prices.items():
                    for itype, entry in types.items():
                        float(entry["on_demand"])
                        for z, v in (entry.get("spot") or {}).items():
                            float(v)
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                return 400, {"error": f"prices must be {{region: {{type: {{on_demand, spot: {{zone: price}}}}}}}}: {e}"}
            with gap.lock:
                gap.prices = prices
                gap.prices_time = time.time()
            return 200, {"regions": sorted(prices)}
    if path == "/_gap/parameters":
        if method == "GET":
            with gap.lock:
                return 200, dict(gap.parameter_overrides)
        if method in ("PUT", "DELETE"):
            spec = parse()
            if not isinstance(spec, dict) or (method == "PUT" and "name" not in spec):
                return 400, {"error": 'body must be {"name": "<public parameter>", "value": "<value>" or null}'}
            name, value = spec.get("name"), spec.get("value") if method == "PUT" else None
            if name is None and method == "DELETE":
                with gap.lock:  # no name: every override goes
                    for n in list(gap.parameter_overrides):
                        set_parameter_override(gap, n, None)
                    return 200, dict(gap.parameter_overrides)
            if not isinstance(name, str) or parse_public_parameter(name) is None:
                return 400, {"error": f"{name!r} is not a public parameter the gap layer serves"}
            if value is not None and (not isinstance(value, str) or not value):
                return 400, {"error": "value must be a non-empty string, or null to remove the override"}
            set_parameter_override(gap, name, value)
            with gap.lock:
                return 200, dict(gap.parameter_overrides)
    if path == "/_gap/clusters" and method == "POST":
        spec = parse()
        if not isinstance(spec, dict) or not spec.get("cluster"):
            return 400, {"error": "body must be {cluster, region?, oidc?, authenticationMode?, ipFamily?}"}
        key = (spec.get("region") or gap.args.region, spec["cluster"])
        with gap.lock:
            gap.cluster_overrides[key] = {k: spec[k] for k in ("oidc", "authenticationMode", "ipFamily")
                                          if k in spec}
            return 200, gap.cluster_overrides[key]
    if path == "/_gap/registry/requests" and method in ("GET", "DELETE"):
        if gap.registry is None:
            return 404, {"error": "the gap layer was started without a registry"}
        if method == "DELETE":
            gap.registry.mark()
            return 200, {"cleared": True}
        everything = dict(parse_qsl(query)).get("all", "") not in ("", "0", "false")
        return 200, gap.registry.requests_since_reset(everything)
    if path == "/_gap/reset" and method == "POST":
        gap.begin_reset()
        try:
            gap.reset_state()
            if gap.registry is not None:
                gap.registry.wipe()
            conn = http.client.HTTPConnection(gap.moto.hostname, gap.moto.port, timeout=60)
            try:
                conn.request("POST", "/moto-api/reset")
                resp = conn.getresponse()
                resp.read()
                status = resp.status
            finally:
                conn.close()
        finally:
            gap.end_reset()
        return (200 if status == 200 else 502), {"reset": True, "moto_status": status}
    if path == "/_gap/state" and method == "GET":
        with gap.lock:
            return 200, {
                "access_entries": {f"{r}/{c}": sorted(v) for (r, c), v in gap.access_entries.items()},
                "pod_identity_associations": {f"{r}/{c}": list(v.values())
                                              for (r, c), v in gap.associations.items()},
                "addons": {f"{r}/{c}": sorted(v) for (r, c), v in gap.addons.items()},
            }
    return 404, {"error": f"no such control endpoint: {method} {path}"}


def assume_role_with_web_identity(gap, call):
    """STS for IRSA: the role's trust evaluated against the token (roles.py), then moto."""
    pages = gap.client("eks", call.region).get_paginator("list_clusters").paginate()
    clusters = [name for page in pages for name in page["clusters"]]
    try:
        return gap.roles.web_identity(call, clusters, gap.forward)
    except roles.Refused as e:
        raise AwsError("AccessDenied", e.message, e.status)


def pod_identity_agent(gap, method, path, token):
    """The EKS Pod Identity agent's credentials endpoint for one cluster (roles.py):
    GET /_gap/pod-identity/<cluster>/credentials."""
    seg = [s for s in path.split("/") if s]
    if method != "GET" or len(seg) != 4 or seg[3] != "credentials":
        return json_response({"message": "GET /_gap/pod-identity/<cluster>/credentials"}, 404)
    if not token:
        return json_response({"message": "the Authorization header (the pod's token) is missing"}, 400)
    try:
        return json_response(gap.roles.pod_identity_credentials(gap.args.region, seg[2], token))
    except roles.Refused as e:
        return json_response({"message": e.message}, e.status)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "jointer-gap/1"
    gap = None  # set in main

    def log_message(self, fmt, *args):  # the default logs every request to stderr
        pass

    def read_body(self):
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def setup(self):
        super().setup()
        # Small request/response pairs on a kept-alive connection: without this, Nagle's
        # algorithm and delayed ACKs add ~40 ms to every call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, resp):
        reason = http.client.responses.get(resp.status, "")
        head = [f"HTTP/1.1 {resp.status} {reason}"]
        names = {k.lower() for k, _ in resp.headers}
        head += [f"{k}: {v}" for k, v in resp.headers]
        if "date" not in names:
            head.append(f"Date: {self.date_time_string()}")
        head.append(f"Content-Length: {len(resp.body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        # One write for head and body, for the same reason as TCP_NODELAY.
        self.wfile.write(data + (resp.body if self.command != "HEAD" else b""))

    def handle_any(self):
        body = self.read_body()
        gap = self.gap
        path = urlsplit(self.path).path
        if path.startswith("/_gap/pod-identity/"):
            self.send(pod_identity_agent(gap, self.command, path, self.headers.get("Authorization")))
            return
        if path.startswith("/_gap/"):
            try:
                status, obj = handle_control(gap, self.command, path, body, urlsplit(self.path).query)
            except ValueError as e:
                status, obj = 400, {"error": f"invalid JSON: {e}"}
            self.send(json_response(obj, status))
            return
        if path.startswith("/moto-api"):
            call = Call(self.command, self.path, list(self.headers.items()), body, gap.args.region)
            if path == "/moto-api/reset":
                gap.begin_reset()
                try:
                    resp = gap.forward(call)
                    with gap.lock:  # the images the gap layer registered are gone with moto's state
                        gap.ami_cache = {}
                finally:
                    gap.end_reset()
            else:
                resp = gap.forward(call)
            self.send(resp)
            return
        gap.wait_not_resetting()
        started = time.time()
        call = Call(self.command, self.path, list(self.headers.items()), body, gap.args.region)
        with gap.lock:
            gap.in_flight[id(call)] = {"service": call.service, "operation": call.operation,
                                       "t": round(started, 3)}
        try:
            resp, fault = self.answer(call)
        finally:
            with gap.lock:
                gap.in_flight.pop(id(call), None)
        ms = (time.time() - started) * 1000
        gap.record(call, resp.status, ms, fault, started)
        log(f"{call.service} {call.operation} {resp.status} {ms:.0f}ms" + (f" [{fault}]" if fault else ""))
        self.send(resp)

    def answer(self, call):
        """The response to an AWS call, faults first; returns (response, fault kind)."""
        gap = self.gap
        fault, resp = gap.apply_faults(call)
        if resp is None:
            try:
                refusal = gap.roles.check(call, call.access_key)
                if refusal is not None:
                    raise AwsError(*refusal)
                resp = route(gap, call)
                if resp is None:
                    resp = gap.forward(call)
            except AwsError as e:
                resp = error_response(call, e.code, e.message, e.status)
            except botocore.exceptions.ClientError as e:
                err = e.response.get("Error", {})
                resp = error_response(call, err.get("Code", "InternalError"), err.get("Message", ""),
                                      e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500))
            except Exception as e:  # a bug here must show up as an AWS 500, and in the log
                import traceback
                traceback.print_exc()
                code, _ = server_error_code(call)
                resp = error_response(call, code, f"gap layer error: {e}", 500)
        return resp, fault

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("JOINTER_GAP_PORT", "25001")))
    ap.add_argument("--moto-url", required=True)
    ap.add_argument("--apiserver-url", required=True)
    ap.add_argument("--ca-file", required=True)
    ap.add_argument("--world-file", default=None)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--prices", default=os.path.join(here, "prices.json"))
    ap.add_argument("--registry-url", default=None,
                    help="the local registry (http://127.0.0.1:PORT) behind ECR; without it ECR is moto's")
    ap.add_argument("--registry-password-file", default=None)
    ap.add_argument("--registry-storage", default=None, help="the registry's filesystem root directory")
    ap.add_argument("--registry-access-log", default=None)
    args = ap.parse_args()
    for url in (args.moto_url,) + ((args.registry_url,) if args.registry_url else ()):
        if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit(f"gap.py: {url} is not a loopback address")
    Handler.gap = Gap(args)
    server = Server(("127.0.0.1", args.port), Handler)
    log(f"gap layer on http://127.0.0.1:{args.port} in front of {args.moto_url}")
    server.serve_forever()


if __name__ == "__main__":
    main()
