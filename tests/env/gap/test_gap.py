"""Smoke tests of the gap layer and the node-join simulator against a running test
environment (tests/env/up.sh). They reset the AWS world (world.sh) first and last.

    "$JOINTER_TESTENV_PYTHON" tests/env/gap/test_gap.py [NAME-SUBSTRING...]

Plain asserts; prints one line per test and a final `N passed, M failed`; exits non-zero
when a test failed.
"""

import base64
import hashlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
ENV_DIR = os.path.dirname(HERE)
RUN_DIR = os.path.join(ENV_DIR, ".run")


def load_env():
    """The variables of .run/env, as a shell sourcing it would see them."""
    path = os.path.join(RUN_DIR, "env")
    if not os.path.exists(path):
        sys.exit(f"the test environment is not up ({path} missing): run tests/env/up.sh")
    out = subprocess.run(["bash", "-c", f"set -a; source {path}; env -0"], check=True,
                         capture_output=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


os.environ.update(load_env())
import boto3  # noqa: E402  (after the environment: no real credentials can leak in)
import botocore.config  # noqa: E402
import botocore.exceptions  # noqa: E402

GAP = os.environ["JOINTER_GAP_URL"]
MOTO = os.environ["MOTO_URL"]
CLUSTER = os.environ["JOINTER_TEST_CLUSTER"]
REGION = os.environ["AWS_REGION"]
for url in (GAP, MOTO):
    assert urlsplit(url).hostname == "127.0.0.1", url
MIME_TEMPLATE = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

{nodeconfig}
--//--
"""
FIGURES = {}


def client(service, region=REGION, attempts=1):
    return boto3.session.Session().client(
        service, region_name=region, endpoint_url=GAP,
        config=botocore.config.Config(retries={"total_max_attempts": attempts, "mode": "standard"}))


def control(method, path, body=None):
    u = urlsplit(GAP)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def expect_error(code, status, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except botocore.exceptions.ClientError as e:
        got = e.response["Error"]["Code"]
        got_status = e.response["ResponseMetadata"]["HTTPStatusCode"]
        assert got == code, f"expected {code}, got {got}: {e}"
        assert status is None or got_status == status, f"expected HTTP {status}, got {got_status}"
        return e
    raise AssertionError(f"expected {code}, the call succeeded")


def kubectl(*args, stdin=None, check=True):
    r = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r


def world():
    subprocess.run([os.path.join(ENV_DIR, "world.sh")], check=True, capture_output=True)
    with open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8") as f:
        return json.load(f)


def wait_for(what, timeout, fn, interval=0.2):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def node_role(iam):
    name = unique("KarpenterNodeRole")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                     "Principal": {"Service": "ec2.amazonaws.com"}}]}
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Arn"]
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return name, arn, profile


def user_data(cluster_doc, labels="", taints="", max_pods=None, endpoint=None, quoted=False):
    """quoted: the flag values in double quotes, as upstream Karpenter writes them (Go's %q)."""
    q = '"' if quoted else ""
    flags = []
    if labels:
        flags.append(f"--node-labels={q}{labels}{q}")
    if taints:
        flags.append(f"--register-with-taints={q}{taints}{q}")
    config = {"clusterDNS": ["10.96.0.10"]}
    if max_pods:
        config["maxPods"] = max_pods
    nodeconfig = "\n".join([
        "apiVersion: node.eks.aws/v1alpha1",
        "kind: NodeConfig",
        "spec:",
        "  cluster:",
        f"    name: {cluster_doc['name']}",
        f"    apiServerEndpoint: {endpoint or cluster_doc['endpoint']}",
        f"    certificateAuthority: {cluster_doc['certificateAuthority']['data']}",
        f"    cidr: {cluster_doc['kubernetesNetworkConfig']['serviceIpv4Cidr']}",
        "  kubelet:",
        f"    config: {json.dumps(config)}",
        f"    flags: {json.dumps(flags)}",
    ])
    return MIME_TEMPLATE.format(nodeconfig=nodeconfig)


def launch_template(ec2, image, sgs, profile_arn, data, name=None):
    return ec2.create_launch_template(
        LaunchTemplateName=name or unique("jointer-test"),
        LaunchTemplateData={
            "ImageId": image, "SecurityGroupIds": sgs,
            "IamInstanceProfile": {"Arn": profile_arn},
            "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1,
                                "HttpEndpoint": "enabled"},
            "UserData": base64.b64encode(data.encode()).decode(),
        })["LaunchTemplate"]["LaunchTemplateId"]


def fleet(ec2, lt_id, overrides, capacity_type="on-demand", total=1, tags=None, od_strategy=None,
          token=None):
    kwargs = dict(
        Type="instant",
        LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": lt_id,
                                                                "Version": "$Latest"},
                                "Overrides": overrides}],
        TargetCapacitySpecification={"TotalTargetCapacity": total,
                                     "DefaultTargetCapacityType": capacity_type},
        SpotOptions={"AllocationStrategy": "price-capacity-optimized"},
        OnDemandOptions={"AllocationStrategy": od_strategy or "lowest-price"},
    )
    if token:
        kwargs["ClientToken"] = token  # else botocore fills one in, as every SDK does
    if tags:
        kwargs["TagSpecifications"] = [{"ResourceType": rt, "Tags": [{"Key": k, "Value": v}
                                                                     for k, v in tags.items()]}
                                       for rt in ("instance", "volume", "fleet")]
    return ec2.create_fleet(**kwargs)


def amis(ssm):
    base = "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/{}/standard/recommended/image_id"
    return {arch: ssm.get_parameter(Name=base.format(arch))["Parameter"]["Value"]
            for arch in ("x86_64", "arm64")}


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ---- tests -------------------------------------------------------------------------------


@test
def passthrough_and_call_log():
    assert control("GET", "/_gap/health") == (200, {"ok": True})
    assert control("DELETE", "/_gap/calls")[0] == 200
    client("sts").get_caller_identity()
    client("ec2").describe_vpcs()
    iam = client("iam")
    role = unique("calllog")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)
    status, calls = control("GET", "/_gap/calls")
    assert status == 200
    got = [(c["service"], c["operation"], c["mutating"], c["status"]) for c in calls]
    assert got == [("sts", "GetCallerIdentity", False, 200), ("ec2", "DescribeVpcs", False, 200),
                   ("iam", "CreateRole", True, 200)], got
    assert all(isinstance(c["ms"], (int, float)) and c["ms"] >= 0 and c["fault"] is None for c in calls)
    # Forwarded unchanged: moto's own answer comes back.
    assert iam.get_role(RoleName=role)["Role"]["RoleName"] == role
    assert control("DELETE", "/_gap/calls")[0] == 200
    assert control("GET", "/_gap/calls") == (200, [])


@test
def resource_tags_read_as_moto_describes_them():
    """moto_server.py reads a resource's tags from moto's tag table instead of scanning every
    tag: DescribeInstances shows the tags DescribeTags lists, tag filters select exactly, and
    volumes keep theirs."""
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    ec2 = client("ec2")
    image = amis(client("ssm"))["x86_64"]
    marker = unique("tags")
    ids = []
    for i in range(2):
        ids.append(ec2.run_instances(
            ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1,
            SubnetId=w["subnets"]["private"]["us-east-1a"],
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": "jointer.dev/test", "Value": marker},
                                                      {"Key": "n", "Value": str(i)}]},
                {"ResourceType": "volume", "Tags": [{"Key": "v", "Value": str(i)}]}],
        )["Instances"][0]["InstanceId"])
    try:
        tagged = [{"Name": "tag:jointer.dev/test", "Values": [marker]}]
        found = {inst["InstanceId"]: inst
                 for r in ec2.describe_instances(Filters=tagged)["Reservations"] for inst in r["Instances"]}
        assert set(found) == set(ids), found.keys()
        for n, iid in enumerate(ids):
            listed = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [iid]}])["Tags"]
            want = {(t["Key"], t["Value"]) for t in listed}
            got = {(t["Key"], t["Value"]) for t in found[iid]["Tags"]}
            assert got == want == {("jointer.dev/test", marker), ("n", str(n))}, (got, want)
        second = ec2.describe_instances(Filters=tagged + [{"Name": "tag:n", "Values": ["1"]}])
        assert [i["InstanceId"] for r in second["Reservations"] for i in r["Instances"]] == [ids[1]]
        volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [ids[0]]}])
        assert [{(t["Key"], t["Value"]) for t in v.get("Tags", [])} for v in volumes["Volumes"]] == [{("v", "0")}], \
            volumes["Volumes"]
    finally:
        ec2.terminate_instances(InstanceIds=ids)


@test
def passthrough_json_protocol_and_long_polling():
    sqs, events = client("sqs"), client("events")
    name = unique("interruption")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    # moto builds queue URLs from the Host header: they name the gap layer, not moto.
    assert urlsplit(url).port == urlsplit(GAP).port, url
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=name, EventPattern=json.dumps({"source": ["aws.ec2"]}))
    events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn}])
    t = time.time()
    empty = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert not empty.get("Messages") and time.time() - t >= 0.9
    events.put_events(Entries=[{"Source": "aws.ec2", "DetailType": "EC2 Spot Instance Interruption Warning",
                                "Detail": json.dumps({"instance-id": "i-0123456789abcdef0"})}])
    msgs = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert "i-0123456789abcdef0" in msgs[0]["Body"]
    _, calls = control("GET", "/_gap/calls")
    ops = {(c["service"], c["operation"]): c["mutating"] for c in calls}
    assert ops[("sqs", "ReceiveMessage")] is False and ops[("events", "PutEvents")] is True, ops
    sqs.delete_queue(QueueUrl=url)


