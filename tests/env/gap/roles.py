"""Role credentials the way EKS hands them to a pod, and IAM enforcement for calls made with them.

moto accepts any signature and, even with its IAM enforcement on, never evaluates policy
conditions, and jointer's controller policies are scoped almost entirely by conditions (tags
on create and on later use, the region, the service a role is passed to). So the gap layer
plays two parts of AWS itself:

- The EKS Pod Identity agent: `GET /_gap/pod-identity/<cluster>/credentials` with the pod's
  projected service-account token in `Authorization` answers what the agent answers
  (AccessKeyId, SecretAccessKey, Token, AccountId, Expiration) for the role the cluster's pod
  identity association names, after the checks EKS makes: the token is for the
  `pods.eks.amazonaws.com` audience and unexpired, an association exists for its namespace and
  service account, and the role trusts `pods.eks.amazonaws.com` for sts:AssumeRole and
  sts:TagSession. The credentials come from moto's STS AssumeRole with the session tags EKS
  sets. (The token's signature is not checked: the test world has one API server, the issuer.)
- STS for IRSA: AssumeRoleWithWebIdentity is answered by moto only after the role's trust is
  evaluated as STS would: a statement allowing sts:AssumeRoleWithWebIdentity to the cluster's
  OIDC provider (which must exist in IAM) whose `<issuer>:sub` / `<issuer>:aud` conditions hold
  for the token's claims. Every test cluster's tokens come from the one local API server, so
  the token's own `iss` cannot name the cluster; the provider the trust names does (its URL is
  the issuer DescribeCluster reports for that cluster).
- IAM: every call signed with such credentials is turned into the authorizations AWS checks
  (iam.py) and evaluated against the role's inline and attached policies as moto holds them.
  A refused call gets AWS's own error (EC2's UnauthorizedOperation, AccessDenied elsewhere)
  and never reaches moto. Every decision is counted; `GET /_gap/iam` reports them, the refused
  ones in full, and the granted actions no call used. Calls signed any other way (the tests'
  and jointer's own admin credentials) are not evaluated, as before.
"""

import base64
import collections
import datetime
import hashlib
import json
import re
import threading
import time
import urllib.parse
import uuid

import iam

POD_IDENTITY_AUDIENCE = "pods.eks.amazonaws.com"
POLICY_CACHE_SECONDS = 2.0  # `jointer apply` may change a policy mid-test; re-read it soon after
DENIED_KEPT = 500


