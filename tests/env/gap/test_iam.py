"""Unit tests of iam.py (pure: no test environment needed).

    python3 tests/env/gap/test_iam.py [NAME-SUBSTRING...]

The policies are the controller's (src/bootstrap/aws/permissions.rs) written out by hand for
cluster "demo" in us-east-1, account 123456789012, node role "demo-node", queue "demo".
Plain asserts; one line per test and a final `N passed, M failed`; non-zero exit on failure.
"""

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iam  # noqa: E402

REGION, ACCOUNT, CLUSTER = "us-east-1", "123456789012", "demo"
CLUSTER_TAG = "kubernetes.io/cluster/demo"
EKS_TAG = "eks:eks-cluster-name"
NODEPOOL = "karpenter.sh/nodepool"
NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TOPOLOGY_REGION = "topology.kubernetes.io/region"
NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/demo-node"
CLUSTER_ARN = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/demo"


def ec2(resource):
    return f"arn:aws:ec2:{REGION}:*:{resource}"


CREATED = [ec2(r) for r in ("fleet/*", "instance/*", "volume/*", "network-interface/*",
                            "launch-template/*", "spot-instances-request/*")]
REQUEST_TAGS = {
    "StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": "owned", f"aws:RequestTag/{EKS_TAG}": CLUSTER},
    "StringLike": {f"aws:RequestTag/{NODEPOOL}": "*"},
}
RESOURCE_TAGS = {
    "StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"},
    "StringLike": {f"aws:ResourceTag/{NODEPOOL}": "*"},
}


def profile_tags(kind):
    cond = {
        "StringEquals": {f"aws:{kind}/{CLUSTER_TAG}": "owned", f"aws:{kind}/{TOPOLOGY_REGION}": REGION},
        "StringLike": {f"aws:{kind}/{NODECLASS}": "*"},
    }
    if kind == "RequestTag":
        cond["StringEquals"][f"aws:RequestTag/{EKS_TAG}"] = CLUSTER
    return cond


def merged(*conds):
    out = {}
    for c in conds:
        for op, keys in c.items():
            out.setdefault(op, {}).update(keys)
    return out


PROFILE = f"arn:aws:iam::{ACCOUNT}:instance-profile/*"
NODE_LIFECYCLE = {"Version": "2012-10-17", "Statement": [
    {"Sid": "AllowScopedEC2InstanceAccessActions", "Effect": "Allow",
     "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
     "Resource": [ec2("image/*"), ec2("snapshot/*"), ec2("security-group/*"), ec2("subnet/*"),
                  ec2("capacity-reservation/*"), ec2("placement-group/*")]},
    {"Sid": "AllowScopedEC2LaunchTemplateAccessActions", "Effect": "Allow",
     "Action": ["ec2:RunInstances", "ec2:CreateFleet"], "Resource": ec2("launch-template/*"),
     "Condition": RESOURCE_TAGS},
    {"Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow",
     "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
     "Resource": CREATED, "Condition": REQUEST_TAGS},
    {"Sid": "AllowScopedResourceCreationTagging", "Effect": "Allow", "Action": "ec2:CreateTags",
     "Resource": CREATED,
     "Condition": merged(REQUEST_TAGS, {"StringEquals": {"ec2:CreateAction": [
         "RunInstances", "CreateFleet", "CreateLaunchTemplate"]}})},
    {"Sid": "AllowScopedResourceTagging", "Effect": "Allow", "Action": "ec2:CreateTags",
     "Resource": ec2("instance/*"),
     "Condition": merged(RESOURCE_TAGS, {"ForAllValues:StringEquals": {
         "aws:TagKeys": [EKS_TAG, "karpenter.sh/nodeclaim", "Name"]}})},
    {"Sid": "AllowScopedDeletion", "Effect": "Allow",
     "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
     "Resource": [ec2("instance/*"), ec2("launch-template/*")], "Condition": RESOURCE_TAGS},
]}
IAM_INTEGRATION = {"Version": "2012-10-17", "Statement": [
    {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole",
     "Resource": NODE_ROLE,
     "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
    {"Sid": "AllowScopedInstanceProfileCreationActions", "Effect": "Allow",
     "Action": "iam:CreateInstanceProfile", "Resource": PROFILE,
     "Condition": profile_tags("RequestTag")},
    {"Sid": "AllowScopedInstanceProfileTagActions", "Effect": "Allow",
     "Action": "iam:TagInstanceProfile", "Resource": PROFILE,
     "Condition": merged(profile_tags("ResourceTag"), profile_tags("RequestTag"))},
    {"Sid": "AllowScopedInstanceProfileActions", "Effect": "Allow",
     "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile"],
     "Resource": PROFILE, "Condition": profile_tags("ResourceTag")},
    {"Sid": "AllowInstanceProfileReadActions", "Effect": "Allow",
     "Action": "iam:GetInstanceProfile", "Resource": PROFILE},
    {"Sid": "AllowInstanceProfileListActions", "Effect": "Allow",
     "Action": "iam:ListInstanceProfiles", "Resource": "*"},
]}
EKS_INTEGRATION = {"Version": "2012-10-17", "Statement": [
    {"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster",
     "Resource": CLUSTER_ARN}]}