@test
def describe_cluster_points_at_the_local_cluster():
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    eks = client("eks")
    c = eks.describe_cluster(name=CLUSTER)["cluster"]
    ca = open(os.path.join(RUN_DIR, "pki", "ca.crt"), "rb").read()
    assert c["endpoint"].startswith("https://127.0.0.1:"), c["endpoint"]
    assert base64.b64decode(c["certificateAuthority"]["data"]) == ca
    assert c["resourcesVpcConfig"]["clusterSecurityGroupId"] == w["securityGroups"]["cluster"]
    assert c["resourcesVpcConfig"]["vpcId"] == w["vpc"]["id"]
    assert c["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"
    assert c["version"] == "1.34"
    assert c["identity"]["oidc"]["issuer"] == w["cluster"]["oidcIssuer"]
    assert c["kubernetesNetworkConfig"]["serviceIpv4Cidr"] == "10.96.0.0/16"
    assert CLUSTER in eks.list_clusters()["clusters"]
    expect_error("ResourceNotFoundException", 404, eks.describe_cluster, name="no-such-cluster")


@test
def access_entries():
    eks, iam = client("eks"), client("iam")
    _, role_arn, _ = node_role(iam)
    admin = unique("admin")
    admin_arn = iam.create_role(RoleName=admin, AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    e = eks.create_access_entry(clusterName=CLUSTER, principalArn=role_arn, type="EC2_LINUX")["accessEntry"]
    assert e["type"] == "EC2_LINUX" and e["principalArn"] == role_arn
    assert e["username"] == "system:node:{{EC2PrivateDNSName}}"
    assert e["kubernetesGroups"] == ["system:nodes"]
    assert e["accessEntryArn"].startswith(f"arn:aws:eks:{REGION}:123456789012:access-entry/{CLUSTER}/role/")
    err = expect_error("ResourceInUseException", 409, eks.create_access_entry,
                       clusterName=CLUSTER, principalArn=role_arn, type="EC2_LINUX")
    assert err.response["Error"]["Message"]
    assert eks.describe_access_entry(clusterName=CLUSTER, principalArn=role_arn)["accessEntry"] == e
    s = eks.create_access_entry(clusterName=CLUSTER, principalArn=admin_arn,
                                kubernetesGroups=["jointer-admins"])["accessEntry"]
    assert s["type"] == "STANDARD" and s["kubernetesGroups"] == ["jointer-admins"]
    assert s["username"] == f"arn:aws:sts::123456789012:assumed-role/{admin}/{{{{SessionName}}}}"
    expect_error("InvalidParameterException", 400, eks.create_access_entry, clusterName=CLUSTER,
                 principalArn=iam.create_role(RoleName=unique("r"), AssumeRolePolicyDocument="{}")["Role"]["Arn"],
                 type="EC2_LINUX", kubernetesGroups=["system:masters"])
    expect_error("InvalidParameterException", 400, eks.create_access_entry, clusterName=CLUSTER,
                 principalArn="arn:aws:iam::123456789012:role/does-not-exist", type="EC2_LINUX")
    expect_error("InvalidParameterException", 400, eks.create_access_entry, clusterName=CLUSTER,
                 principalArn=admin_arn + "x", type="BOGUS")
    expect_error("ResourceNotFoundException", 404, eks.create_access_entry, clusterName="no-such-cluster",
                 principalArn=role_arn, type="EC2_LINUX")
    expect_error("ResourceNotFoundException", 404, eks.list_access_entries, clusterName="no-such-cluster")
    listed = eks.list_access_entries(clusterName=CLUSTER)["accessEntries"]
    assert role_arn in listed and admin_arn in listed
    paged, token = [], None
    while True:
        kw = {"nextToken": token} if token else {}
        out = eks.list_access_entries(clusterName=CLUSTER, maxResults=1, **kw)
        assert len(out["accessEntries"]) <= 1
        paged += out["accessEntries"]
        token = out.get("nextToken")
        if not token:
            break
    assert sorted(paged) == sorted(listed)
    policy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    a = eks.associate_access_policy(clusterName=CLUSTER, principalArn=admin_arn, policyArn=policy,
                                    accessScope={"type": "cluster"})
    assert a["associatedAccessPolicy"]["policyArn"] == policy
    pols = eks.list_associated_access_policies(clusterName=CLUSTER, principalArn=admin_arn)
    assert [p["policyArn"] for p in pols["associatedAccessPolicies"]] == [policy]
    assert eks.list_access_entries(clusterName=CLUSTER, associatedPolicyArn=policy)["accessEntries"] == [admin_arn]
    eks.disassociate_access_policy(clusterName=CLUSTER, principalArn=admin_arn, policyArn=policy)
    eks.delete_access_entry(clusterName=CLUSTER, principalArn=role_arn)
    expect_error("ResourceNotFoundException", 404, eks.describe_access_entry,
                 clusterName=CLUSTER, principalArn=role_arn)
    expect_error("ResourceNotFoundException", 404, eks.delete_access_entry,
                 clusterName=CLUSTER, principalArn=role_arn)
    eks.delete_access_entry(clusterName=CLUSTER, principalArn=admin_arn)


@test
def pod_identity_associations():
    eks, iam = client("eks"), client("iam")
    role = iam.create_role(RoleName=unique("KarpenterController"), AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    a = eks.create_pod_identity_association(clusterName=CLUSTER, namespace="kube-system",
                                            serviceAccount="karpenter", roleArn=role)["association"]
    aid = a["associationId"]
    assert aid.startswith("a-") and a["roleArn"] == role and a["clusterName"] == CLUSTER
    assert a["associationArn"].endswith(f"/{CLUSTER}/{aid}")
    expect_error("ResourceInUseException", 409, eks.create_pod_identity_association, clusterName=CLUSTER,
                 namespace="kube-system", serviceAccount="karpenter", roleArn=role)
    listed = eks.list_pod_identity_associations(clusterName=CLUSTER, namespace="kube-system")["associations"]
    assert [x["associationId"] for x in listed] == [aid] and listed[0]["serviceAccount"] == "karpenter"
    assert eks.list_pod_identity_associations(clusterName=CLUSTER, namespace="other")["associations"] == []
    got = eks.describe_pod_identity_association(clusterName=CLUSTER, associationId=aid)["association"]
    assert got["roleArn"] == role
    role2 = iam.create_role(RoleName=unique("Other"), AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    upd = eks.update_pod_identity_association(clusterName=CLUSTER, associationId=aid, roleArn=role2)
    assert upd["association"]["roleArn"] == role2
    deleted = eks.delete_pod_identity_association(clusterName=CLUSTER, associationId=aid)["association"]
    assert deleted["associationId"] == aid
    expect_error("ResourceNotFoundException", 404, eks.describe_pod_identity_association,
                 clusterName=CLUSTER, associationId=aid)
    expect_error("ResourceNotFoundException", 404, eks.list_pod_identity_associations,
                 clusterName="no-such-cluster")


def service_account_token(namespace, name, audience, expires_in=3600):
    """A token shaped as the API server's (the gap layer reads its claims, not its signature)."""
    def part(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    claims = {"aud": [audience], "exp": int(time.time()) + expires_in,
              "iss": "https://kubernetes.default.svc.cluster.local",
              "sub": f"system:serviceaccount:{namespace}:{name}",
              "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name},
                                "pod": {"name": f"{name}-0"}}}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


def agent_credentials(cluster, token):
    u = urlsplit(GAP)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("GET", f"/_gap/pod-identity/{cluster}/credentials",
                     headers={"Authorization": token})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def role_with(iam, trust, describe_region=REGION):
    """A role allowed ec2:DescribeInstances in one region and TerminateInstances only on
    instances tagged team=a."""
    name = unique("Controller")
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
    iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*",
             "Condition": {"StringEquals": {"aws:RequestedRegion": describe_region}}},
            {"Effect": "Allow", "Action": "ec2:TerminateInstances",
             "Resource": "arn:aws:ec2:*:*:instance/*",
             "Condition": {"StringEquals": {"aws:ResourceTag/team": "a"}}}]}))
    return name, f"arn:aws:iam::123456789012:role/{name}"


def client_as(service, creds):
    """A client signing with a role session's credentials (the agent's or STS's shape)."""
    return boto3.session.Session(
        aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds.get("Token") or creds.get("SessionToken"),
    ).client(service, region_name=REGION, endpoint_url=GAP,
             config=botocore.config.Config(retries={"total_max_attempts": 1}))


@test
def pod_identity_agent_hands_out_role_credentials_that_iam_then_enforces():
    w = world()
    eks, iam, ec2 = client("eks"), client("iam"), client("ec2")
    trust = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"]}]}
    name, arn = role_with(iam, trust)
    eks.create_pod_identity_association(clusterName=CLUSTER, namespace="kube-system",
                                        serviceAccount="gap-test", roleArn=arn)
    status, body = agent_credentials(CLUSTER, service_account_token("kube-system", "gap-test",
                                                                    "sts.amazonaws.com"))
    assert status == 400 and "audience" in body["message"], body
    status, body = agent_credentials(CLUSTER, service_account_token("kube-system", "nobody",
                                                                    "pods.eks.amazonaws.com"))
    assert status == 403 and "no pod identity association" in body["message"], body
    status, creds = agent_credentials(CLUSTER, service_account_token(
        "kube-system", "gap-test", "pods.eks.amazonaws.com"))
    assert status == 200 and creds["AccessKeyId"] and creds["Token"], creds
    assert creds["AccountId"] == "123456789012" and creds["Expiration"].endswith("Z"), creds

    image = amis(client("ssm"))["x86_64"]
    mine = ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1,
                             SubnetId=w["subnets"]["private"]["us-east-1a"],
                             TagSpecifications=[{"ResourceType": "instance",
                                                 "Tags": [{"Key": "team", "Value": "a"}]}])
    theirs = ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1,
                               SubnetId=w["subnets"]["private"]["us-east-1a"])
    mine, theirs = mine["Instances"][0]["InstanceId"], theirs["Instances"][0]["InstanceId"]
    control("DELETE", "/_gap/iam")
    as_role = client_as("ec2", creds)
    as_role.describe_instances(InstanceIds=[mine])
    err = expect_error("UnauthorizedOperation", 403, as_role.terminate_instances,
                       InstanceIds=[theirs])
    assert f"assumed-role/{name}/" in str(err) and f"instance/{theirs}" in str(err), err
    assert ec2.describe_instances(InstanceIds=[theirs])["Reservations"][0]["Instances"][0][
        "State"]["Name"] == "running", "a refused call never reaches moto"
    as_role.terminate_instances(InstanceIds=[mine])
    expect_error("AccessDenied", 403, client_as("sqs", creds).list_queues)
    _, report = control("GET", "/_gap/iam")
    used = report["principals"]["gap-test"]["used"]
    assert used == {"ec2:DescribeInstances": 1, "ec2:TerminateInstances": 1}, used
    assert [d["action"] for d in report["denied"]] == ["ec2:TerminateInstances", "sqs:ListQueues"]
    assert report["principals"]["gap-test"]["unused_grants"] == []
    # The admin credentials every test uses are not evaluated.
    ec2.describe_instances(InstanceIds=[theirs])
    assert control("GET", "/_gap/iam")[1]["evaluated"] == report["evaluated"]
    control("DELETE", "/_gap/iam")  # the suite's report starts clean


@test
def sts_web_identity_evaluates_the_role_trust_as_irsa_needs():
    iam, eks = client("iam"), client("eks")
    issuer = eks.describe_cluster(name=CLUSTER)["cluster"]["identity"]["oidc"]["issuer"]
    host = issuer.removeprefix("https://")
    provider = f"arn:aws:iam::123456789012:oidc-provider/{host}"
    existing = {p["Arn"] for p in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]}
    if provider not in existing:
        iam.create_open_id_connect_provider(
            Url=issuer, ClientIDList=["sts.amazonaws.com"],
            ThumbprintList=["9e99a48a9960b14926bb7f3b02e22da2b0ab7280"])
    trust = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": provider},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{host}:sub": "system:serviceaccount:kube-system:karpenter",
                                       f"{host}:aud": "sts.amazonaws.com"}}}]}
    name, arn = role_with(iam, trust, describe_region="us-west-2")
    sts = boto3.session.Session().client("sts", region_name=REGION, endpoint_url=GAP)
    try:
        for who, audience in (("other", "sts.amazonaws.com"), ("karpenter", "pods.eks.amazonaws.com")):
            expect_error("AccessDenied", 403, sts.assume_role_with_web_identity, RoleArn=arn,
                         RoleSessionName="gap-test", WebIdentityToken=service_account_token(
                             "kube-system", who, audience))
        creds = sts.assume_role_with_web_identity(
            RoleArn=arn, RoleSessionName="gap-test", WebIdentityToken=service_account_token(
                "kube-system", "karpenter", "sts.amazonaws.com"))["Credentials"]
        expect_error("UnauthorizedOperation", 403, client_as("ec2", creds).describe_instances)
        _, report = control("GET", "/_gap/iam")
        refused = [d for d in report["denied"] if d["principal"].startswith(
            f"arn:aws:sts::123456789012:assumed-role/{name}/")]
        assert [(d["action"], d["label"]) for d in refused] == [("ec2:DescribeInstances", "karpenter")]
        assert "aws:RequestedRegion" in refused[0]["reason"], refused
    finally:
        control("DELETE", "/_gap/iam")  # the suite's report starts clean
        if provider not in existing:
            iam.delete_open_id_connect_provider(OpenIDConnectProviderArn=provider)


@test
def addons():
    eks = client("eks")
    assert eks.list_addons(clusterName=CLUSTER)["addons"] == ["eks-pod-identity-agent"]
    a = eks.describe_addon(clusterName=CLUSTER, addonName="eks-pod-identity-agent")["addon"]
    assert a["status"] == "ACTIVE" and a["addonVersion"]
    expect_error("ResourceNotFoundException", 404, eks.describe_addon, clusterName=CLUSTER,
                 addonName="vpc-cni")
    eks.delete_addon(clusterName=CLUSTER, addonName="eks-pod-identity-agent")
    assert eks.list_addons(clusterName=CLUSTER)["addons"] == []
    eks.create_addon(clusterName=CLUSTER, addonName="eks-pod-identity-agent")
    assert eks.describe_addon(clusterName=CLUSTER, addonName="eks-pod-identity-agent")["addon"]["status"] == "ACTIVE"
    expect_error("ResourceNotFoundException", 404, eks.list_addons, clusterName="no-such-cluster")


LINUX_FILTERS = [
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
]


def on_demand_price(product):
    (term,) = product["terms"]["OnDemand"].values()
    (dim,) = term["priceDimensions"].values()
    assert dim["unit"] == "Hrs"
    return float(dim["pricePerUnit"]["USD"])


