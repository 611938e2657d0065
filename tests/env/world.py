"""Creates the AWS side of the test world in moto: what an EKS user already has before
running jointer.

That is a VPC across three zones with a private and a public subnet in each (tagged the
way EKS users tag them for load balancers), the cluster and node security groups, the
cluster's IAM role, the EKS cluster itself and its IAM OIDC provider. Nothing jointer is
meant to create (discovery tags, node role, queue, ...) is created here: the tests must
see jointer create it.

Run by world.sh after resetting moto; prints a JSON summary and writes it to the path
given as the only argument. Talks only to AWS_ENDPOINT_URL, the gap layer in front of moto
on 127.0.0.1 (JOINTER_GAP_URL for EKS, whose DescribeCluster only the gap layer gets right).
"""

import json
import os
import sys
from urllib.parse import urlparse

import boto3

CLUSTER = os.environ.get("JOINTER_TEST_CLUSTER", "jointer-test")
REGION = os.environ.get("AWS_REGION", "us-east-1")
ENDPOINT = os.environ["AWS_ENDPOINT_URL"]
GAP_ENDPOINT = os.environ.get("JOINTER_GAP_URL", ENDPOINT)
KUBERNETES_VERSION = "1.34"
# Same range the local kube-apiserver allocates ClusterIPs from, so DescribeCluster and the
# API server agree.
SERVICE_CIDR = "10.96.0.0/16"
ZONES = ["a", "b", "c"]
VPC_CIDR = "10.0.0.0/16"
# Private subnets are large (nodes and, with the VPC CNI, pods take addresses from them);
# public ones only hold load balancers and NAT, as in the usual EKS layouts.
PRIVATE_CIDRS = ["10.0.0.0/19", "10.0.32.0/19", "10.0.64.0/19"]
PUBLIC_CIDRS = ["10.0.96.0/22", "10.0.100.0/22", "10.0.104.0/22"]
CLUSTER_TAG = f"kubernetes.io/cluster/{CLUSTER}"
# Root CA thumbprint AWS documents for the EKS OIDC endpoints; IAM only stores it.
OIDC_THUMBPRINT = "9e99a48a9960b14926bb7f3b02e22da2b0ab7280"


def refuse_non_loopback(url: str) -> None:
    # The world is fake: never let a mistyped variable send these calls to real AWS.
    host = urlparse(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"world.py: AWS_ENDPOINT_URL must point at the local moto, not {url!r}")


def tags(**kv: str) -> list[dict]:
    return [{"Key": k, "Value": v} for k, v in kv.items()]


def tag_spec(resource_type: str, tag_list: list[dict]) -> list[dict]:
    return [{"ResourceType": resource_type, "Tags": tag_list}]