RESOURCE_DISCOVERY = {"Version": "2012-10-17", "Statement": [
    {"Sid": "AllowRegionalReadActions", "Effect": "Allow",
     "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
     "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": REGION}}},
    {"Sid": "AllowSSMReadActions", "Effect": "Allow", "Action": "ssm:GetParameter",
     "Resource": [f"arn:aws:ssm:{REGION}::parameter/aws/service/*"]},
    {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts",
     "Resource": "*"},
    {"Sid": "AllowUnscopedZonalShiftReadActions", "Effect": "Allow",
     "Action": "arc-zonal-shift:GetManagedResource", "Resource": "*",
     "Condition": {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": CLUSTER_ARN}}},
]}
INTERRUPTION = {"Version": "2012-10-17", "Statement": {
    "Sid": "AllowInterruptionQueueActions", "Effect": "Allow",
    "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
    "Resource": f"arn:aws:sqs:{REGION}:{ACCOUNT}:demo"}}
POLICIES = [NODE_LIFECYCLE, IAM_INTEGRATION, EKS_INTEGRATION, RESOURCE_DISCOVERY, INTERRUPTION]

OWNED = {CLUSTER_TAG: "owned", EKS_TAG: CLUSTER, NODEPOOL: "x"}


class FakeLookup:
    def __init__(self, ec2_tags=None, templates=None, profiles=None):
        self.tags = ec2_tags or {}
        self.templates = templates or []
        self.profiles = profiles or {}

    def ec2_tags(self, region, resource_id):
        return self.tags.get(resource_id)

    def launch_template(self, region, template_id=None, template_name=None, version=None):
        for lt in self.templates:
            if lt["id"] == template_id or lt.get("name") == template_name:
                return lt
        return None

    def instance_profile(self, name):
        return self.profiles.get(name)


def tag_list(tags):
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def world(template_tags=OWNED, eni_tags=OWNED, role=NODE_ROLE):
    data = {
        "ImageId": "ami-1", "SecurityGroupIds": ["sg-1"],
        "IamInstanceProfile": {"Name": "demo_profile"},
        "TagSpecifications": [{"ResourceType": "network-interface", "Tags": tag_list(eni_tags)}]
        if eni_tags else [],
    }
    return FakeLookup(
        ec2_tags={"i-owned": dict(OWNED), "i-other": {NODEPOOL: "x"}},
        templates=[{"id": "lt-1", "name": "karpenter.k8s.aws/abc", "tags": dict(template_tags),
                    "data": data}],
        profiles={"demo_profile": {"arn": f"arn:aws:iam::{ACCOUNT}:instance-profile/demo_profile",
                                   "tags": {}, "roles": [role]}},
    )


def fleet_params(types=("instance", "volume", "fleet"), tags=OWNED, spot=False):
    """CreateFleet as gap.unflatten gives it for the controller's request."""
    return {
        "Type": "instant",
        "LaunchTemplateConfigs": [{
            "LaunchTemplateSpecification": {"LaunchTemplateName": "karpenter.k8s.aws/abc",
                                            "Version": "$Latest"},
            "Overrides": [{"InstanceType": "m5.large", "SubnetId": "subnet-1",
                           "AvailabilityZone": "us-east-1a"},
                          {"InstanceType": "m5.xlarge", "SubnetId": "subnet-2",
                           "AvailabilityZone": "us-east-1b"}],
        }],
        "TargetCapacitySpecification": {"TotalTargetCapacity": "1",
                                        "DefaultTargetCapacityType": "spot" if spot else "on-demand"},
        "TagSpecification": [{"ResourceType": t, "Tag": tag_list(tags)} for t in types],
    }