@test
def pricing_get_products():
    pricing = client("pricing")
    out = pricing.get_products(ServiceCode="AmazonEC2", Filters=LINUX_FILTERS + [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "m5.large"},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"}])
    assert out["FormatVersion"] == "aws_v1" and len(out["PriceList"]) == 1
    assert isinstance(out["PriceList"][0], str)
    p = json.loads(out["PriceList"][0])
    attrs = p["product"]["attributes"]
    assert attrs["instanceType"] == "m5.large" and attrs["regionCode"] == "us-east-1"
    assert attrs["vcpu"] == "2" and attrs["memory"] == "8 GiB" and attrs["operatingSystem"] == "Linux"
    assert on_demand_price(p) == 0.096
    west = pricing.get_products(ServiceCode="AmazonEC2", Filters=LINUX_FILTERS + [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "c6g.xlarge"},
        {"Type": "TERM_MATCH", "Field": "location", "Value": "US West (Oregon)"}])["PriceList"]
    assert [json.loads(x)["product"]["attributes"]["regionCode"] for x in west] == ["us-west-2"]
    assert pricing.get_products(ServiceCode="AmazonEC2", Filters=[
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Windows"}])["PriceList"] == []
    # Upstream Karpenter's query: the product family filters like an attribute.
    family = lambda f: pricing.get_products(ServiceCode="AmazonEC2", Filters=LINUX_FILTERS + [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "m5.large"},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
        {"Type": "TERM_MATCH", "Field": "productFamily", "Value": f}])["PriceList"]
    assert len(family("Compute Instance")) == 1 and family("Compute Instance (bare metal)") == []
    # Bare metal is its own family, under shared and dedicated tenancy alike.
    metal = lambda tenancy: [json.loads(x)["product"] for x in pricing.get_products(
        ServiceCode="AmazonEC2", Filters=[
            {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "m5.metal"},
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
            {"Type": "TERM_MATCH", "Field": "tenancy", "Value": tenancy}])["PriceList"]]
    for tenancy in ("Shared", "Dedicated"):
        (product,) = metal(tenancy)
        assert product["productFamily"] == "Compute Instance (bare metal)", product
    _, prices = control("GET", "/_gap/prices")
    seen, pages = [], 0
    for page in pricing.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", PaginationConfig={"PageSize": 10},
            Filters=LINUX_FILTERS + [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"}]):
        pages += 1
        assert len(page["PriceList"]) <= 10
        seen += [json.loads(x)["product"]["attributes"]["instanceType"] for x in page["PriceList"]]
    assert sorted(seen) == sorted(prices["us-east-1"]) and len(set(seen)) == len(seen)
    assert pages == -(-len(seen) // 10), pages
    # Prices can be changed at runtime, and PUT replaces the whole list.
    changed = json.loads(json.dumps(prices))
    changed["us-east-1"]["m5.large"]["on_demand"] = 0.5
    assert control("PUT", "/_gap/prices", changed)[0] == 200
    try:
        out = pricing.get_products(ServiceCode="AmazonEC2", Filters=[
            {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "m5.large"},
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"}])
        assert on_demand_price(json.loads(out["PriceList"][0])) == 0.5
    finally:
        assert control("PUT", "/_gap/prices", prices)[0] == 200
    assert control("PUT", "/_gap/prices", {"us-east-1": {"m5.large": {}}})[0] == 400


@test
def spot_price_history():
    ec2 = client("ec2")
    _, prices = control("GET", "/_gap/prices")
    out = ec2.describe_spot_price_history(InstanceTypes=["m5.large"], ProductDescriptions=["Linux/UNIX"],
                                          AvailabilityZone="us-east-1b",
                                          StartTime=time.time())["SpotPriceHistory"]
    assert len(out) == 1, out
    assert float(out[0]["SpotPrice"]) == prices["us-east-1"]["m5.large"]["spot"]["us-east-1b"]
    assert out[0]["AvailabilityZone"] == "us-east-1b" and out[0]["ProductDescription"] == "Linux/UNIX"
    age = time.time() - out[0]["Timestamp"].timestamp()
    assert 0 <= age < 86400, age
    zones = ec2.describe_spot_price_history(InstanceTypes=["m5.large"],
                                            ProductDescriptions=["Linux/UNIX"])["SpotPriceHistory"]
    assert sorted(z["AvailabilityZone"] for z in zones) == sorted(prices["us-east-1"]["m5.large"]["spot"])
    by_filter = ec2.describe_spot_price_history(Filters=[
        {"Name": "instance-type", "Values": ["c5.large", "r5.large"]},
        {"Name": "availability-zone", "Values": ["us-east-1a"]}])["SpotPriceHistory"]
    assert sorted(i["InstanceType"] for i in by_filter) == ["c5.large", "r5.large"]
    items, pages = [], 0
    for page in ec2.get_paginator("describe_spot_price_history").paginate(
            ProductDescriptions=["Linux/UNIX"], PaginationConfig={"PageSize": 50}):
        pages += 1
        items += [(i["InstanceType"], i["AvailabilityZone"]) for i in page["SpotPriceHistory"]]
    expected = sorted((t, z) for t, e in prices["us-east-1"].items() for z in e["spot"])
    assert sorted(items) == expected and pages == -(-len(expected) // 50), (len(items), pages)
    # Upstream Karpenter pages with MaxResults 2000, which EC2 accepts despite its documented 1000.
    big = ec2.describe_spot_price_history(ProductDescriptions=["Linux/UNIX"], MaxResults=2000)
    assert len(big["SpotPriceHistory"]) == min(len(expected), 1000), len(big["SpotPriceHistory"])
    assert ec2.describe_spot_price_history(ProductDescriptions=["Windows"])["SpotPriceHistory"] == []
    west = client("ec2", region="us-west-2").describe_spot_price_history(
        InstanceTypes=["g5.xlarge"])["SpotPriceHistory"]
    assert sorted(i["AvailabilityZone"] for i in west) == ["us-west-2a", "us-west-2b", "us-west-2c"]


@test
def ssm_eks_ami_parameters():
    ssm, ec2 = client("ssm"), client("ec2")
    ids = amis(ssm)
    for arch, image in ids.items():
        imgs = ec2.describe_images(ImageIds=[image])["Images"]
        assert len(imgs) == 1 and imgs[0]["Architecture"] == arch, (arch, imgs)
    ssm.put_parameter(Name="/jointer-test/param", Value="v", Type="String")
    x86 = "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id"
    bad = "/aws/service/eks/optimized-ami/1.99/amazon-linux-2023/x86_64/standard/recommended/image_id"
    out = ssm.get_parameters(Names=[x86, "/jointer-test/param", bad, "/nope"])
    assert sorted(p["Name"] for p in out["Parameters"]) == sorted([x86, "/jointer-test/param"])
    assert sorted(out["InvalidParameters"]) == sorted([bad, "/nope"])
    expect_error("ParameterNotFound", 400, ssm.get_parameter, Name=bad)
    assert ssm.get_parameter(Name="/jointer-test/param")["Parameter"]["Value"] == "v"
    rel = ssm.get_parameter(Name=x86.replace("/image_id", "/release_version"))["Parameter"]["Value"]
    assert rel.startswith("1.34")


AL2023_PARAM = "/aws/service/eks/optimized-ami/{k}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
AL2_PARAM = "/aws/service/eks/optimized-ami/{k}/amazon-linux-2{suffix}/recommended/image_id"
BOTTLEROCKET_PARAM = "/aws/service/bottlerocket/aws-k8s-{k}{nvidia}/{arch}/{release}/image_id"
WINDOWS_PARAM = "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k}/image_id"


def image_of(ssm, ec2, name):
    image = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    (img,) = ec2.describe_images(ImageIds=[image])["Images"]
    return img


@test
def ssm_public_parameters_of_every_family():
    ssm, ec2 = client("ssm"), client("ec2")
    # (parameter, image name prefix, architecture, platform)
    cases = [
        (AL2023_PARAM.format(k="1.34", arch="x86_64", variant="standard"), "al2023-ami-2023.", "x86_64", None),
        (AL2023_PARAM.format(k="1.34", arch="arm64", variant="standard"), "al2023-ami-2023.", "arm64", None),
        (AL2023_PARAM.format(k="1.34", arch="x86_64", variant="nvidia"),
         "amazon-eks-node-al2023-x86_64-nvidia-1.34-v20261101", "x86_64", None),
        (AL2023_PARAM.format(k="1.34", arch="arm64", variant="nvidia"),
         "amazon-eks-node-al2023-arm64-nvidia-1.34-v20261101", "arm64", None),
        (AL2023_PARAM.format(k="1.34", arch="x86_64", variant="neuron"),
         "amazon-eks-node-al2023-x86_64-neuron-1.34-v20261101", "x86_64", None),
        ("/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/"
         "amazon-eks-node-al2023-x86_64-standard-1.34-v20261101/image_id", "al2023-ami-2023.", "x86_64", None),
        (AL2_PARAM.format(k="1.32", suffix=""), "amzn2-ami-", "x86_64", None),
        (AL2_PARAM.format(k="1.28", suffix="-arm64"), "amzn2-ami-", "arm64", None),
        (AL2_PARAM.format(k="1.32", suffix="-gpu"), "amazon-eks-gpu-node-1.32-v20261101", "x86_64", None),
        ("/aws/service/eks/optimized-ami/1.32/amazon-linux-2-arm64/amazon-eks-arm64-node-1.32-v20261101/image_id",
         "amzn2-ami-", "arm64", None),
        (BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="x86_64", release="latest"),
         "bottlerocket-aws-k8s-1.34-x86_64-v1.50.0-", "x86_64", None),
        (BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="arm64", release="latest"),
         "bottlerocket-aws-k8s-1.34-aarch64-v1.50.0-", "arm64", None),
        (BOTTLEROCKET_PARAM.format(k="1.35", nvidia="-nvidia", arch="x86_64", release="1.50.0"),
         "bottlerocket-aws-k8s-1.35-nvidia-x86_64-v1.50.0-", "x86_64", None),
        (BOTTLEROCKET_PARAM.format(k="1.34", nvidia="-nvidia", arch="arm64", release="latest"),
         "bottlerocket-aws-k8s-1.34-nvidia-aarch64-v1.50.0-", "arm64", None),
    ] + [(WINDOWS_PARAM.format(year=y, k="1.34"), f"Windows_Server-{y}-English-Core-EKS_Optimized-1.34-",
          "x86_64", "windows") for y in ("2019", "2022", "2025")]
    ids = {}
    for name, prefix, arch, platform in cases:
        img = image_of(ssm, ec2, name)
        assert img["Name"].startswith(prefix), (name, img["Name"])
        assert img["Architecture"] == arch and img.get("Platform") == platform, (name, img)
        ids[name] = img["ImageId"]
    # Variants are images of their own, so a test sees which one was picked; asking again
    # (a cache) or finding by name (a restarted gap layer) gives the same image, never a second.
    std, nvidia = cases[0][0], cases[2][0]
    assert len({ids[std], ids[nvidia], ids[cases[4][0]]}) == 3
    br_nvidia = image_of(ssm, ec2, BOTTLEROCKET_PARAM.format(k="1.34", nvidia="-nvidia", arch="x86_64",
                                                             release="latest"))
    assert br_nvidia["Name"].startswith("bottlerocket-aws-k8s-1.34-nvidia-x86_64-")
    assert br_nvidia["ImageId"] != ids[cases[10][0]]
    assert ids[cases[5][0]] == ids[std]
    assert image_of(ssm, ec2, nvidia)["ImageId"] == ids[nvidia]
    assert len(ec2.describe_images(Filters=[{"Name": "name", "Values": [image_of(ssm, ec2, nvidia)["Name"]]}])
               ["Images"]) == 1
    assert ssm.get_parameter(Name=BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="x86_64", release="latest")
                             .replace("/image_id", "/image_version"))["Parameter"]["Value"].startswith("1.50.0-")
    assert ssm.get_parameter(Name=AL2_PARAM.format(k="1.30", suffix="").replace("/image_id", "/release_version")
                             )["Parameter"]["Value"].startswith("1.30.")
    # What EKS does not publish: AL2 after 1.32, other releases, neuron on arm64, unknown versions.
    missing = [
        AL2_PARAM.format(k="1.33", suffix=""), AL2_PARAM.format(k="1.35", suffix="-gpu"),
        AL2_PARAM.format(k="1.34", suffix="-arm64"),
        "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/"
        "amazon-eks-node-al2023-x86_64-standard-1.34-v20250101/image_id",
        "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/"
        "amazon-eks-node-al2023-arm64-standard-1.34-v20261101/image_id",
        AL2023_PARAM.format(k="1.34", arch="arm64", variant="neuron"),
        AL2023_PARAM.format(k="1.27", arch="x86_64", variant="standard"),
        BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="x86_64", release="v1.50.0"),
        BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="x86_64", release="1.49.0"),
        BOTTLEROCKET_PARAM.format(k="1.36", nvidia="", arch="x86_64", release="latest"),
        WINDOWS_PARAM.format(year="2016", k="1.34"), WINDOWS_PARAM.format(year="2022", k="1.99"),
    ]
    for name in missing:
        expect_error("ParameterNotFound", 400, ssm.get_parameter, Name=name)
    # GetParameters: found ones, unknown public ones and a user's own (moto's) in one call.
    ssm.put_parameter(Name="/jointer-test/ami", Value=ids[std], Type="String", Overwrite=True)
    al2, br = cases[6][0], cases[10][0]
    out = ssm.get_parameters(Names=[al2, missing[0], "/jointer-test/ami", br, missing[7], "/jointer-test/none"])
    assert sorted(p["Name"] for p in out["Parameters"]) == sorted([al2, br, "/jointer-test/ami"]), out
    assert sorted(out["InvalidParameters"]) == sorted([missing[0], missing[7], "/jointer-test/none"]), out
    assert {p["Name"]: p["Value"] for p in out["Parameters"]}[br] == ids[br]
    assert ssm.get_parameter(Name="/jointer-test/ami")["Parameter"]["Value"] == ids[std]


@test
def ssm_parameter_overrides():
    ssm = client("ssm")
    br = BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="x86_64", release="latest")
    al2023 = AL2023_PARAM.format(k="1.34", arch="x86_64", variant="standard")
    before = ssm.get_parameter(Name=br)["Parameter"]
    assert control("GET", "/_gap/parameters") == (200, {})
    st, body = control("PUT", "/_gap/parameters", {"name": br, "value": "ami-0123456789abcdef0"})
    assert st == 200 and body == {br: "ami-0123456789abcdef0"}, body
    moved = ssm.get_parameter(Name=br)["Parameter"]
    assert moved["Value"] == "ami-0123456789abcdef0" and moved["Version"] == before["Version"] + 1, moved
    out = ssm.get_parameters(Names=[br, al2023])["Parameters"]
    assert {p["Name"]: p["Value"] for p in out}[br] == "ami-0123456789abcdef0"
    # Other names of the same image do not move with it.
    assert ssm.get_parameter(Name=br.replace("/latest/", "/1.50.0/"))["Parameter"]["Value"] == before["Value"]
    control("PUT", "/_gap/parameters", {"name": al2023, "value": "ami-0fedcba9876543210"})
    assert ssm.get_parameter(Name=al2023)["Parameter"]["Value"] == "ami-0fedcba9876543210"
    # value null puts it back (a new version again), DELETE by name too.
    st, body = control("PUT", "/_gap/parameters", {"name": br, "value": None})
    assert st == 200 and body == {al2023: "ami-0fedcba9876543210"}, body
    back = ssm.get_parameter(Name=br)["Parameter"]
    assert back["Value"] == before["Value"] and back["Version"] == before["Version"] + 2, back
    assert control("DELETE", "/_gap/parameters", {"name": al2023}) == (200, {})
    # Only parameters the gap layer serves can be moved.
    for bad in [{"name": AL2_PARAM.format(k="1.33", suffix=""), "value": "ami-1"},
                {"name": "/jointer-test/mine", "value": "ami-1"}, {"name": br, "value": 3}, {"value": "x"}]:
        assert control("PUT", "/_gap/parameters", bad)[0] == 400, bad
    # Reset clears every override (and the world goes with it: rebuild it).
    control("PUT", "/_gap/parameters", {"name": br, "value": "ami-0123456789abcdef0"})
    assert control("POST", "/_gap/reset")[0] == 200
    assert control("GET", "/_gap/parameters") == (200, {})
    world()
    assert ssm.get_parameter(Name=br)["Parameter"]["Value"].startswith("ami-")
    assert ssm.get_parameter(Name=br)["Parameter"]["Value"] != "ami-0123456789abcdef0"