def main() -> None:
    refuse_non_loopback(ENDPOINT)
    refuse_non_loopback(GAP_ENDPOINT)
    out_path = sys.argv[1]
    session = boto3.session.Session(region_name=REGION)
    ec2 = session.client("ec2", endpoint_url=ENDPOINT)
    iam = session.client("iam", endpoint_url=ENDPOINT)
    eks = session.client("eks", endpoint_url=GAP_ENDPOINT)

    vpc_id = ec2.create_vpc(
        CidrBlock=VPC_CIDR,
        TagSpecifications=tag_spec("vpc", tags(Name=f"{CLUSTER}-vpc")),
    )["Vpc"]["VpcId"]
    # EKS requires DNS support and hostnames in the cluster VPC.
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsSupport={"Value": True})
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})

    igw_id = ec2.create_internet_gateway(
        TagSpecifications=tag_spec("internet-gateway", tags(Name=f"{CLUSTER}-igw")),
    )["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=vpc_id)

    public_rt = ec2.create_route_table(
        VpcId=vpc_id,
        TagSpecifications=tag_spec("route-table", tags(Name=f"{CLUSTER}-public")),
    )["RouteTable"]["RouteTableId"]
    ec2.create_route(
        RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw_id
    )

    subnets = {"private": {}, "public": {}}
    for i, suffix in enumerate(ZONES):
        zone = f"{REGION}{suffix}"
        # Private: own route table with only the local route, i.e. no internet gateway,
        # which is how discovery tells private from public subnets.
        private_id = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=PRIVATE_CIDRS[i],
            AvailabilityZone=zone,
            TagSpecifications=tag_spec(
                "subnet",
                tags(
                    Name=f"{CLUSTER}-private-{zone}",
                    **{"kubernetes.io/role/internal-elb": "1", CLUSTER_TAG: "shared"},
                ),
            ),
        )["Subnet"]["SubnetId"]
        private_rt = ec2.create_route_table(
            VpcId=vpc_id,
            TagSpecifications=tag_spec("route-table", tags(Name=f"{CLUSTER}-private-{zone}")),
        )["RouteTable"]["RouteTableId"]
        ec2.associate_route_table(RouteTableId=private_rt, SubnetId=private_id)

        public_id = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=PUBLIC_CIDRS[i],
            AvailabilityZone=zone,
            TagSpecifications=tag_spec(
                "subnet",
                tags(
                    Name=f"{CLUSTER}-public-{zone}",
                    **{"kubernetes.io/role/elb": "1", CLUSTER_TAG: "shared"},
                ),
            ),
        )["Subnet"]["SubnetId"]
        ec2.modify_subnet_attribute(SubnetId=public_id, MapPublicIpOnLaunch={"Value": True})
        ec2.associate_route_table(RouteTableId=public_rt, SubnetId=public_id)

        subnets["private"][zone] = private_id
        subnets["public"][zone] = public_id

    # The cluster security group EKS creates and tags as owned by the cluster, and a
    # separate node security group without the cluster tag: exactly one group carries
    # kubernetes.io/cluster/<name>, as the AWS Load Balancer Controller expects.
    cluster_sg = ec2.create_security_group(
        GroupName=f"eks-cluster-sg-{CLUSTER}",
        Description="EKS created security group applied to ENI that is attached to EKS Control Plane master nodes, as well as any managed workloads.",
        VpcId=vpc_id,
        TagSpecifications=tag_spec(
            "security-group", tags(Name=f"eks-cluster-sg-{CLUSTER}", **{CLUSTER_TAG: "owned"})
        ),
    )["GroupId"]
    node_sg = ec2.create_security_group(
        GroupName=f"{CLUSTER}-node",
        Description=f"Node security group of EKS cluster {CLUSTER}",
        VpcId=vpc_id,
        TagSpecifications=tag_spec("security-group", tags(Name=f"{CLUSTER}-node")),
    )["GroupId"]
    # Nodes talk to each other freely and the control plane reaches them on any port;
    # nodes reach the control plane on 443.
    ec2.authorize_security_group_ingress(
        GroupId=node_sg,
        IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": node_sg}]},
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": cluster_sg}]},
        ],
    )
    ec2.authorize_security_group_ingress(
        GroupId=cluster_sg,
        IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": cluster_sg}]},
            {
                "IpProtocol": "tcp",
                "FromPort": 443,
                "ToPort": 443,
                "UserIdGroupPairs": [{"GroupId": node_sg}],
            },
        ],
    )

    cluster_role = iam.create_role(
        RoleName=f"{CLUSTER}-cluster",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "eks.amazonaws.com"},
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                    }
                ],
            }
        ),
    )["Role"]
    iam.attach_role_policy(
        RoleName=cluster_role["RoleName"],
        PolicyArn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
    )

    all_subnets = list(subnets["private"].values()) + list(subnets["public"].values())
    cluster = eks.create_cluster(
        name=CLUSTER,
        version=KUBERNETES_VERSION,
        roleArn=cluster_role["Arn"],
        resourcesVpcConfig={
            "subnetIds": all_subnets,
            "securityGroupIds": [cluster_sg],
            "endpointPublicAccess": True,
            "endpointPrivateAccess": True,
        },
        kubernetesNetworkConfig={"serviceIpv4Cidr": SERVICE_CIDR},
        accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"},
    )["cluster"]

    # What jointer will read: the gap layer's DescribeCluster, pointing at the local API
    # server and carrying the cluster security group created above.
    described = eks.describe_cluster(name=CLUSTER)["cluster"]
    vpc_config = described.get("resourcesVpcConfig", {})
    if not described.get("endpoint", "").startswith("https://127.0.0.1:"):
        sys.exit(f"world.py: DescribeCluster endpoint {described.get('endpoint')!r} is not the local API server")
    if vpc_config.get("clusterSecurityGroupId") != cluster_sg:
        sys.exit(f"world.py: DescribeCluster clusterSecurityGroupId {vpc_config.get('clusterSecurityGroupId')!r} "
                 f"is not {cluster_sg}")
    issuer = described["identity"]["oidc"]["issuer"]
    oidc_arn = iam.create_open_id_connect_provider(
        Url=issuer,
        ClientIDList=["sts.amazonaws.com"],
        ThumbprintList=[OIDC_THUMBPRINT],
        Tags=tags(**{"alpha.eksctl.io/cluster-name": CLUSTER}),
    )["OpenIDConnectProviderArn"]

    summary = {
        "region": REGION,
        "cluster": {
            "name": CLUSTER,
            "arn": cluster["arn"],
            "version": cluster["version"],
            "roleArn": cluster_role["Arn"],
            "oidcIssuer": issuer,
            "oidcProviderArn": oidc_arn,
            "serviceIpv4Cidr": SERVICE_CIDR,
        },
        "vpc": {"id": vpc_id, "cidr": VPC_CIDR, "internetGatewayId": igw_id},
        "subnets": subnets,
        "securityGroups": {"cluster": cluster_sg, "node": node_sg},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