def check(service, op, params, lookup=None, region=REGION, policies=POLICIES, context=None):
    auths = iam.authorizations(service, op, params, region, ACCOUNT, lookup or world())
    return iam.decide(policies, auths, context), auths


# ---- authorizations ---------------------------------------------------------------------


def test_create_fleet_authorizations_shape():
    auths = iam.authorizations("ec2", "CreateFleet", fleet_params(spot=True), REGION, ACCOUNT,
                               world())
    pairs = {(a.action, a.resource) for a in auths}
    base = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
    for r in ("fleet/*", "instance/*", "volume/*", "network-interface/*",
              "spot-instances-request/*", "launch-template/lt-1", "subnet/subnet-1",
              "subnet/subnet-2", "security-group/sg-1"):
        assert ("ec2:CreateFleet", f"{base}:{r}") in pairs, r
    assert ("ec2:CreateFleet", f"arn:aws:ec2:{REGION}::image/ami-1") in pairs
    tagging = {a.resource.rsplit(":", 1)[1] for a in auths if a.action == "ec2:CreateTags"}
    # spot-instances-request has no tags of its own in this call: not tagged, no CreateTags.
    assert tagging == {"fleet/*", "instance/*", "volume/*", "network-interface/*"}, tagging
    assert all(a.context["ec2:CreateAction"] == ["CreateFleet"]
               for a in auths if a.action == "ec2:CreateTags")
    passes = [a for a in auths if a.action == "iam:PassRole"]
    assert [a.resource for a in passes] == [NODE_ROLE]
    assert passes[0].context["iam:PassedToService"] == ["ec2.amazonaws.com"]
    assert all(a.context["aws:RequestedRegion"] == [REGION] for a in auths)
    eni = next(a for a in auths if a.resource.endswith("network-interface/*"))
    assert eni.context[f"aws:RequestTag/{CLUSTER_TAG}"] == ["owned"]  # from the template
    lt = next(a for a in auths if a.resource.endswith("launch-template/lt-1"))
    assert lt.context[f"ec2:ResourceTag/{CLUSTER_TAG}"] == ["owned"]


def test_create_fleet_with_cluster_tags_is_allowed():
    v, _ = check("ec2", "CreateFleet", fleet_params())
    assert v.allowed, v.reason
    assert "AllowScopedEC2InstanceActionsWithTags" in v.sids
    assert "AllowPassingInstanceRole" in v.sids


def test_create_fleet_without_volume_tags_is_refused():
    v, _ = check("ec2", "CreateFleet", fleet_params(types=("instance", "fleet")))
    assert not v.allowed
    assert v.denied.action == "ec2:CreateFleet" and v.denied.resource.endswith(":volume/*"), v
    assert "AllowScopedEC2InstanceActionsWithTags" in v.reason, v.reason


def test_create_fleet_without_interface_tags_is_refused():
    v, _ = check("ec2", "CreateFleet", fleet_params(), lookup=world(eni_tags=None))
    assert not v.allowed and v.denied.resource.endswith(":network-interface/*"), v


def test_create_fleet_with_a_foreign_template_or_role_is_refused():
    v, _ = check("ec2", "CreateFleet", fleet_params(), lookup=world(template_tags={NODEPOOL: "x"}))
    assert not v.allowed and v.denied.resource.endswith("launch-template/lt-1"), v
    other = f"arn:aws:iam::{ACCOUNT}:role/admin"
    v, _ = check("ec2", "CreateFleet", fleet_params(), lookup=world(role=other))
    assert not v.allowed and v.denied == iam.Authorization(
        "iam:PassRole", other, {"aws:RequestedRegion": [REGION],
                                "iam:PassedToService": ["ec2.amazonaws.com"]}), v