def fleet_setup(ec2, iam, ssm, w, user_data_text="#!/bin/bash\necho not a node\n"):
    _, _, profile = node_role(iam)
    # moto attaches the profile by ARN once IAM can see it; give the new profile its moment.
    ids = amis(ssm)
    lt = launch_template(ec2, ids["x86_64"], [w["securityGroups"]["node"]], profile, user_data_text)
    return lt, profile, ids


@test
def create_fleet_picks_the_cheapest_and_applies_the_launch_template():
    ec2, iam, ssm = client("ec2"), client("iam"), client("ssm")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    sub = w["subnets"]["private"]
    _, prices = control("GET", "/_gap/prices")
    lt, profile, ids = fleet_setup(ec2, iam, ssm, w)
    overrides = [
        {"InstanceType": "m5.large", "SubnetId": sub["us-east-1a"]},   # on-demand 0.096
        {"InstanceType": "c5.large", "SubnetId": sub["us-east-1b"]},   # on-demand 0.085
        {"InstanceType": "m5.xlarge", "SubnetId": sub["us-east-1c"]},  # on-demand 0.192
    ]
    launched = []
    try:
        out = fleet(ec2, lt, overrides, tags={"jointer.dev/test": "fleet"})
        assert out["FleetId"].startswith("fleet-") and out["Errors"] == [], out["Errors"]
        (inst,) = out["Instances"]
        assert inst["InstanceType"] == "c5.large" and inst["Lifecycle"] == "on-demand"
        assert inst["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"] == sub["us-east-1b"]
        assert inst["LaunchTemplateAndOverrides"]["LaunchTemplateSpecification"]["LaunchTemplateId"] == lt
        launched += inst["InstanceIds"]
        d = ec2.describe_instances(InstanceIds=inst["InstanceIds"])["Reservations"][0]["Instances"][0]
        assert d["SubnetId"] == sub["us-east-1b"] and d["Placement"]["AvailabilityZone"] == "us-east-1b"
        assert d["ImageId"] == ids["x86_64"]
        assert [g["GroupId"] for g in d["SecurityGroups"]] == [w["securityGroups"]["node"]], d["SecurityGroups"]
        assert d["IamInstanceProfile"]["Arn"] == profile, d.get("IamInstanceProfile")
        assert d["MetadataOptions"]["HttpTokens"] == "required"
        assert d["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert {"Key": "jointer.dev/test", "Value": "fleet"} in d["Tags"]
        assert "InstanceLifecycle" not in d
        ud = ec2.describe_instance_attribute(InstanceId=d["InstanceId"], Attribute="userData")
        assert base64.b64decode(ud["UserData"]["Value"]).startswith(b"#!/bin/bash")

        # Spot: the cheapest spot price in the override's zone.
        spot = {o["InstanceType"]: prices["us-east-1"][o["InstanceType"]]["spot"][z]
                for o, z in zip(overrides, ["us-east-1a", "us-east-1b", "us-east-1c"])}
        out = fleet(ec2, lt, overrides, capacity_type="spot")
        (inst,) = out["Instances"]
        assert inst["InstanceType"] == min(spot, key=spot.get) and inst["Lifecycle"] == "spot", (inst, spot)
        launched += inst["InstanceIds"]
        d = ec2.describe_instances(InstanceIds=inst["InstanceIds"])["Reservations"][0]["Instances"][0]
        assert d["InstanceLifecycle"] == "spot"

        # Two instances: both in the cheapest pool.
        out = fleet(ec2, lt, overrides, total=2)
        assert [(i["InstanceType"], len(i["InstanceIds"])) for i in out["Instances"]] == [("c5.large", 2)]
        launched += out["Instances"][0]["InstanceIds"]

        # Priorities, when asked for.
        prio = [dict(o, Priority=p) for o, p in zip(overrides, [2.0, 1.0, 0.0])]
        out = fleet(ec2, lt, prio, od_strategy="prioritized")
        assert out["Instances"][0]["InstanceType"] == "m5.xlarge"
        launched += out["Instances"][0]["InstanceIds"]

        # An arm64 type with this x86_64 image fails as in EC2; the next override launches.
        arm = [{"InstanceType": "c6g.large", "SubnetId": sub["us-east-1a"]}] + overrides
        out = fleet(ec2, lt, arm)
        assert [e["ErrorCode"] for e in out["Errors"]] == ["InvalidParameterValue"], out["Errors"]
        assert out["Instances"][0]["InstanceType"] == "c5.large"
        launched += out["Instances"][0]["InstanceIds"]
    finally:
        if launched:
            ec2.terminate_instances(InstanceIds=launched)


@test
def create_fleet_reports_interface_security_groups_on_the_instance():
    """EC2 lists an instance's primary interface's groups as its own; a template that names
    them on the interface (upstream Karpenter's do) must read back the same (moto alone: [])."""
    ec2, iam, ssm = client("ec2"), client("iam"), client("ssm")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    _, _, profile = node_role(iam)
    lt = ec2.create_launch_template(
        LaunchTemplateName=unique("jointer-test-nic"),
        LaunchTemplateData={
            "ImageId": amis(ssm)["x86_64"], "IamInstanceProfile": {"Arn": profile},
            "NetworkInterfaces": [{"DeviceIndex": 0, "Groups": [w["securityGroups"]["node"]]}],
        })["LaunchTemplate"]["LaunchTemplateId"]
    out = fleet(ec2, lt, [{"InstanceType": "c5.large",
                           "SubnetId": w["subnets"]["private"]["us-east-1a"]}])
    ids = out["Instances"][0]["InstanceIds"]
    try:
        d = ec2.describe_instances(InstanceIds=ids)["Reservations"][0]["Instances"][0]
        assert [g["GroupId"] for g in d["SecurityGroups"]] == [w["securityGroups"]["node"]], d
        assert [g["GroupId"] for g in d["NetworkInterfaces"][0]["Groups"]] == [
            w["securityGroups"]["node"]], d["NetworkInterfaces"]
    finally:
        ec2.terminate_instances(InstanceIds=ids)


@test
def create_fleet_is_idempotent_by_client_token():
    """A retried CreateFleet (same ClientToken) gets the first answer, not a second instance."""
    ec2, iam, ssm = client("ec2"), client("iam"), client("ssm")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    sub = w["subnets"]["private"]
    lt, _, _ = fleet_setup(ec2, iam, ssm, w)
    overrides = [{"InstanceType": "c5.large", "SubnetId": sub["us-east-1b"]}]
    token, mark = unique("token"), unique("idem")
    launched = []
    try:
        first = fleet(ec2, lt, overrides, tags={"jointer.dev/test": mark}, token=token)
        again = fleet(ec2, lt, overrides, tags={"jointer.dev/test": mark}, token=token)
        ids = first["Instances"][0]["InstanceIds"]
        launched += ids
        assert again["FleetId"] == first["FleetId"] and again["Instances"][0]["InstanceIds"] == ids
        tagged = [i["InstanceId"] for r in ec2.describe_instances(Filters=[
            {"Name": "tag:jointer.dev/test", "Values": [mark]}])["Reservations"] for i in r["Instances"]]
        assert tagged == ids, tagged
        # The same token with other parameters is refused, as EC2 does.
        other = [{"InstanceType": "m5.large", "SubnetId": sub["us-east-1a"]}]
        try:
            fleet(ec2, lt, other, tags={"jointer.dev/test": mark}, token=token)
            raise AssertionError("a reused token with other parameters was accepted")
        except botocore.exceptions.ClientError as e:
            assert e.response["Error"]["Code"] == "IdempotentParameterMismatch", e.response
        # An answer that launched nothing is not kept: its retry launches once capacity is back.
        ice = {"instance_type": "c5.large", "zone": "us-east-1b", "capacity_type": "on-demand"}
        assert control("POST", "/_gap/faults", {"ice": [ice]})[0] == 200
        token2 = unique("token")
        out = fleet(ec2, lt, overrides, tags={"jointer.dev/test": mark}, token=token2)
        assert out["Instances"] == [] and out["Errors"][0]["ErrorCode"] == "InsufficientInstanceCapacity"
        assert control("DELETE", "/_gap/faults")[0] == 200
        out = fleet(ec2, lt, overrides, tags={"jointer.dev/test": mark}, token=token2)
        launched += out["Instances"][0]["InstanceIds"]
        assert out["Instances"][0]["InstanceIds"] != ids
    finally:
        control("DELETE", "/_gap/faults")
        if launched:
            ec2.terminate_instances(InstanceIds=launched)


@test
def create_fleet_insufficient_capacity():
    ec2, iam, ssm = client("ec2"), client("iam"), client("ssm")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    sub = w["subnets"]["private"]
    lt, _, _ = fleet_setup(ec2, iam, ssm, w)
    overrides = [
        {"InstanceType": "m5.large", "SubnetId": sub["us-east-1a"]},
        {"InstanceType": "c5.large", "SubnetId": sub["us-east-1b"]},
        {"InstanceType": "m5.xlarge", "SubnetId": sub["us-east-1c"]},
    ]
    launched = []
    try:
        st, faults = control("POST", "/_gap/faults", {"ice": [
            {"instance_type": "c5.large", "zone": "us-east-1b", "capacity_type": "on-demand"}]})
        assert st == 200 and len(faults["ice"]) == 1, faults
        out = fleet(ec2, lt, overrides)
        (err,) = out["Errors"]
        assert err["ErrorCode"] == "InsufficientInstanceCapacity" and err["Lifecycle"] == "on-demand"
        assert err["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"] == "c5.large"
        assert err["LaunchTemplateAndOverrides"]["Overrides"]["AvailabilityZone"] == "us-east-1b"
        assert "sufficient c5.large capacity" in err["ErrorMessage"]
        (inst,) = out["Instances"]
        assert inst["InstanceType"] == "m5.large", inst
        launched += inst["InstanceIds"]
        # Spot is unaffected by an on-demand ICE rule.
        out = fleet(ec2, lt, overrides[1:2], capacity_type="spot")
        assert out["Errors"] == [] and out["Instances"][0]["InstanceType"] == "c5.large"
        launched += out["Instances"][0]["InstanceIds"]
        # Everything out of capacity: no instance, one error per override.
        control("POST", "/_gap/faults", {"ice": [{"capacity_type": "on-demand"}]})
        out = fleet(ec2, lt, overrides)
        assert out["Instances"] == []
        assert sorted(e["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"] for e in out["Errors"]) == \
            ["c5.large", "m5.large", "m5.xlarge"]
        assert {e["ErrorCode"] for e in out["Errors"]} == {"InsufficientInstanceCapacity"}
    finally:
        control("DELETE", "/_gap/faults")
        if launched:
            ec2.terminate_instances(InstanceIds=launched)


@test
def capacity_reservations_and_fleets_that_target_them():
    ec2, iam, ssm = client("ec2"), client("iam"), client("ssm")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    sub = w["subnets"]["private"]
    _, profile, ids = fleet_setup(ec2, iam, ssm, w)
    cr = ec2.create_capacity_reservation(
        InstanceType="m5.large", InstancePlatform="Linux/UNIX", AvailabilityZone="us-east-1a",
        InstanceCount=1, InstanceMatchCriteria="targeted",
        TagSpecifications=[{"ResourceType": "capacity-reservation",
                            "Tags": [{"Key": "team", "Value": "gap-test"}]}])["CapacityReservation"]
    rid = cr["CapacityReservationId"]
    assert rid.startswith("cr-") and cr["AvailableInstanceCount"] == 1 and cr["State"] == "active"
    (found,) = ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag:team", "Values": ["gap-test"]}])["CapacityReservations"]
    assert found["CapacityReservationId"] == rid and found["InstanceMatchCriteria"] == "targeted"
    assert found["OwnerId"] and found["InstanceType"] == "m5.large"
    expect_error("InvalidCapacityReservationId.NotFound", 400,
                 ec2.describe_capacity_reservations, CapacityReservationIds=["cr-00000000000000000"])
    targeted = ec2.create_launch_template(
        LaunchTemplateName=unique("jointer-test-cr"),
        LaunchTemplateData={"ImageId": ids["x86_64"], "IamInstanceProfile": {"Arn": profile},
                            "SecurityGroupIds": [w["securityGroups"]["node"]],
                            "CapacityReservationSpecification": {
                                "CapacityReservationTarget": {"CapacityReservationId": rid}}},
    )["LaunchTemplate"]["LaunchTemplateId"]
    here = [{"InstanceType": "m5.large", "SubnetId": sub["us-east-1a"]}]
    launched = []
    try:
        # Another zone than the reservation's is refused.
        out = fleet(ec2, targeted, [{"InstanceType": "m5.large", "SubnetId": sub["us-east-1b"]}])
        assert out["Instances"] == [] and out["Errors"][0]["ErrorCode"] == "InvalidParameterValue", out
        # Into the reservation, once: then it is full.
        out = fleet(ec2, targeted, here, total=2)
        assert [len(i["InstanceIds"]) for i in out["Instances"]] == [1], out
        assert [e["ErrorCode"] for e in out["Errors"]] == ["ReservationCapacityExceeded"], out["Errors"]
        launched += out["Instances"][0]["InstanceIds"]
        (now,) = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
        assert now["AvailableInstanceCount"] == 0, now
        # Its instance gone, the room is back.
        ec2.terminate_instances(InstanceIds=launched)
        (now,) = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
        assert now["AvailableInstanceCount"] == 1, now
        ec2.cancel_capacity_reservation(CapacityReservationId=rid)
        out = fleet(ec2, targeted, here)
        assert out["Errors"][0]["ErrorCode"] == "InvalidCapacityReservationId.NotFound", out
    finally:
        if launched:
            ec2.terminate_instances(InstanceIds=launched)


@test
def fault_injection():
    ec2, ssm, eks = client("ec2"), client("ssm"), client("eks")
    try:
        control("DELETE", "/_gap/calls")
        assert control("POST", "/_gap/faults", {"throttle": {"count": 2, "operation": "DescribeVpcs"}})[0] == 200
        expect_error("RequestLimitExceeded", 400, ec2.describe_vpcs)
        expect_error("RequestLimitExceeded", 400, ec2.describe_vpcs)
        ec2.describe_vpcs()
        ec2.describe_subnets()
        _, calls = control("GET", "/_gap/calls")
        assert [(c["operation"], c["status"], c["fault"]) for c in calls] == [
            ("DescribeVpcs", 400, "throttle"), ("DescribeVpcs", 400, "throttle"),
            ("DescribeVpcs", 200, None), ("DescribeSubnets", 200, None)], calls
        control("POST", "/_gap/faults", {"throttle": [{"count": 1, "service": "ssm"},
                                                      {"count": 1, "service": "eks"}]})
        expect_error("ThrottlingException", 400, ssm.get_parameter, Name="/x")
        e = expect_error("ThrottlingException", 400, eks.list_clusters)
        assert e.response["ResponseMetadata"]["HTTPHeaders"]["x-amzn-errortype"] == "ThrottlingException"
        # Every call of one operation until cleared (no count).
        control("POST", "/_gap/faults", {"throttle": {"operation": "DescribeImages"}})
        for _ in range(3):
            expect_error("RequestLimitExceeded", 400, ec2.describe_images, ImageIds=["ami-x"])
        control("DELETE", "/_gap/faults")
        control("POST", "/_gap/faults", {"server_error": {"count": 1, "operation": "DescribeSubnets"}})
        expect_error("InternalError", 500, ec2.describe_subnets)
        ec2.describe_subnets()
        # An SDK's standard retries ride over one 5xx.
        control("POST", "/_gap/faults", {"server_error": {"count": 1, "operation": "DescribeSubnets"}})
        client("ec2", attempts=3).describe_subnets()
        control("POST", "/_gap/faults", {"latency": {"ms": 400, "operation": "DescribeVpcs"}})
        # While the slow call is held it is listed in flight, and only until it is answered.
        seen = []

        def look_midway():
            time.sleep(0.2)
            seen.extend(control("GET", "/_gap/calls/in-flight")[1])

        watcher = threading.Thread(target=look_midway)
        watcher.start()
        t = time.time()
        ec2.describe_vpcs()
        slow = time.time() - t
        watcher.join()
        assert [(c["service"], c["operation"]) for c in seen] == [("ec2", "DescribeVpcs")], seen
        assert control("GET", "/_gap/calls/in-flight") == (200, [])
        t = time.time()
        ec2.describe_subnets()
        fast = time.time() - t
        assert slow >= 0.4 and fast < 0.4, (slow, fast)
        control("DELETE", "/_gap/faults")
        control("POST", "/_gap/faults", {"latency_ms": 200})
        t = time.time()
        ssm.put_parameter(Name="/jointer-test/latency", Value="1", Type="String", Overwrite=True)
        assert time.time() - t >= 0.2
        control("DELETE", "/_gap/faults")
        vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
        control("POST", "/_gap/faults", {"fail_nth_mutating": 2})
        ec2.create_tags(Resources=[vpc], Tags=[{"Key": "n", "Value": "1"}])   # mutating #1
        ec2.describe_vpcs()                                                   # reads do not count
        expect_error("InternalError", 500, ec2.create_tags, Resources=[vpc],
                     Tags=[{"Key": "n", "Value": "2"}])                       # mutating #2 fails
        ec2.create_tags(Resources=[vpc], Tags=[{"Key": "n", "Value": "3"}])   # and only that one
        assert control("GET", "/_gap/faults")[1]["fail_nth_mutating"] is None
        control("POST", "/_gap/faults", {"fail_nth_mutating": {"n": 1, "code": "UnauthorizedOperation",
                                                               "status": 403}})
        expect_error("UnauthorizedOperation", 403, ec2.create_tags, Resources=[vpc],
                     Tags=[{"Key": "n", "Value": "4"}])
        assert control("POST", "/_gap/faults", {"bogus": 1})[0] == 400
        st, faults = control("DELETE", "/_gap/faults")
        assert st == 200 and faults == {"rules": [], "latency": [], "ice": [], "fail_nth_mutating": None}
    finally:
        control("DELETE", "/_gap/faults")


def node_of(instance_id):
    r = kubectl("get", "nodes", "-o", "json")
    for n in json.loads(r.stdout)["items"]:
        if n["spec"].get("providerID", "").endswith("/" + instance_id):
            return n
    return None


def is_ready(node):
    return node and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in node.get("status", {}).get("conditions", []))