class Refused(Exception):
    """The agent's answer when it will not hand out credentials (HTTP status and message)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def token_claims(token):
    """The claims of a Kubernetes service-account JWT (payload only; see the module doc)."""
    try:
        payload = token.split(".")[1]
        payload += "=" * (-len(payload) % 4)
        return json.loads(base64.urlsafe_b64decode(payload))
    except (IndexError, ValueError):
        raise Refused(400, "the Authorization header does not hold a service-account token")


def _listed(value):
    return [value] if isinstance(value, str) else list(value or [])


def trust_statements(trust, kind, principal):
    """The trust's statements naming `principal` (of `kind`: Service, Federated, AWS), without
    the Principal and with `Resource: *`, so iam.evaluate can judge them (the role being the
    resource of a trust)."""
    statements = trust.get("Statement", [])
    named = [st for st in _listed(statements) if isinstance(st, dict)
             and principal in _listed((st.get("Principal") or {}).get(kind))]
    return [{"Statement": [dict({k: v for k, v in st.items() if k != "Principal"},
                                Resource=st.get("Resource", "*"))]} for st in named]


def trust_allows(trust, kind, principal, action, role_arn, context=None):
    """Whether the trust lets `principal` do `action` on the role, conditions evaluated."""
    docs = trust_statements(trust, kind, principal)
    return iam.evaluate(docs, iam.Authorization(action, role_arn, context or {})).allowed


class MotoLookup:
    """What iam.authorizations needs to know about existing resources, read from moto."""

    def __init__(self, gap):
        self.gap = gap

    def ec2_tags(self, region, resource_id):
        ec2 = self.gap.client("ec2", region)
        try:
            if resource_id.startswith("i-"):
                reservations = ec2.describe_instances(InstanceIds=[resource_id])["Reservations"]
                found = [i for r in reservations for i in r["Instances"]]
            elif resource_id.startswith("lt-"):
                found = ec2.describe_launch_templates(LaunchTemplateIds=[resource_id])["LaunchTemplates"]
            else:
                found = [{"Tags": ec2.describe_tags(
                    Filters=[{"Name": "resource-id", "Values": [resource_id]}])["Tags"]}]
        except Exception:  # moto's NotFound errors: the resource does not exist
            return None
        if not found:
            return None
        return {t["Key"]: t["Value"] for t in found[0].get("Tags", [])}

    def launch_template(self, region, template_id=None, template_name=None, version=None):
        ec2 = self.gap.client("ec2", region)
        spec = {"LaunchTemplateId": template_id} if template_id else {"LaunchTemplateName": template_name}
        try:
            template = ec2.describe_launch_templates(
                **({"LaunchTemplateIds": [template_id]} if template_id
                   else {"LaunchTemplateNames": [template_name]}))["LaunchTemplates"][0]
            versions = ec2.describe_launch_template_versions(
                Versions=[version or "$Default"], **spec)["LaunchTemplateVersions"]
        except Exception:
            return None
        return {
            "id": template["LaunchTemplateId"],
            "tags": {t["Key"]: t["Value"] for t in template.get("Tags", [])},
            "data": versions[0]["LaunchTemplateData"] if versions else {},
        }

    def instance_profile(self, name):
        client = self.gap.client("iam", "us-east-1")
        try:
            # GetInstanceProfile carries the tags (moto answers ListInstanceProfileTags with a 500).
            profile = client.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except Exception:
            return None
        return {"arn": profile["Arn"], "roles": [r["Arn"] for r in profile.get("Roles", [])],
                "tags": {t["Key"]: t["Value"] for t in profile.get("Tags", [])}}


class Roles:
    """Sessions handed out, the policies of their roles, and every decision made for them."""

    def __init__(self, gap, account):
        self.gap = gap
        self.account = account
        self.lock = threading.Lock()
        self.sessions = {}  # access key id -> session (role, cluster, label, principal context)
        self.policies = {}  # role name -> (read at, [documents])
        self.most_policies = {}  # role name -> the most policy documents it has been seen with
        self.grants = {}  # role name -> the action patterns its policies allow, as last read
        self.lookup = MotoLookup(gap)
        self.clear()

    def clear(self):
        with self.lock:
            self.evaluated = 0
            self.denied = collections.deque(maxlen=DENIED_KEPT)
            self.denied_count = 0
            self.used = {}  # label -> {action: count}

    # ---- the Pod Identity agent ----

    def register(self, access_key, role_name, session, cluster, service_account, context):
        with self.lock:
            self.sessions[access_key] = {
                "role": role_name, "label": service_account or role_name, "cluster": cluster,
                "arn": f"arn:aws:sts::{self.account}:assumed-role/{role_name}/{session}",
                "context": context,
            }

    def pod_identity_credentials(self, region, cluster, token):
        claims = token_claims(token)
        audience = claims.get("aud") or []
        if POD_IDENTITY_AUDIENCE not in ([audience] if isinstance(audience, str) else audience):
            raise Refused(400, f"the token's audience {audience} is not {POD_IDENTITY_AUDIENCE}")
        if claims.get("exp", 0) < time.time():
            raise Refused(400, "the service-account token has expired")
        k8s = claims.get("kubernetes.io") or {}
        namespace = k8s.get("namespace")
        service_account = (k8s.get("serviceaccount") or {}).get("name")
        pod = (k8s.get("pod") or {}).get("name", "")
        with self.gap.lock:
            associations = list(self.gap.associations.get((region, cluster), {}).values())
        match = [a for a in associations
                 if a["namespace"] == namespace and a["serviceAccount"] == service_account]
        if not match:
            raise Refused(403, f"no pod identity association in cluster {cluster} for "
                               f"{namespace}/{service_account}")
        association = match[0]
        role_arn = association["roleArn"]
        role_name = role_arn.rsplit("/", 1)[-1]
        client = self.gap.client("iam", region)
        try:
            trust = client.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
        except Exception:
            raise Refused(403, f"the association's role {role_arn} does not exist")
        if isinstance(trust, str):
            trust = json.loads(urllib.parse.unquote(trust))
        if not all(trust_allows(trust, "Service", POD_IDENTITY_AUDIENCE, action, role_arn)
                   for action in ("sts:AssumeRole", "sts:TagSession")):
            raise Refused(403, f"the role {role_arn} does not trust {POD_IDENTITY_AUDIENCE} "
                               "for sts:AssumeRole and sts:TagSession")
        tags = {
            "eks-cluster-arn": f"arn:aws:eks:{region}:{self.account}:cluster/{cluster}",
            "eks-cluster-name": cluster, "kubernetes-namespace": namespace,
            "kubernetes-service-account": service_account, "kubernetes-pod-name": pod,
        }
        session = f"eks-{cluster}-{pod or service_account}"[:56] + "-" + uuid.uuid4().hex[:7]
        creds = self.gap.client("sts", region).assume_role(
            RoleArn=role_arn, RoleSessionName=session, DurationSeconds=3600,
            Tags=[{"Key": k, "Value": v} for k, v in tags.items() if v])["Credentials"]
        self.register(creds["AccessKeyId"], role_name, session, cluster, service_account,
                      {f"aws:PrincipalTag/{k}": [v] for k, v in tags.items() if v})
        expiration = creds["Expiration"]
        if isinstance(expiration, datetime.datetime):
            expiration = expiration.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"AccessKeyId": creds["AccessKeyId"], "SecretAccessKey": creds["SecretAccessKey"],
                "Token": creds["SessionToken"], "AccountId": self.account, "Expiration": expiration}

    # ---- STS for IRSA ----

    def web_identity(self, call, clusters, forward):
        """AssumeRoleWithWebIdentity: the trust evaluated, then moto's answer, whose session is
        then enforced. `clusters` are the region's EKS cluster names; `forward` sends the call
        to moto. Returns the Response, or raises Refused."""
        params = dict(call.query + call.form)
        role_arn, token = params.get("RoleArn", ""), params.get("WebIdentityToken", "")
        claims = token_claims(token)
        audience = claims.get("aud") or []
        audience = [audience] if isinstance(audience, str) else audience
        role_name = role_arn.rsplit("/", 1)[-1]
        client = self.gap.client("iam", call.region)
        try:
            trust = client.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
            providers = {p["Arn"] for p in client.list_open_id_connect_providers()[
                "OpenIDConnectProviderList"]}
        except client.exceptions.NoSuchEntityException:
            raise Refused(403, f"the role {role_arn} does not exist")
        if isinstance(trust, str):
            trust = json.loads(urllib.parse.unquote(trust))
        issuers = {hashlib.sha256(c.encode()).hexdigest()[:32].upper(): c for c in clusters}
        federated = {p for st in _listed(trust.get("Statement")) if isinstance(st, dict)
                     for p in _listed((st.get("Principal") or {}).get("Federated"))}
        for provider in sorted(federated & providers):
            host = provider.split(":oidc-provider/", 1)[-1]
            cluster = issuers.get(host.rsplit("/", 1)[-1])
            context = {f"{host}:sub": [claims.get("sub", "")], f"{host}:aud": audience}
            if cluster is not None and trust_allows(trust, "Federated", provider,
                                                    "sts:AssumeRoleWithWebIdentity", role_arn,
                                                    context):
                resp = forward(call)
                found = re.search(rb"<AccessKeyId>([^<]+)</AccessKeyId>", resp.body)
                if resp.status == 200 and found:
                    service_account = claims.get("sub", "").rsplit(":", 1)[-1]
                    self.register(found.group(1).decode(), role_name,
                                  params.get("RoleSessionName", ""), cluster, service_account, {})
                return resp
        raise Refused(403, f"Not authorized to perform sts:AssumeRoleWithWebIdentity: the trust "
                           f"of {role_arn} allows no OIDC provider and subject "
                           f"{claims.get('sub')} with audience {audience}")

    # ---- enforcement ----

    def documents(self, role_name):
        """The role's inline and attached policies, re-read every few seconds; None once the
        role is gone (its sessions then can do nothing)."""
        with self.lock:
            cached = self.policies.get(role_name)
        if cached and time.time() - cached[0] < POLICY_CACHE_SECONDS:
            return cached[1]
        client = self.gap.client("iam", "us-east-1")
        docs = []
        try:
            for name in client.list_role_policies(RoleName=role_name)["PolicyNames"]:
                docs.append(client.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"])
            for attached in client.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
                policy = client.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]
                docs.append(client.get_policy_version(
                    PolicyArn=attached["PolicyArn"],
                    VersionId=policy["DefaultVersionId"])["PolicyVersion"]["Document"])
        except client.exceptions.NoSuchEntityException:
            docs = None
        if docs is not None:
            docs = [json.loads(urllib.parse.unquote(d)) if isinstance(d, str) else d for d in docs]
        with self.lock:
            self.policies[role_name] = (time.time(), docs)
            self.most_policies[role_name] = max(self.most_policies.get(role_name, 0),
                                                len(docs or []))
            if docs is not None:
                self.grants[role_name] = iam.granted_actions(docs)
        return docs

    def check(self, call, access_key):
        """None when the call may proceed (not a role session's, or allowed); else the refusal
        as (code, message, status)."""
        with self.lock:
            session = self.sessions.get(access_key)
        if session is None:
            return None
        docs = self.documents(session["role"])
        params = call.json_body() if call.protocol == "json" else call.params
        if call.protocol == "rest-json":
            params = {"name": (call.segments() + ["", ""])[1]}
        auths = iam.authorizations(call.service, call.operation, params, call.region,
                                   self.account, self.lookup)
        if docs is None:
            verdict = iam.Verdict(False, auths[0] if auths else iam.Authorization(
                f"{call.service}:{call.operation}", "*", {}),
                f"the role {session['role']} no longer exists", [])
        else:
            verdict = iam.decide(docs, auths, session["context"])
        with self.lock:
            self.evaluated += 1
            used = self.used.setdefault(session["label"], {})
            for a in {a.action for a in auths} if verdict.allowed else ():
                used[a] = used.get(a, 0) + 1
            if verdict.allowed:
                return None
            self.denied_count += 1
            denied = verdict.denied
            # Teardown detaches the role's policies, then deletes it, while the controller may
            # still be polling: refusals then are not the policies' fault. `role_intact` says
            # the role had every policy it was ever seen with.
            intact = docs is not None and len(docs) >= self.most_policies.get(session["role"], 0)
            record = {"principal": session["arn"], "label": session["label"],
                      "cluster": session["cluster"], "role_intact": intact,
                      "operation": f"{call.service}:{call.operation}", "action": denied.action,
                      "resource": denied.resource, "reason": verdict.reason, "t": round(time.time(), 3)}
            self.denied.append(record)
        message = (f"User: {session['arn']} is not authorized to perform: {denied.action} on "
                   f"resource: {denied.resource} because {verdict.reason}")
        if call.protocol == "ec2":
            return "UnauthorizedOperation", "You are not authorized to perform this operation. " + message, 403
        if call.protocol == "json" and call.service != "sqs":
            return "AccessDeniedException", message, 400
        return "AccessDenied", message, 403

    def report(self, cluster=None):
        """Every decision so far; with `cluster`, only the refusals of that cluster's sessions."""
        with self.lock:
            # Per service account: what its sessions' roles allow, against what they used.
            granted = {}
            for session in self.sessions.values():
                granted.setdefault(session["label"], set()).update(
                    self.grants.get(session["role"], ()))
            return {
                "evaluated": self.evaluated, "denied_count": self.denied_count,
                "denied": [d for d in self.denied if cluster in (None, d["cluster"])],
                "principals": {
                    label: {"used": dict(sorted(used.items())),
                            "unused_grants": iam.unused_grants(
                                [{"Statement": [{"Effect": "Allow",
                                                 "Action": sorted(granted.get(label, ())),
                                                 "Resource": "*"}]}],
                                set(used))}
                    for label, used in sorted(self.used.items())
                },
            }