def test_run_instances_shape():
    params = {"ImageId": "ami-9", "SubnetId": "subnet-9", "SecurityGroupId": ["sg-9"],
              "LaunchTemplate": {"LaunchTemplateId": "lt-1"},
              "TagSpecification": [{"ResourceType": "instance", "Tag": tag_list(OWNED)}]}
    auths = iam.authorizations("ec2", "RunInstances", params, REGION, ACCOUNT, world())
    res = {a.resource.rsplit(":", 1)[1] for a in auths if a.action == "ec2:RunInstances"}
    assert res == {"instance/*", "volume/*", "network-interface/*", "image/ami-9",
                   "subnet/subnet-9", "security-group/sg-9", "security-group/sg-1",
                   "launch-template/lt-1"}, res
    creates = [a for a in auths if a.action == "ec2:CreateTags"]
    assert {a.context["ec2:CreateAction"][0] for a in creates} == {"RunInstances"}
    v = iam.decide(POLICIES, auths)
    assert not v.allowed and v.denied.resource.endswith("volume/*"), v


def test_launch_template_create_and_delete():
    lt_tags = dict(OWNED)
    params = {"LaunchTemplateName": "x", "TagSpecification": [
        {"ResourceType": "launch-template", "Tag": tag_list(lt_tags)}]}
    v, auths = check("ec2", "CreateLaunchTemplate", params)
    assert v.allowed, v.reason
    assert [a.action for a in auths] == ["ec2:CreateLaunchTemplate", "ec2:CreateTags"]
    assert not any(a.action == "iam:PassRole" for a in auths)
    v, _ = check("ec2", "CreateLaunchTemplate", {"LaunchTemplateName": "x"})
    assert not v.allowed
    v, auths = check("ec2", "DeleteLaunchTemplate", {"LaunchTemplateName": "karpenter.k8s.aws/abc"})
    assert v.allowed and auths[0].resource.endswith(f":{ACCOUNT}:launch-template/lt-1"), v
    v, _ = check("ec2", "DeleteLaunchTemplate", {"LaunchTemplateId": "lt-1"},
                 lookup=world(template_tags={}))
    assert not v.allowed


def test_terminate_needs_the_cluster_tag():
    v, _ = check("ec2", "TerminateInstances", {"InstanceId": ["i-other"]})
    assert not v.allowed and v.denied.resource.endswith("instance/i-other"), v
    v, _ = check("ec2", "TerminateInstances", {"InstanceId": ["i-owned"]})
    assert v.allowed and v.sids == ["AllowScopedDeletion"], v
    v, _ = check("ec2", "TerminateInstances", {"InstanceId": ["i-owned", "i-other"]})
    assert not v.allowed and v.denied.resource.endswith("i-other")


def test_create_tags_later_only_allowed_keys():
    ok = {"ResourceId": ["i-owned"], "Tag": [{"Key": "Name", "Value": "n"},
                                            {"Key": "karpenter.sh/nodeclaim", "Value": "c"}]}
    v, auths = check("ec2", "CreateTags", ok)
    assert v.allowed and v.sids == ["AllowScopedResourceTagging"], v
    assert sorted(auths[0].context["aws:TagKeys"]) == ["Name", "karpenter.sh/nodeclaim"]
    bad = {"ResourceId": ["i-owned"], "Tag": [{"Key": "Name", "Value": "n"},
                                             {"Key": CLUSTER_TAG, "Value": "owned"}]}
    v, _ = check("ec2", "CreateTags", bad)
    assert not v.allowed and "ForAllValues:StringEquals aws:TagKeys" in v.reason, v.reason
    v, _ = check("ec2", "CreateTags", dict(ok, ResourceId=["i-other"]))
    assert not v.allowed


def test_create_tags_arns_by_id():
    params = {"ResourceId": ["ami-1", "sg-1", "subnet-1", "eni-1", "vol-1", "lt-1", "x-1"],
              "Tag": [{"Key": "a", "Value": "b"}]}
    known = FakeLookup(ec2_tags={rid: {} for rid in params["ResourceId"]})
    got = [a.resource for a in iam.authorizations("ec2", "CreateTags", params, REGION, ACCOUNT,
                                                  known)]
    p = f"arn:aws:ec2:{REGION}"
    assert got == [f"{p}::image/ami-1", f"{p}:{ACCOUNT}:security-group/sg-1",
                   f"{p}:{ACCOUNT}:subnet/subnet-1", f"{p}:{ACCOUNT}:network-interface/eni-1",
                   f"{p}:{ACCOUNT}:volume/vol-1", f"{p}:{ACCOUNT}:launch-template/lt-1", "*"], got