@test
def node_join_end_to_end():
    ec2, iam, ssm, eks = client("ec2"), client("iam"), client("ssm"), client("eks")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    data = user_data(cluster, labels="karpenter.sh/nodepool=default,jointer.dev/test=e2e",
                     taints="jointer.dev/dedicated=e2e:NoSchedule", max_pods=29, quoted=True)
    lt, _, _ = fleet_setup(ec2, iam, ssm, w, data)
    ns = unique("e2e")
    kubectl("create", "namespace", ns)
    instance = None
    try:
        out = fleet(ec2, lt, [{"InstanceType": "m5.large", "SubnetId": w["subnets"]["private"]["us-east-1a"]}],
                    tags={f"kubernetes.io/cluster/{CLUSTER}": "owned", "karpenter.sh/nodepool": "default"})
        (instance,) = out["Instances"][0]["InstanceIds"]
        t_running = time.time()  # moto's instances are running as soon as RunInstances returns
        node = wait_for("the Node to be Ready", 30, lambda: (lambda n: n if is_ready(n) else None)(node_of(instance)))
        latency = time.time() - t_running
        FIGURES["node registration latency (instance running -> Node Ready)"] = f"{latency:.1f} s"
        d = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
        meta, labels = node["metadata"], node["metadata"]["labels"]
        assert meta["name"] == d["PrivateDnsName"]
        assert node["spec"]["providerID"] == f"aws:///us-east-1a/{instance}"
        for k, v in {"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a",
                     "topology.kubernetes.io/region": "us-east-1", "kubernetes.io/arch": "amd64",
                     "kubernetes.io/os": "linux", "kubernetes.io/hostname": d["PrivateDnsName"],
                     "karpenter.sh/capacity-type": "on-demand", "karpenter.sh/nodepool": "default",
                     "jointer.dev/test": "e2e"}.items():
            assert labels.get(k) == v, (k, labels.get(k))
        assert {"key": "jointer.dev/dedicated", "value": "e2e", "effect": "NoSchedule"} in node["spec"]["taints"]
        cap, alloc = node["status"]["capacity"], node["status"]["allocatable"]
        assert cap["cpu"] == "2" and cap["pods"] == "29", cap
        assert alloc["cpu"] == "1930m", alloc  # EKS kube-reserved for 2 vCPUs: 70m
        assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"

        # kube-scheduler places a tolerating pod there and kwok runs it; one that does not
        # tolerate the taint stays Pending.
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tolerates", "namespace": ns},
               "spec": {"nodeSelector": {"jointer.dev/test": "e2e"},
                        "tolerations": [{"key": "jointer.dev/dedicated", "operator": "Equal",
                                         "value": "e2e", "effect": "NoSchedule"}],
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        other = json.loads(json.dumps(pod))
        other["metadata"]["name"] = "intolerant"
        del other["spec"]["tolerations"]
        kubectl("apply", "-f", "-", stdin=json.dumps(other))

        def running():
            p = json.loads(kubectl("-n", ns, "get", "pod", "tolerates", "-o", "json").stdout)
            return p if p.get("status", {}).get("phase") == "Running" else None
        p = wait_for("the tolerating pod to run", 30, running)
        assert p["spec"]["nodeName"] == meta["name"]

        def unschedulable():
            p = json.loads(kubectl("-n", ns, "get", "pod", "intolerant", "-o", "json").stdout)
            return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                       for c in p.get("status", {}).get("conditions", []))
        wait_for("the intolerant pod to be marked unschedulable", 30, unschedulable)

        ec2.terminate_instances(InstanceIds=[instance])
        t = time.time()
        wait_for("the Node to be deleted", 30, lambda: node_of(instance) is None)
        FIGURES["node deletion latency (instance terminated -> Node gone)"] = f"{time.time() - t:.1f} s"
        instance = None
    finally:
        if instance:
            ec2.terminate_instances(InstanceIds=[instance])
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


@test
def node_join_spot_and_refusals():
    ec2, iam, ssm, eks = client("ec2"), client("iam"), client("ssm"), client("eks")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    tags = {f"kubernetes.io/cluster/{CLUSTER}": "owned"}
    sub = w["subnets"]["private"]["us-east-1b"]
    cases = {
        "spot": user_data(cluster, labels="jointer.dev/test=spot"),
        "shell": "#!/bin/bash\n/etc/eks/bootstrap.sh jointer-test\n",
        "endpoint": user_data(cluster, endpoint="https://example.invalid"),
        "label": user_data(cluster, labels="kubernetes.io/role=worker"),
    }
    instances = {}
    try:
        for case, data in cases.items():
            lt, _, _ = fleet_setup(ec2, iam, ssm, w, data)
            out = fleet(ec2, lt, [{"InstanceType": "m6i.large", "SubnetId": sub}],
                        capacity_type="spot" if case == "spot" else "on-demand", tags=tags)
            instances[case] = out["Instances"][0]["InstanceIds"][0]
        node = wait_for("the spot Node", 30, lambda: node_of(instances["spot"]))
        assert node["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "us-east-1b"
        log_path = os.path.join(RUN_DIR, "logs", "nodejoin.log")
        for case in ("shell", "endpoint", "label"):
            wait_for(f"the simulator to refuse {case}", 15,
                     lambda: f"NOT joining {instances[case]}" in open(log_path, encoding="utf-8").read())
            assert node_of(instances[case]) is None, case
    finally:
        ec2.terminate_instances(InstanceIds=list(instances.values()))
    wait_for("the spot Node to go", 30, lambda: node_of(instances["spot"]) is None)


def run_instance(ec2, w, image, data, itype="m5.large", volumes=None, zone="us-east-1a"):
    """One instance of the cluster, launched by RunInstances itself (no launch template)."""
    kwargs = {}
    if volumes:
        kwargs["BlockDeviceMappings"] = [{"DeviceName": d, "Ebs": {"VolumeSize": gib, "VolumeType": "gp3"}}
                                         for d, gib in volumes.items()]
    return ec2.run_instances(
        ImageId=image, InstanceType=itype, MinCount=1, MaxCount=1, UserData=data,
        SubnetId=w["subnets"]["private"][zone], SecurityGroupIds=[w["securityGroups"]["node"]],
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]}],
        **kwargs)["Instances"][0]["InstanceId"]


def joined_nodes(ec2, instances, refused):
    """Waits for the Nodes of `instances` (case -> id) and for the simulator to refuse every
    one of `refused`; answers case -> Node."""
    nodes = {}
    for case, iid in instances.items():
        nodes[case] = wait_for(f"the {case} Node to be Ready", 30,
                               lambda: (lambda n: n if is_ready(n) else None)(node_of(iid)))
    log_path = os.path.join(RUN_DIR, "logs", "nodejoin.log")
    for case, iid in refused.items():
        wait_for(f"the simulator to refuse {case}", 15,
                 lambda: f"NOT joining {iid}" in open(log_path, encoding="utf-8").read())
        assert node_of(iid) is None, case
    return nodes


def refusal(iid):
    log_path = os.path.join(RUN_DIR, "logs", "nodejoin.log")
    return [line for line in open(log_path, encoding="utf-8") if f"NOT joining {iid}" in line][-1]


def own_taints(node):
    """The taints the user data asked for: not those the node lifecycle controller adds
    (node.kubernetes.io/not-ready) until kwok reports the node Ready."""
    return [t for t in node["spec"].get("taints", []) if not t["key"].startswith("node.kubernetes.io/")]


def kib(q):
    """A memory quantity in KiB (the API server may answer 7782Mi for 7969177Ki)."""
    units = {"Ki": 1, "Mi": 1024, "Gi": 1024 ** 2}
    if q[-2:] in units:
        return int(q[:-2]) * units[q[-2:]]
    assert q.isdigit(), q
    return int(q) // 1024


def assert_reserved_memory(node, kube_reserved_mib, eviction_mib=100):
    """allocatable memory = capacity - kube-reserved - the 100Mi hard eviction threshold."""
    cap, alloc = node["status"]["capacity"], node["status"]["allocatable"]
    got = kib(cap["memory"]) - kib(alloc["memory"])
    assert got == (kube_reserved_mib + eviction_mib) * 1024, (got / 1024, kube_reserved_mib)


def bottlerocket_data(cluster, extra=""):
    return f'''[settings.kubernetes]
api-server = "{cluster['endpoint']}"
cluster-certificate = "{cluster['certificateAuthority']['data']}"
cluster-name = "{cluster['name']}"
cluster-dns-ip = "10.96.0.10"
{extra}
'''


@test
def node_join_bottlerocket():
    ec2, ssm, eks = client("ec2"), client("ssm"), client("eks")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    image = ssm.get_parameter(Name=BOTTLEROCKET_PARAM.format(k="1.34", nvidia="", arch="x86_64",
                                                             release="latest"))["Parameter"]["Value"]
    good = bottlerocket_data(cluster, '''max-pods = 29
pods-per-core = 10

[settings.kubernetes.node-labels]
"karpenter.sh/nodepool" = "general"
"jointer.dev/test" = "bottlerocket"

[settings.kubernetes.node-taints]
"dedicated" = ["spot:NoSchedule"]
"karpenter.sh/unregistered" = [":NoExecute"]

[settings.kubernetes.kube-reserved]
cpu = "70m"
[settings.kubernetes.system-reserved]
[settings.kubernetes.eviction-hard]
"memory.available" = "100Mi"

[settings.host-containers.admin]
enabled = true
''')
    defaults = bottlerocket_data(cluster)
    instances, refused = {}, {}
    try:
        instances["custom"] = run_instance(ec2, w, image, good, volumes={"/dev/xvda": 4, "/dev/xvdb": 30})
        instances["defaults"] = run_instance(ec2, w, image, defaults, itype="m5.xlarge")
        refused["broken TOML"] = run_instance(ec2, w, image, good.replace("[settings.kubernetes]", "[settings.kubernetes"))
        refused["no cluster-name"] = run_instance(ec2, w, image, good.replace("cluster-name =", "# cluster-name ="))
        refused["bad taint"] = run_instance(ec2, w, image, good.replace('["spot:NoSchedule"]', '["spot"]'))
        refused["bad label"] = run_instance(ec2, w, image, good + '\n[settings.kubernetes.node-labels]\n')
        refused["kubelet label"] = run_instance(ec2, w, image, good.replace(
            '"jointer.dev/test" = "bottlerocket"', '"kubernetes.io/role" = "worker"'))
        nodes = joined_nodes(ec2, instances, refused)
        node = nodes["custom"]
        labels, info = node["metadata"]["labels"], node["status"]["nodeInfo"]
        assert labels["karpenter.sh/nodepool"] == "general" and labels["jointer.dev/test"] == "bottlerocket"
        assert labels["kubernetes.io/os"] == "linux" and labels["kubernetes.io/arch"] == "amd64"
        assert own_taints(node) == [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"},
                                          {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}], node["spec"]
        assert info["osImage"] == "Bottlerocket OS 1.50.0 (aws-k8s-1.34)" and info["operatingSystem"] == "linux", info
        assert info["containerRuntimeVersion"].startswith("containerd://")
        cap, alloc = node["status"]["capacity"], node["status"]["allocatable"]
        # max-pods 29, capped by pods-per-core: 10 x 2 cores; kube-reserved memory from those 20.
        assert cap["pods"] == "20" and alloc["cpu"] == "1930m", (cap, alloc)
        assert_reserved_memory(node, 11 * 20 + 255)
        assert cap["ephemeral-storage"] == "30Gi", cap  # the second volume, not the 4 GiB root
        # No max-pods: ENI-limited (m5.xlarge: 4 ENIs x 14 addresses -> 58); no second volume: 20 GiB.
        d = nodes["defaults"]
        assert d["status"]["capacity"]["pods"] == "58" and d["status"]["capacity"]["ephemeral-storage"] == "20Gi"
        assert_reserved_memory(d, 11 * 58 + 255)
        assert own_taints(d) == []
        assert "(bottlerocket): Bottlerocket user data is not valid TOML" in refusal(refused["broken TOML"])
        assert "cluster-name is missing" in refusal(refused["no cluster-name"])
        assert "is not value:Effect" in refusal(refused["bad taint"])
        assert "not valid TOML" in refusal(refused["bad label"])  # the table twice
        assert "kubelet refuses" in refusal(refused["kubelet label"])
    finally:
        ec2.terminate_instances(InstanceIds=list(instances.values()) + list(refused.values()))
    for case, iid in instances.items():
        wait_for(f"the {case} Node to go", 30, lambda: node_of(iid) is None)


AL2_USER_PART = """--BOUNDARY
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo "the user's own part runs first; /etc/eks/bootstrap.sh is only named here"
"""


def al2_data(cluster, bootstrap_args="", extra_args="", ca=None):
    ca = ca if ca is not None else cluster["certificateAuthority"]["data"]
    return f"""MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="BOUNDARY"

{AL2_USER_PART}
--BOUNDARY
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash -xe
exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1
/etc/eks/bootstrap.sh '{cluster["name"]}' --apiserver-endpoint '{cluster["endpoint"]}' --b64-cluster-ca '{ca}' \\
--dns-cluster-ip '10.96.0.10' \\
{bootstrap_args}--use-max-pods false \\
--kubelet-extra-args '{extra_args}'
--BOUNDARY--
"""


@test
def node_join_al2():
    ec2, ssm, eks = client("ec2"), client("ssm"), client("eks")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    image = ssm.get_parameter(Name=AL2_PARAM.format(k="1.32", suffix=""))["Parameter"]["Value"]
    gpu = ssm.get_parameter(Name=AL2_PARAM.format(k="1.32", suffix="-gpu"))["Parameter"]["Value"]
    good = al2_data(cluster, extra_args=(
        '--node-labels="karpenter.sh/nodepool=general,jointer.dev/test=al2" '
        '--register-with-taints="dedicated=spot:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=20'))
    instances, refused = {}, {}
    try:
        instances["custom"] = run_instance(ec2, w, image, good, volumes={"/dev/xvda": 40})
        # --use-max-pods false without --max-pods: the kubelet's default 110; explicit reservations.
        instances["gpu"] = run_instance(ec2, w, gpu, al2_data(
            cluster, extra_args="--kube-reserved=cpu=100m,memory=1Gi --system-reserved=memory=200Mi "
                                "--eviction-hard=memory.available<5%,nodefs.available<20%"),
            itype="g5.xlarge", volumes={"/dev/xvda": 50})
        refused["no CA"] = run_instance(ec2, w, image, good.replace(" --b64-cluster-ca", " --no-ca"))
        refused["no bootstrap.sh"] = run_instance(ec2, w, image, good.replace("/etc/eks/bootstrap.sh '", "echo '"))
        refused["wrong CA"] = run_instance(ec2, w, image, al2_data(cluster, ca=base64.b64encode(b"x").decode()))
        nodes = joined_nodes(ec2, instances, refused)
        node = nodes["custom"]
        labels, info = node["metadata"]["labels"], node["status"]["nodeInfo"]
        assert labels["karpenter.sh/nodepool"] == "general" and labels["jointer.dev/test"] == "al2"
        assert labels["kubernetes.io/os"] == "linux"
        assert own_taints(node) == [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"},
                                          {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}], node["spec"]
        assert info["osImage"] == "Amazon Linux 2" and info["kernelVersion"].startswith("5.10."), info
        cap = node["status"]["capacity"]
        assert cap["pods"] == "20" and cap["ephemeral-storage"] == "40Gi", cap
        # bootstrap.sh reserves memory for the ENI-limited max pods (m5.large: 29), not --max-pods.
        assert_reserved_memory(node, 11 * 29 + 255)
        g = nodes["gpu"]
        gcap, galloc = g["status"]["capacity"], g["status"]["allocatable"]
        assert gcap["pods"] == "110" and gcap["nvidia.com/gpu"] == "1", gcap
        assert gcap["ephemeral-storage"] == "50Gi", gcap  # /dev/xvda, though moto's copy says /dev/sda1
        assert galloc["cpu"] == "3900m", galloc  # 4 cores less the 100m kube-reserved
        mem = kib(gcap["memory"])
        assert abs(kib(galloc["memory"]) - (mem - 1024 * 1024 - 200 * 1024 - mem * 0.05)) <= 1, galloc
        assert "(al2): the bootstrap.sh call has no --b64-cluster-ca" in refusal(refused["no CA"])
        assert "part calling /etc/eks/bootstrap.sh" in refusal(refused["no bootstrap.sh"])
        assert "is not the cluster's CA" in refusal(refused["wrong CA"])
    finally:
        ec2.terminate_instances(InstanceIds=list(instances.values()) + list(refused.values()))
    for case, iid in instances.items():
        wait_for(f"the {case} Node to go", 30, lambda: node_of(iid) is None)


def windows_data(cluster, extra_args="", params=None):
    params = params if params is not None else (
        f"-EKSClusterName '{cluster['name']}' -APIServerEndpoint '{cluster['endpoint']}' "
        f"-Base64ClusterCA '{cluster['certificateAuthority']['data']}'")
    return f"""<powershell>
Write-Host "the user's own lines come first"
[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"
& $EKSBootstrapScriptFile {params} -KubeletExtraArgs '{extra_args}' -DNSClusterIP '10.96.0.10'
</powershell>
"""