def test_resources_ec2_does_not_know_are_left_to_its_not_found_error():
    """EC2 answers an unknown id with NotFound before a tag condition could be evaluated
    (upstream deletes a launch template twice when two paths race; the second call must get
    EC2's error, not IAM's)."""
    nothing = FakeLookup()
    for op, params in (("DeleteLaunchTemplate", {"LaunchTemplateId": "lt-gone"}),
                       ("TerminateInstances", {"InstanceId": ["i-gone"]}),
                       ("CreateTags", {"ResourceId": ["i-gone"], "Tag": [{"Key": "a"}]})):
        assert iam.authorizations("ec2", op, params, REGION, ACCOUNT, nothing) == [], op


def test_describe_only_in_the_cluster_region():
    v, auths = check("ec2", "DescribeInstances", {"InstanceId": ["i-1"]})
    assert v.allowed and auths == [iam.Authorization("ec2:DescribeInstances", "*",
                                                     {"aws:RequestedRegion": [REGION]})]
    v, _ = check("ec2", "DescribeInstances", {}, region="eu-west-1")
    assert not v.allowed and "aws:RequestedRegion" in v.reason, v.reason


def test_instance_profiles():
    tags = {CLUSTER_TAG: "owned", TOPOLOGY_REGION: REGION, NODECLASS: "default", EKS_TAG: CLUSTER}
    create = {"InstanceProfileName": "demo_p", "Tags": {"member": tag_list(tags)}}
    v, auths = check("iam", "CreateInstanceProfile", create)
    assert v.allowed, v.reason
    assert auths[0].resource == f"arn:aws:iam::{ACCOUNT}:instance-profile/demo_p"
    untagged = {"InstanceProfileName": "demo_p"}
    assert not check("iam", "CreateInstanceProfile", untagged)[0].allowed
    owned = FakeLookup(profiles={"demo_p": {"arn": auths[0].resource, "tags": tags, "roles": []}})
    v, auths = check("iam", "AddRoleToInstanceProfile", dict(untagged, RoleName="demo-node"),
                     lookup=owned)
    assert v.allowed and [a.action for a in auths] == ["iam:AddRoleToInstanceProfile",
                                                       "iam:PassRole"], v
    v, _ = check("iam", "AddRoleToInstanceProfile", dict(untagged, RoleName="admin"), lookup=owned)
    assert not v.allowed and v.denied.resource.endswith(":role/admin"), v
    for op in ("RemoveRoleFromInstanceProfile", "DeleteInstanceProfile", "GetInstanceProfile"):
        assert check("iam", op, dict(untagged, RoleName="demo-node"), lookup=owned)[0].allowed, op
    assert not check("iam", "DeleteInstanceProfile", untagged, lookup=FakeLookup())[0].allowed
    assert check("iam", "TagInstanceProfile", create, lookup=owned)[0].allowed
    assert check("iam", "ListInstanceProfiles", {})[0].allowed


def test_sqs_only_on_the_queue():
    url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/demo"
    v, auths = check("sqs", "DeleteMessageBatch", {"QueueUrl": url, "Entries": []})
    assert v.allowed and auths[0].action == "sqs:DeleteMessage", v
    assert check("sqs", "ReceiveMessage", {"QueueUrl": url})[0].allowed
    assert check("sqs", "GetQueueUrl", {"QueueName": "demo"})[0].allowed
    v, auths = check("sqs", "ReceiveMessage", {"QueueUrl": url.replace("/demo", "/other")})
    assert not v.allowed and auths[0].resource == f"arn:aws:sqs:{REGION}:{ACCOUNT}:other"
    assert not check("sqs", "GetQueueAttributes", {"QueueUrl": url})[0].allowed