@test
def node_join_windows():
    ec2, ssm, eks = client("ec2"), client("ssm"), client("eks")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    win2019 = ssm.get_parameter(Name=WINDOWS_PARAM.format(year="2019", k="1.34"))["Parameter"]["Value"]
    win2022 = ssm.get_parameter(Name=WINDOWS_PARAM.format(year="2022", k="1.34"))["Parameter"]["Value"]
    arm = amis(ssm)["arm64"]
    good = windows_data(cluster, '--node-labels="karpenter.sh/nodepool=win" '
                                 '--register-with-taints="karpenter.sh/unregistered:NoExecute"')
    instances, refused = {}, {}
    try:
        instances["2019"] = run_instance(ec2, w, win2019, good, volumes={"/dev/sda1": 60})
        instances["2022"] = run_instance(ec2, w, win2022, windows_data(cluster, "--max-pods=40"),
                                         volumes={"/dev/sda1": 80})
        refused["arm64"] = run_instance(ec2, w, arm, good, itype="m6g.large")
        refused["no CA"] = run_instance(ec2, w, win2022, windows_data(
            cluster, params=f"-EKSClusterName '{cluster['name']}' -APIServerEndpoint '{cluster['endpoint']}'"))
        refused["no tags"] = run_instance(ec2, w, win2022, good.replace("</powershell>", ""))
        nodes = joined_nodes(ec2, instances, refused)
        node = nodes["2019"]
        labels, info = node["metadata"]["labels"], node["status"]["nodeInfo"]
        assert labels["kubernetes.io/os"] == "windows" and labels["beta.kubernetes.io/os"] == "windows"
        assert labels["node.kubernetes.io/windows-build"] == "10.0.17763", labels
        assert labels["karpenter.sh/nodepool"] == "win" and labels["kubernetes.io/arch"] == "amd64"
        assert own_taints(node) == [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
        assert info["operatingSystem"] == "windows" and info["osImage"] == "Windows Server 2019 Datacenter", info
        cap = node["status"]["capacity"]
        assert cap["pods"] == "110" and cap["ephemeral-storage"] == "60Gi", cap  # not ENI-limited
        assert_reserved_memory(node, 11 * 110 + 255)
        n22 = nodes["2022"]
        assert n22["metadata"]["labels"]["node.kubernetes.io/windows-build"] == "10.0.20348"
        assert n22["status"]["capacity"]["pods"] == "40" and own_taints(n22) == []
        assert n22["status"]["capacity"]["ephemeral-storage"] == "80Gi"
        assert_reserved_memory(n22, 11 * 40 + 255)
        assert "(windows): Windows user data on an arm64 instance" in refusal(refused["arm64"])
        assert "without -Base64ClusterCA" in refusal(refused["no CA"])
        assert "no <powershell>...</powershell>" in refusal(refused["no tags"])
    finally:
        ec2.terminate_instances(InstanceIds=list(instances.values()) + list(refused.values()))
    for case, iid in instances.items():
        wait_for(f"the {case} Node to go", 30, lambda: node_of(iid) is None)


@test
def node_join_al2023_and_custom_images():
    ec2, ssm, eks = client("ec2"), client("ssm"), client("eks")
    w = json.load(open(os.path.join(RUN_DIR, "world.json"), encoding="utf-8"))
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    # A custom AMI: the user's own image, with their own AL2023 NodeConfig (the user data decides).
    custom = ec2.register_image(Name=unique("my-golden-ami"), Description="custom")["ImageId"]
    instances = {}
    try:
        instances["maxPods"] = run_instance(ec2, w, amis(ssm)["x86_64"], user_data(cluster, max_pods=10),
                                            volumes={"/dev/xvda": 25})
        instances["custom"] = run_instance(ec2, w, custom, user_data(cluster, labels="jointer.dev/ami=custom"),
                                           volumes={"/dev/sda1": 35})
        nodes = joined_nodes(ec2, instances, {})
        n = nodes["maxPods"]
        assert n["status"]["capacity"]["pods"] == "10" and n["status"]["capacity"]["ephemeral-storage"] == "25Gi"
        # nodeadm reserves memory for the ENI-limited max pods (m5.large: 29), not maxPods.
        assert_reserved_memory(n, 11 * 29 + 255)
        c = nodes["custom"]
        assert c["metadata"]["labels"]["jointer.dev/ami"] == "custom"
        assert c["status"]["nodeInfo"]["osImage"].startswith("Amazon Linux 2023")
        assert c["status"]["capacity"]["ephemeral-storage"] == "35Gi"  # its own root device
    finally:
        ec2.terminate_instances(InstanceIds=list(instances.values()))
    for case, iid in instances.items():
        wait_for(f"the {case} Node to go", 30, lambda: node_of(iid) is None)


# ---- ECR and the registry ---------------------------------------------------------------

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class Registry:
    """The local registry, reached as a client of ECR does: GetAuthorizationToken's
    proxyEndpoint and token (HTTP Basic, user AWS)."""

    def __init__(self, ecr=None, password=None):
        data = (ecr or client("ecr")).get_authorization_token()["authorizationData"][0]
        user, _, token_password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
        assert user == "AWS", user
        self.endpoint = data["proxyEndpoint"]
        self.password = token_password if password is None else password
        u = urlsplit(self.endpoint)
        assert u.scheme == "http" and u.hostname == "127.0.0.1", self.endpoint
        self.host, self.port = u.hostname, u.port

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            auth = base64.b64encode(f"AWS:{self.password}".encode()).decode()
            conn.request(method, path, body=body, headers={"Authorization": f"Basic {auth}", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def push_blob(self, repo, data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        st, h, _ = self.request("POST", f"/v2/{repo}/blobs/uploads/")
        assert st == 202, st
        loc = urlsplit(h["location"])
        path = loc.path + "?" + (loc.query + "&" if loc.query else "") + f"digest={digest}"
        st, _, body = self.request("PUT", path, body=data, headers={"Content-Type": "application/octet-stream"})
        assert st == 201, (st, body)
        return {"digest": digest, "size": len(data)}

    def push_image(self, repo, tag, layer=None):
        """A minimal OCI image (one layer, a config): its digest, and the layer's size."""
        layer = layer if layer is not None else os.urandom(64)
        lay = self.push_blob(repo, layer)
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "rootfs": {"type": "layers", "diff_ids": [lay["digest"]]}}).encode()
        cfg = self.push_blob(repo, config)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **lay}]}).encode()
        st, h, body = self.request("PUT", f"/v2/{repo}/manifests/{tag}", body=manifest,
                                   headers={"Content-Type": OCI_MANIFEST})
        assert st == 201, (st, body)
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        assert h["docker-content-digest"] == digest
        return digest, len(layer), manifest

    def has_manifest(self, repo, ref):
        st, _, _ = self.request("HEAD", f"/v2/{repo}/manifests/{ref}", headers={"Accept": OCI_MANIFEST})
        assert st in (200, 404), st
        return st == 200