def test_ssm_eks_pricing_sts_zonal_shift():
    name = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
    v, auths = check("ssm", "GetParameter", {"Name": name})
    assert v.allowed and auths[0].resource == f"arn:aws:ssm:{REGION}::parameter{name}", auths
    v, auths = check("ssm", "GetParameter", {"Name": "/team/ami"})
    assert not v.allowed and auths[0].resource == f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/team/ami"
    auths = iam.authorizations("ssm", "GetParameters", {"Names": [name, "x"]}, REGION, ACCOUNT, None)
    assert [a.action for a in auths] == ["ssm:GetParameters"] * 2
    assert check("eks", "DescribeCluster", {"name": "demo"})[0].allowed
    assert not check("eks", "DescribeCluster", {"name": "prod"})[0].allowed
    assert check("pricing", "GetProducts", {"ServiceCode": "AmazonEC2"})[0].allowed
    v, auths = check("sts", "GetCallerIdentity", {})
    assert v.allowed and auths == []
    assert check("arc-zonal-shift", "GetManagedResource", {"ResourceIdentifier": CLUSTER_ARN})[0].allowed
    assert not check("arc-zonal-shift", "GetManagedResource", {"ResourceIdentifier": "x"})[0].allowed
    assert not check("ec2", "CreateVpc", {})[0].allowed


# ---- evaluation -------------------------------------------------------------------------


def doc(*statements):
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(condition=None, action="s3:GetObject", resource="*", **extra):
    st = {"Effect": "Allow", "Action": action, "Resource": resource, **extra}
    if condition:
        st["Condition"] = condition
    return st


def ok(documents, context=None, action="s3:GetObject", resource="arn:aws:s3:::b/k"):
    return iam.evaluate(documents, iam.Authorization(action, resource, context or {})).allowed


def test_explicit_deny_wins():
    docs = [doc(allow(Sid="A")), doc({"Sid": "D", "Effect": "Deny", "Action": "s3:*",
                                      "Resource": "arn:aws:s3:::b/*"})]
    d = iam.evaluate(docs, iam.Authorization("s3:GetObject", "arn:aws:s3:::b/k", {}))
    assert not d.allowed and d.sid == "D" and "explicitly denied" in d.reason
    assert ok(docs, resource="arn:aws:s3:::c/k")
    denied_fleet = POLICIES + [doc({"Effect": "Deny", "Action": "ec2:CreateFleet",
                                    "Resource": ec2("subnet/subnet-2")})]
    v, _ = check("ec2", "CreateFleet", fleet_params(), policies=denied_fleet)
    assert not v.allowed and v.denied.resource.endswith("subnet/subnet-2"), v


def test_action_and_resource_matching():
    assert ok([doc(allow(action="S3:get*"))])
    assert ok([doc(allow(action="s3:GetObjec?"))])
    assert not ok([doc(allow(action="s3:Put*"))])
    assert ok([doc({"Effect": "Allow", "NotAction": "s3:Put*", "Resource": "*"})])
    assert not ok([doc({"Effect": "Allow", "NotAction": "s3:Get*", "Resource": "*"})])
    assert ok([doc(allow(resource="arn:aws:s3:::b/*"))])
    assert not ok([doc(allow(resource="arn:aws:s3:::B/*"))])  # ARNs are case-sensitive
    assert ok([doc({"Effect": "Allow", "Action": "s3:*", "NotResource": "arn:aws:s3:::c/*"})])
    assert iam.arn_matches(ec2("image/*"), f"arn:aws:ec2:{REGION}::image/ami-1")
    assert not iam.arn_matches("arn:aws:ec2:us-west-2:*:image/*",
                               f"arn:aws:ec2:{REGION}::image/ami-1")
    # "*" requests (no resource-level permissions) need a "*" grant.
    assert not ok([doc(allow(resource="arn:aws:s3:::*"))], resource="*")