@test
def ecr_repositories():
    ecr = client("ecr")
    name = unique("team/app")
    repo = ecr.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE",
                                 imageScanningConfiguration={"scanOnPush": True},
                                 tags=[{"Key": "jointer.dev/cluster", "Value": CLUSTER}])["repository"]
    assert repo["repositoryName"] == name and repo["registryId"] == "123456789012"
    assert repo["repositoryArn"] == f"arn:aws:ecr:{REGION}:123456789012:repository/{name}"
    assert repo["repositoryUri"] == f"123456789012.dkr.ecr.{REGION}.amazonaws.com/{name}"
    assert repo["imageTagMutability"] == "IMMUTABLE"
    assert repo["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repo["encryptionConfiguration"] == {"encryptionType": "AES256"}  # the default
    assert abs(repo["createdAt"].timestamp() - time.time()) < 60
    expect_error("RepositoryAlreadyExistsException", 400, ecr.create_repository, repositoryName=name)
    other = ecr.create_repository(repositoryName=unique("other"))["repository"]
    assert other["imageTagMutability"] == "MUTABLE" and other["imageScanningConfiguration"] == {"scanOnPush": False}

    (d,) = ecr.describe_repositories(repositoryNames=[name])["repositories"]
    assert d == repo, (d, repo)
    expect_error("RepositoryNotFoundException", 400, ecr.describe_repositories, repositoryNames=["nope"])
    # Pages (moto ignores maxResults; the gap layer pages its answer).
    first = ecr.describe_repositories(maxResults=1)
    assert len(first["repositories"]) == 1 and first.get("nextToken")
    rest = ecr.describe_repositories(maxResults=1, nextToken=first["nextToken"])
    assert len(rest["repositories"]) == 1 and "nextToken" not in rest
    assert {first["repositories"][0]["repositoryName"], rest["repositories"][0]["repositoryName"]} == \
        {name, other["repositoryName"]}
    assert len(ecr.get_paginator("describe_repositories").paginate(PaginationConfig={"PageSize": 1})
               .build_full_result()["repositories"]) == 2

    policy = json.dumps({"rules": [{"rulePriority": 1, "description": "keep 5",
                                    "selection": {"tagStatus": "any", "countType": "imageCountMoreThan",
                                                  "countNumber": 5},
                                    "action": {"type": "expire"}}]})
    expect_error("LifecyclePolicyNotFoundException", 400, ecr.get_lifecycle_policy, repositoryName=name)
    put = ecr.put_lifecycle_policy(repositoryName=name, lifecyclePolicyText=policy)
    assert put["repositoryName"] == name and json.loads(put["lifecyclePolicyText"]) == json.loads(policy)
    got = ecr.get_lifecycle_policy(repositoryName=name)
    assert json.loads(got["lifecyclePolicyText"]) == json.loads(policy) and got["registryId"] == "123456789012"
    bad = json.loads(policy)
    bad["rules"][0]["selection"]["countType"] = "imageCountLessThan"
    expect_error("InvalidParameterException", 400, ecr.put_lifecycle_policy, repositoryName=name,
                 lifecyclePolicyText=json.dumps(bad))

    assert ecr.put_image_tag_mutability(repositoryName=name, imageTagMutability="MUTABLE")["imageTagMutability"] \
        == "MUTABLE"
    assert ecr.put_image_scanning_configuration(repositoryName=name, imageScanningConfiguration={
        "scanOnPush": False})["imageScanningConfiguration"] == {"scanOnPush": False}
    (d,) = ecr.describe_repositories(repositoryNames=[name])["repositories"]
    assert d["imageTagMutability"] == "MUTABLE" and d["imageScanningConfiguration"] == {"scanOnPush": False}

    arn = repo["repositoryArn"]
    assert ecr.list_tags_for_resource(resourceArn=arn)["tags"] == [{"Key": "jointer.dev/cluster", "Value": CLUSTER}]
    ecr.tag_resource(resourceArn=arn, tags=[{"Key": "a", "Value": "1"}, {"Key": "jointer.dev/cluster", "Value": "x"}])
    tags = {t["Key"]: t["Value"] for t in ecr.list_tags_for_resource(resourceArn=arn)["tags"]}
    assert tags == {"a": "1", "jointer.dev/cluster": "x"}, tags
    ecr.untag_resource(resourceArn=arn, tagKeys=["a"])
    assert ecr.list_tags_for_resource(resourceArn=arn)["tags"] == [{"Key": "jointer.dev/cluster", "Value": "x"}]
    expect_error("RepositoryNotFoundException", 400, ecr.list_tags_for_resource,
                 resourceArn=f"arn:aws:ecr:{REGION}:123456789012:repository/nope")

    assert ecr.delete_repository(repositoryName=name)["repository"]["repositoryName"] == name  # empty: no force
    expect_error("RepositoryNotFoundException", 400, ecr.delete_repository, repositoryName=name)
    expect_error("RepositoryNotFoundException", 400, ecr.describe_repositories, repositoryNames=[name])


@test
def ecr_authorization_token_push_and_describe_images():
    ecr = client("ecr")
    t0 = time.time()
    (data,) = ecr.get_authorization_token()["authorizationData"]
    assert data["proxyEndpoint"] == f"http://{os.environ['JOINTER_TESTENV_REGISTRY']}", data
    assert 11.9 * 3600 < data["expiresAt"].timestamp() - t0 < 12.1 * 3600, data["expiresAt"]
    assert base64.b64decode(data["authorizationToken"]).decode().startswith("AWS:")
    reg = Registry(ecr)
    st, _, _ = reg.request("GET", "/v2/")
    assert st == 200
    assert Registry(ecr, password="wrong").request("GET", "/v2/")[0] == 401

    name = unique("jointer-controller")
    expect_error("RepositoryNotFoundException", 400, ecr.describe_images, repositoryName=name)
    ecr.create_repository(repositoryName=name)
    assert ecr.describe_images(repositoryName=name)["imageDetails"] == []
    digest, layer_size, manifest = reg.push_image(name, "v1")
    t_push = time.time()
    digest2, _, _ = reg.push_image(name, "untagged-soon")
    assert reg.request("DELETE", f"/v2/{name}/manifests/untagged-soon")[0] == 202  # digest2 stays, untagged

    (img,) = ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": "v1"}])["imageDetails"]
    assert img["imageDigest"] == digest and img["imageTags"] == ["v1"], img
    assert img["registryId"] == "123456789012" and img["repositoryName"] == name
    assert img["imageSizeInBytes"] == layer_size
    assert img["imageManifestMediaType"] == OCI_MANIFEST
    assert img["artifactMediaType"] == "application/vnd.oci.image.config.v1+json"
    assert abs(img["imagePushedAt"].timestamp() - t_push) < 5, (img["imagePushedAt"], t_push)
    assert ecr.describe_images(repositoryName=name, imageIds=[{"imageDigest": digest}])["imageDetails"] == [img]
    everything = ecr.describe_images(repositoryName=name)["imageDetails"]
    assert [i["imageDigest"] for i in everything] == [digest, digest2], everything
    assert "imageTags" not in everything[1]
    assert [i["imageDigest"] for i in ecr.describe_images(
        repositoryName=name, filter={"tagStatus": "UNTAGGED"})["imageDetails"]] == [digest2]
    page = ecr.describe_images(repositoryName=name, maxResults=1)
    assert len(page["imageDetails"]) == 1 and page["nextToken"]
    e = expect_error("ImageNotFoundException", 400, ecr.describe_images, repositoryName=name,
                     imageIds=[{"imageTag": "v2"}])
    assert "imageTag:'v2'" in str(e) and name in str(e), e
    expect_error("ImageNotFoundException", 400, ecr.describe_images, repositoryName=name,
                 imageIds=[{"imageDigest": "sha256:" + "0" * 64}])
    ids = ecr.list_images(repositoryName=name)["imageIds"]
    assert ids == [{"imageDigest": digest, "imageTag": "v1"}, {"imageDigest": digest2}], ids

    got = ecr.batch_get_image(repositoryName=name, imageIds=[{"imageTag": "v1"}, {"imageTag": "v9"}],
                              acceptedMediaTypes=[OCI_MANIFEST])
    (one,) = got["images"]
    assert one["imageId"] == {"imageDigest": digest, "imageTag": "v1"} and one["imageManifest"] == manifest.decode()
    assert one["imageManifestMediaType"] == OCI_MANIFEST
    assert got["failures"] == [{"imageId": {"imageTag": "v9"}, "failureCode": "ImageNotFound",
                                "failureReason": "Requested image not found"}], got["failures"]
    expect_error("RepositoryNotFoundException", 400, ecr.batch_get_image, repositoryName="nope",
                 imageIds=[{"imageTag": "v1"}])
    # Every request of the push is in the registry's request log, none of the gap layer's own.
    _, log = control("GET", "/_gap/registry/requests")
    assert any(r["method"] == "PUT" and r["path"] == f"/v2/{name}/manifests/v1" and r["status"] == 201
               for r in log), log
    assert {r["method"] for r in log} >= {"POST", "PUT", "GET"}
    assert not any(r["user_agent"].startswith("jointer-gap/") for r in log)
    _, everything = control("GET", "/_gap/registry/requests?all=1")
    assert any(r["user_agent"].startswith("jointer-gap/") for r in everything)
    assert control("DELETE", "/_gap/registry/requests") == (200, {"cleared": True})
    assert control("GET", "/_gap/registry/requests?all=1") == (200, [])
    assert reg.has_manifest(name, "v1")  # only the view is emptied
    assert [(r["method"], r["path"]) for r in control("GET", "/_gap/registry/requests")[1]] == \
        [("HEAD", f"/v2/{name}/manifests/v1")]


@test
def ecr_batch_delete_image_and_force_delete_repository():
    ecr = client("ecr")
    reg = Registry(ecr)
    name = unique("app")
    ecr.create_repository(repositoryName=name)
    d1, _, _ = reg.push_image(name, "a")
    st, _, body = reg.request("GET", f"/v2/{name}/manifests/a", headers={"Accept": OCI_MANIFEST})
    assert reg.request("PUT", f"/v2/{name}/manifests/b", body=body, headers={"Content-Type": OCI_MANIFEST})[0] == 201
    d2, _, _ = reg.push_image(name, "c")
    # By tag: the tag goes; the image stays while it has another tag.
    out = ecr.batch_delete_image(repositoryName=name, imageIds=[{"imageTag": "a"}, {"imageTag": "zz"}])
    assert out["imageIds"] == [{"imageDigest": d1, "imageTag": "a"}], out
    assert out["failures"] == [{"imageId": {"imageTag": "zz"}, "failureCode": "ImageNotFound",
                                "failureReason": "Requested image not found"}]
    (img,) = ecr.describe_images(repositoryName=name, imageIds=[{"imageDigest": d1}])["imageDetails"]
    assert img["imageTags"] == ["b"]
    assert not reg.has_manifest(name, "a") and reg.has_manifest(name, "b")
    # Its last tag: the image goes too.
    ecr.batch_delete_image(repositoryName=name, imageIds=[{"imageTag": "b"}])
    assert not reg.has_manifest(name, d1)
    expect_error("ImageNotFoundException", 400, ecr.describe_images, repositoryName=name,
                 imageIds=[{"imageDigest": d1}])
    # By digest: the image and its tags.
    out = ecr.batch_delete_image(repositoryName=name, imageIds=[{"imageDigest": d2}])
    assert out["imageIds"] == [{"imageDigest": d2, "imageTag": "c"}] and out["failures"] == [], out
    assert ecr.describe_images(repositoryName=name)["imageDetails"] == []

    reg.push_image(name, "d")
    e = expect_error("RepositoryNotEmptyException", 400, ecr.delete_repository, repositoryName=name)
    assert "still contains images" in str(e)
    assert ecr.delete_repository(repositoryName=name, force=True)["repository"]["repositoryName"] == name
    assert not reg.has_manifest(name, "d")
    _, log = control("GET", "/_gap/registry/requests?all=1")
    assert any(r["method"] == "DELETE" and r["path"].startswith(f"/v2/{name}/manifests/sha256:") for r in log)
    ecr.create_repository(repositoryName=name)  # a new repository of that name starts empty
    assert ecr.describe_images(repositoryName=name)["imageDetails"] == []
    assert ecr.list_images(repositoryName=name)["imageIds"] == []


def pod_status(ns, name):
    return json.loads(kubectl("-n", ns, "get", "pod", name, "-o", "json").stdout)


def condition(pod, kind):
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def waiting_reason(pod):
    st = (pod.get("status", {}).get("containerStatuses") or [{}])[0]
    return (st.get("state", {}).get("waiting") or {}).get("reason"), st


@test
def image_pulls_of_ecr_images():
    ecr = client("ecr")
    reg = Registry(ecr)
    name = unique("pulled")
    uri = ecr.create_repository(repositoryName=name)["repository"]["repositoryUri"]
    ns = unique("pull")
    kubectl("create", "namespace", ns)

    def pod(pod_name, image):
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": ns},
                           "spec": {"nodeSelector": {"kubernetes.io/hostname": "system-0"},
                                    "containers": [{"name": "app", "image": image}]}})
    try:
        kubectl("apply", "-f", "-", stdin=pod("pause", "registry.k8s.io/pause:3.10"))
        kubectl("apply", "-f", "-", stdin=pod("missing", f"{uri}:v1"))
        p = wait_for("the pause pod to run", 30, lambda: (lambda p: p if condition(p, "Ready").get("status") == "True"
                                                          else None)(pod_status(ns, "pause")))
        assert p["status"]["phase"] == "Running"
        assert "jointer.dev/image-pull" not in p["metadata"].get("annotations", {})

        t0 = time.time()
        seen = set()

        def failed_pull():
            p = pod_status(ns, "missing")
            assert condition(p, "Ready").get("status") != "True", p["status"]
            reason, st = waiting_reason(p)
            if reason:
                seen.add(reason)
            return p if {"ErrImagePull", "ImagePullBackOff"} <= seen else None
        p = wait_for("ErrImagePull then ImagePullBackOff", 30, failed_pull, interval=0.1)
        FIGURES["image pull failure (pod created -> ImagePullBackOff)"] = f"{time.time() - t0:.1f} s"
        reason, st = waiting_reason(p)
        assert st["ready"] is False and st["image"] == f"{uri}:v1", st
        assert "manifest unknown" in st["state"]["waiting"]["message"], st
        assert p["status"]["phase"] == "Pending"
        ready = condition(p, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "ContainersNotReady", ready
        assert condition(p, "ContainersReady")["status"] == "False"
        assert p["metadata"]["annotations"]["jointer.dev/image-pull"] == "failed"
        time.sleep(2)
        assert condition(pod_status(ns, "missing"), "Ready").get("status") != "True"

        # Pushed: a new pod with the image starts, pinned by digest too; the failed one
        # starts at the next retry.
        digest, _, _ = reg.push_image(name, "v1")
        kubectl("apply", "-f", "-", stdin=pod("by-tag", f"{uri}:v1"))
        kubectl("apply", "-f", "-", stdin=pod("by-digest", f"{uri}@{digest}"))
        kubectl("apply", "-f", "-", stdin=pod("other-digest", f"{uri}@sha256:{'1' * 64}"))
        for pod_name in ("by-tag", "by-digest", "missing"):
            p = wait_for(f"pod {pod_name} to be Ready", 30,
                         lambda: (lambda p: p if condition(p, "Ready").get("status") == "True"
                                  else None)(pod_status(ns, pod_name)))
            (st,) = p["status"]["containerStatuses"]
            assert p["status"]["phase"] == "Running" and st["ready"] and "running" in st["state"], st
            assert list(st["state"]) == ["running"], st
        wait_for("the other digest to fail", 30, lambda: waiting_reason(pod_status(ns, "other-digest"))[0]
                 in ("ErrImagePull", "ImagePullBackOff"))
        _, log = control("GET", "/_gap/registry/requests")
        assert any(r["method"] == "GET" and r["path"] == f"/v2/{name}/manifests/{digest}"
                   and r["user_agent"].startswith("jointer-kubelet/") for r in log), log
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


@test
def reset_empties_the_registry():
    ecr = client("ecr")
    reg = Registry(ecr)
    name = unique("reset")
    ecr.create_repository(repositoryName=name)
    reg.push_image(name, "v1")
    assert control("GET", "/_gap/registry/requests")[1]
    st, body = control("POST", "/_gap/reset")
    assert st == 200, body
    assert control("GET", "/_gap/registry/requests") == (200, [])
    assert not reg.has_manifest(name, "v1")
    _, log = control("GET", "/_gap/registry/requests")
    assert [(r["method"], r["status"]) for r in log] == [("HEAD", 404)], log
    world()


@test
def reset_clears_everything():
    eks, iam = client("eks"), client("iam")
    _, role, _ = node_role(iam)
    eks.create_access_entry(clusterName=CLUSTER, principalArn=role, type="EC2_LINUX")
    control("POST", "/_gap/faults", {"latency_ms": 1})
    _, prices = control("GET", "/_gap/prices")
    control("PUT", "/_gap/prices", {"us-east-1": {"m5.large": {"on_demand": 1.0, "spot": {}}}})
    st, body = control("POST", "/_gap/reset")
    assert st == 200 and body["moto_status"] == 200, body
    assert control("GET", "/_gap/calls") == (200, [])
    assert control("GET", "/_gap/faults")[1]["latency"] == []
    assert control("GET", "/_gap/prices")[1] == prices
    assert control("GET", "/_gap/state")[1]["access_entries"] == {}
    expect_error("ResourceNotFoundException", 404, eks.describe_cluster, name=CLUSTER)
    world()
    assert eks.list_access_entries(clusterName=CLUSTER)["accessEntries"] == []


def main():
    selected = [t for t in TESTS if not sys.argv[1:] or any(a in t.__name__ for a in sys.argv[1:])]
    t0 = time.time()
    world()
    print(f"world reset in {time.time() - t0:.1f}s", flush=True)
    passed = failed = 0
    for t in selected:
        start = time.time()
        try:
            t()
            passed += 1
            print(f"PASS {t.__name__} ({time.time() - start:.1f}s)", flush=True)
        except Exception as e:  # report and go on with the next test
            failed += 1
            print(f"FAIL {t.__name__} ({time.time() - start:.1f}s): {e!r}", flush=True)
            traceback.print_exc()
    world()
    for k, v in FIGURES.items():
        print(f"{k}: {v}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