def test_operators_and_missing_keys():
    c = {"aws:RequestTag/team": ["a"], "aws:TagKeys": ["team", "env"], "aws:SecureTransport": ["true"]}
    assert ok([doc(allow({"StringEquals": {"aws:requesttag/team": ["b", "a"]}}))], c)  # OR, key case
    assert not ok([doc(allow({"StringEquals": {"aws:RequestTag/Team": "a"}}))], c)  # exact tag key
    assert ok([doc(allow({"StringEqualsIgnoreCase": {"aws:RequestTag/team": "A"}}))], c)
    assert ok([doc(allow({"StringLike": {"aws:RequestTag/team": "?"}}))], c)
    assert not ok([doc(allow({"StringNotLike": {"aws:RequestTag/team": "a*"}}))], c)
    assert ok([doc(allow({"Bool": {"aws:SecureTransport": True}}))], c)
    # AND across keys and operators.
    assert not ok([doc(allow({"StringEquals": {"aws:RequestTag/team": "a",
                                               "aws:RequestTag/env": "p"}}))], c)
    # Missing keys: positive false, negated true, IfExists true.
    assert not ok([doc(allow({"StringEquals": {"aws:RequestTag/env": "p"}}))], c)
    assert ok([doc(allow({"StringNotEquals": {"aws:RequestTag/env": "p"}}))], c)
    assert ok([doc(allow({"StringEqualsIfExists": {"aws:RequestTag/env": "p"}}))], c)
    assert not ok([doc(allow({"StringEqualsIfExists": {"aws:RequestTag/team": "p"}}))], c)
    assert ok([doc(allow({"Null": {"aws:RequestTag/env": "true"}}))], c)
    assert not ok([doc(allow({"Null": {"aws:RequestTag/team": "true"}}))], c)
    assert ok([doc(allow({"Null": {"aws:RequestTag/team": "false"}}))], c)
    assert ok([doc(allow({"ArnLike": {"aws:SourceArn": "arn:aws:sqs:*:1:q"}}))],
              {"aws:SourceArn": ["arn:aws:sqs:us-east-1:1:q"]})
    assert not ok([doc(allow({"NoSuchOperator": {"aws:RequestTag/team": "a"}}))], c)


def test_set_operators():
    keys = {"aws:TagKeys": ["team", "env"]}
    all_of = lambda allowed: [doc(allow({"ForAllValues:StringEquals": {"aws:TagKeys": allowed}}))]  # noqa: E731
    any_of = lambda wanted: [doc(allow({"ForAnyValue:StringEquals": {"aws:TagKeys": wanted}}))]  # noqa: E731
    assert ok(all_of(["team", "env", "x"]), keys)
    assert not ok(all_of(["team"]), keys)
    assert ok(all_of(["team"]), {})  # missing key: ForAllValues holds
    assert ok(any_of(["env"]), keys)
    assert not ok(any_of(["x"]), keys)
    assert not ok(any_of(["env"]), {})  # missing key: ForAnyValue fails
    assert ok([doc(allow({"ForAllValues:StringNotEquals": {"aws:TagKeys": "secret"}}))], keys)
    assert not ok([doc(allow({"ForAnyValue:StringLike": {"aws:TagKeys": "sec*"}}))], keys)


def test_principal_context():
    docs = [doc(allow({"StringEquals": {"aws:PrincipalTag/kubernetes-namespace": "kube-system"}}))]
    a = iam.Authorization("s3:GetObject", "arn:aws:s3:::b/k", {})
    assert iam.evaluate(docs, a, {"aws:PrincipalTag/kubernetes-namespace": ["kube-system"]}).allowed
    assert not iam.evaluate(docs, a, {"aws:PrincipalTag/kubernetes-namespace": "default"}).allowed
    assert not iam.evaluate(docs, a).allowed


def test_unused_grants():
    assert "ec2:DescribeImages" in iam.unused_grants(POLICIES, {"ec2:DescribeInstances"})
    assert "ec2:DescribeInstances" not in iam.unused_grants(POLICIES, {"ec2:DescribeInstances"})
    docs = [doc(allow(action=["ec2:Describe*", "s3:GetObject", "sqs:*"]))]
    assert iam.granted_actions(docs) == {"ec2:Describe*", "s3:GetObject", "sqs:*"}
    assert iam.unused_grants(docs, {"ec2:describeinstances"}) == ["s3:GetObject", "sqs:*"]
    assert iam.unused_grants(docs, {"ec2:DescribeImages", "sqs:ReceiveMessage", "s3:GetObject"}) == []


TESTS = [v for k, v in list(globals().items()) if k.startswith("test_") and callable(v)]


def main():
    selected = [t for t in TESTS if not sys.argv[1:] or any(a in t.__name__ for a in sys.argv[1:])]
    passed = failed = 0
    for t in selected:
        try:
            t()
            passed += 1
            print(f"PASS {t.__name__}", flush=True)
        except Exception as e:  # report and go on with the next test
            failed += 1
            print(f"FAIL {t.__name__}: {e!r}", flush=True)
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
