"""IAM authorization the way AWS does it, for the gap layer (pure: no I/O, stdlib only).

Three parts:

- `authorizations(...)`: the authorizations AWS checks for one parsed API call (action,
  resource ARN, request context), following the Service Authorization Reference and EC2's
  resource-level permissions / tag-on-create rules for the calls a node autoscaler makes.
- `evaluate(...)` / `decide(...)`: identity-policy evaluation (IAM policy evaluation logic):
  an explicit Deny wins; otherwise allowed iff some Allow statement matches the action, the
  resource and every condition; otherwise implicitly denied.
- `granted_actions(...)` / `unused_grants(...)`: what the policies allow that was never used.

Not modelled: resource policies, permission boundaries, SCPs, session policies, policy
variables (`${...}`), NotPrincipal, date and IP operators, and the AMI's snapshots (RunInstances
also authorizes `snapshot/*`; nothing here can look an AMI's snapshots up).
"""

import functools
import re
from dataclasses import dataclass, field

EC2_PRINCIPAL = "ec2.amazonaws.com"


@dataclass(frozen=True)
class Authorization:
    """One check AWS makes: `action` on `resource` (an ARN or "*") with its request context."""

    action: str
    resource: str
    context: dict = field(default_factory=dict)  # condition key -> list[str]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    sid: str | None
    reason: str


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    denied: Authorization | None
    reason: str
    sids: list


# ---- matching ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _glob_re(pattern, ignore_case):
    """IAM wildcards: `*` any run of characters (none included), `?` exactly one."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob(pattern, value, ignore_case=False):
    return _glob_re(str(pattern), ignore_case).fullmatch(str(value)) is not None


def action_matches(pattern, action):
    """Action names match case-insensitively, with wildcards (`ec2:Describe*`, `*`)."""
    return glob(pattern, action, ignore_case=True)


def arn_matches(pattern, arn):
    """ARNs match case-sensitively, each of the six colon-separated parts on its own (a
    wildcard in the account part matches the empty account of AMIs and public parameters);
    the resource part may itself hold colons and slashes."""
    if pattern == "*":
        return True
    pp, ap = pattern.split(":", 5), arn.split(":", 5)
    if len(pp) == 6 and len(ap) == 6:
        return all(glob(p, a) for p, a in zip(pp, ap))
    return glob(pattern, arn)


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and set(value) <= {"member", "item"} and value:
        return _as_list(value.get("member", value.get("item")))
    return [value]


def _text(value):
    """A policy value as IAM compares it: booleans as `true`/`false`, numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---- conditions -------------------------------------------------------------------------


def _num(a, b, cmp):
    try:
        return cmp(float(b), float(a))
    except (TypeError, ValueError):
        return False


# base operator -> (does one policy value match one context value, is it a negation)
_OPERATORS = {
    "stringequals": (lambda p, c: p == c, False),
    "stringnotequals": (lambda p, c: p == c, True),
    "stringequalsignorecase": (lambda p, c: p.casefold() == c.casefold(), False),
    "stringnotequalsignorecase": (lambda p, c: p.casefold() == c.casefold(), True),
    "stringlike": (glob, False),
    "stringnotlike": (glob, True),
    "arnequals": (arn_matches, False),
    "arnlike": (arn_matches, False),
    "arnnotequals": (arn_matches, True),
    "arnnotlike": (arn_matches, True),
    "bool": (lambda p, c: p.lower() == c.lower(), False),
    "numericequals": (lambda p, c: _num(p, c, lambda x, y: x == y), False),
    "numericnotequals": (lambda p, c: _num(p, c, lambda x, y: x == y), True),
    "numericlessthan": (lambda p, c: _num(p, c, lambda x, y: x < y), False),
    "numericlessthanequals": (lambda p, c: _num(p, c, lambda x, y: x <= y), False),
    "numericgreaterthan": (lambda p, c: _num(p, c, lambda x, y: x > y), False),
    "numericgreaterthanequals": (lambda p, c: _num(p, c, lambda x, y: x >= y), False),
}


def _key_norm(key):
    """Condition key names are case-insensitive; the tag key after `/` is kept exact."""
    prefix, slash, rest = key.partition("/")
    return prefix.lower() + slash + rest


def _normalize_context(*contexts):
    out = {}
    for ctx in contexts:
        for k, v in (ctx or {}).items():
            out[_key_norm(k)] = [_text(x) for x in _as_list(v)]
    return out


def condition_holds(operator, key, policy_values, context):
    """One `operator: {key: values}` entry against a normalized context.

    Honoured: values of one key are ORed; a key missing from the context makes a positive
    operator false and a negated one (StringNot*, ArnNot*, NumericNotEquals) true; `...IfExists`
    makes a missing key true; `Null: true` means absent; `ForAllValues:` is true for a missing
    key and needs every context value to match; `ForAnyValue:` is false for a missing key and
    needs one context value to match. An operator this module does not know is false."""
    qualifier, _, base = operator.rpartition(":")
    qualifier, base = qualifier.lower(), base.lower()
    values = context.get(_key_norm(key))
    missing = not values
    wanted = [_text(v) for v in _as_list(policy_values)]
    if base == "null":
        return any((w.lower() == "true") == missing for w in wanted)
    if_exists = base.endswith("ifexists")
    base = base[: -len("ifexists")] if if_exists else base
    if base not in _OPERATORS or qualifier not in ("", "forallvalues", "foranyvalue"):
        return False
    match, negated = _OPERATORS[base]
    if missing:
        if if_exists or qualifier == "forallvalues":
            return True
        return False if qualifier == "foranyvalue" else negated

    def ok(value):
        hit = any(match(w, value) for w in wanted)
        return not hit if negated else hit

    if qualifier == "forallvalues":
        return all(ok(v) for v in values)
    if qualifier == "foranyvalue":
        return any(ok(v) for v in values)
    hit = any(any(match(w, v) for w in wanted) for v in values)
    return not hit if negated else hit


def _failed_conditions(condition, context):
    """The (operator, key) entries of a Condition block that do not hold (all must: AND)."""
    return [(operator, key) for operator, entries in (condition or {}).items()
            for key, wanted in (entries or {}).items()
            if not condition_holds(operator, key, wanted, context)]


# ---- evaluation -------------------------------------------------------------------------


def _statements(document):
    for i, st in enumerate(_as_list((document or {}).get("Statement"))):
        if isinstance(st, dict):
            yield i, st


def _matches_action(st, action):
    if "NotAction" in st:
        return not any(action_matches(p, action) for p in _as_list(st["NotAction"]))
    return any(action_matches(p, action) for p in _as_list(st.get("Action")))


def _matches_resource(st, resource):
    """A statement with neither Resource nor NotResource (a trust policy's) matches anything."""
    if "NotResource" in st:
        return not any(arn_matches(p, resource) for p in _as_list(st["NotResource"]))
    if "Resource" not in st:
        return True
    # A request on "*" (an action without resource-level permissions) needs a "*" grant.
    if resource == "*":
        return any(p == "*" for p in _as_list(st["Resource"]))
    return any(arn_matches(p, resource) for p in _as_list(st["Resource"]))


def evaluate(documents, auth, principal_context=None):
    """Explicit Deny wins; else the first matching Allow allows; else implicit deny, with the
    nearest miss (the Allow matching action and resource with the fewest failing conditions)
    as reason."""
    ctx = _normalize_context(principal_context, auth.context)
    allow, near, covering = None, None, []
    for d, doc in enumerate(documents or []):
        for i, st in _statements(doc):
            label = st.get("Sid") or f"document {d} statement {i}"
            if not _matches_action(st, auth.action):
                continue
            is_allow = str(st.get("Effect", "")).lower() == "allow"
            if not _matches_resource(st, auth.resource):
                if is_allow:
                    covering.extend(_as_list(st.get("Resource")))
                continue
            failed = _failed_conditions(st.get("Condition"), ctx)
            if failed:
                if is_allow and (near is None or len(failed) < len(near[1])):
                    near = (label, failed)
                continue
            if not is_allow:
                return Decision(False, st.get("Sid"),
                                f"{auth.action} on {auth.resource} explicitly denied by {label}")
            if allow is None:
                allow = (st.get("Sid"), label)
    if allow is not None:
        return Decision(True, allow[0], f"{auth.action} on {auth.resource} allowed by {allow[1]}")
    return Decision(False, None, _implicit_reason(auth, ctx, near, covering))


def _implicit_reason(auth, ctx, near, covering):
    reason = f"no statement allows {auth.action} on {auth.resource}"
    if near:
        label, ((operator, key), *_) = near
        reason += (f"; nearest: {label} fails {operator} {key} "
                   f"(request has {ctx.get(_key_norm(key), 'no such key')})")
    elif covering:
        reason += f"; the action is granted only on {sorted(set(map(str, covering)))[:4]}"
    return reason


def decide(documents, auths, principal_context=None):
    """Every authorization of a call must be allowed; the first refused one is named."""
    sids = []
    for auth in auths:
        d = evaluate(documents, auth, principal_context)
        if not d.allowed:
            return Verdict(False, auth, d.reason, sids)
        if d.sid and d.sid not in sids:
            sids.append(d.sid)
    return Verdict(True, None, "allowed" if auths else "no authorization needed", sids)


def granted_actions(documents):
    """The Action patterns of Allow statements, as written (NotAction grants are left out)."""
    out = set()
    for doc in documents or []:
        for _, st in _statements(doc):
            if str(st.get("Effect", "")).lower() == "allow":
                out.update(str(a) for a in _as_list(st.get("Action")))
    return out


def unused_grants(documents, used_actions):
    """Granted action patterns (wildcards honoured) that match none of the used actions."""
    return sorted(g for g in granted_actions(documents)
                  if not any(action_matches(g, u) for u in used_actions))


# ---- the authorizations of a call -------------------------------------------------------


def _auth(action, resource, region, request_tags=None, resource_tags=None, extra=None,
          tag_keys=None, tag_prefixes=("aws",)):
    """An Authorization whose context holds aws:RequestedRegion, the request tags
    (aws:RequestTag/K and aws:TagKeys), the resource's tags (aws:ResourceTag/K, and the
    service's own alias such as ec2:ResourceTag/K) and any service keys."""
    ctx = {"aws:RequestedRegion": [region]}
    for k, v in (request_tags or {}).items():
        ctx[f"aws:RequestTag/{k}"] = [v]
    keys = list(request_tags or {}) if tag_keys is None else list(tag_keys)
    if keys:
        ctx["aws:TagKeys"] = keys
    for k, v in (resource_tags or {}).items():
        for prefix in tag_prefixes:
            ctx[f"{prefix}:ResourceTag/{k}"] = [v]
    ctx.update(extra or {})
    return Authorization(action, resource, ctx)


def _tags(items):
    """[{Key, Value}] (EC2 `Tag`/`Tags`, IAM `Tags.member`) as a dict."""
    return {str(t["Key"]): str(t.get("Value", "")) for t in _as_list(items)
            if isinstance(t, dict) and "Key" in t}


def _tag_specs(specs):
    """TagSpecification(s) as {resource type: tags}, later specs of a type winning."""
    out = {}
    for spec in _as_list(specs):
        if isinstance(spec, dict) and spec.get("ResourceType"):
            tags = _tags(spec.get("Tag", spec.get("Tags")))
            out.setdefault(spec["ResourceType"], {}).update(tags)
    return out


EC2_ID_TYPES = (
    ("i-", "instance"), ("lt-", "launch-template"), ("sg-", "security-group"),
    ("subnet-", "subnet"), ("vol-", "volume"), ("eni-", "network-interface"),
    ("ami-", "image"), ("snap-", "snapshot"), ("fleet-", "fleet"),
    ("sir-", "spot-instances-request"), ("vpc-", "vpc"), ("cr-", "capacity-reservation"),
    ("pg-", "placement-group"), ("key-", "key-pair"),
)
_NO_ACCOUNT = ("image", "snapshot")  # arn:aws:ec2:region::image/ami-… (Amazon's or shared)


def ec2_arn(partition, region, account, rtype, rid):
    acct = "" if rtype in _NO_ACCOUNT else account
    return f"arn:{partition}:ec2:{region}:{acct}:{rtype}/{rid}"


def _ec2_type(resource_id):
    return next((t for p, t in EC2_ID_TYPES if str(resource_id).startswith(p)), None)


class _Launch:
    """What one RunInstances / CreateFleet touches, gathered from the call and its templates."""

    def __init__(self):
        self.templates, self.images, self.subnets, self.groups = [], [], [], []
        self.template_tags, self.profiles = {}, []

    @staticmethod
    def _add(seq, *values):
        for v in values:
            if v and v not in seq:
                seq.append(v)

    def add_template(self, spec, lookup, region):
        """Resolve {LaunchTemplateId|LaunchTemplateName, Version}; returns its data."""
        tid, name = spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName")
        if not (tid or name):
            return {}
        lt = lookup.launch_template(region, template_id=tid, template_name=name,
                                    version=spec.get("Version"))
        if lt is None:
            self.templates.append({"id": tid or "*", "tags": {}})
            return {}
        if all(t["id"] != lt["id"] for t in self.templates):
            self.templates.append(lt)
        data = lt.get("data") or {}
        for rtype, tags in _tag_specs(data.get("TagSpecifications")).items():
            self.template_tags.setdefault(rtype, {}).update(tags)
        self._add(self.groups, *_as_list(data.get("SecurityGroupIds")))
        for ni in _as_list(data.get("NetworkInterfaces")):
            self._add(self.groups, *_as_list(ni.get("Groups")))
        self._add_profile(data.get("IamInstanceProfile"))
        return data

    def _add_profile(self, spec):
        if isinstance(spec, dict) and (spec.get("Arn") or spec.get("Name")):
            self.profiles.append(spec)

    @staticmethod
    def template_subnets(data):
        return [ni.get("SubnetId") for ni in _as_list(data.get("NetworkInterfaces"))
                if isinstance(ni, dict)]

    def request_tags(self, call_specs, rtype):
        """A created type's request tags: the template's of that type, then the call's."""
        return {**self.template_tags.get(rtype, {}), **call_specs.get(rtype, {})}


def _pass_roles(lookup, profiles, partition, account, region):
    """iam:PassRole on the role(s) of the instance profile a launch names, for EC2."""
    out = []
    for spec in profiles:
        name = spec.get("Name") or str(spec.get("Arn", "")).rsplit("/", 1)[-1]
        profile = lookup.instance_profile(name)
        for role in (profile or {}).get("roles", []):
            if not str(role).startswith("arn:"):
                role = f"arn:{partition}:iam::{account}:role/{role}"
            out.append(_auth("iam:PassRole", role, region,
                             extra={"iam:PassedToService": [EC2_PRINCIPAL]}))
    return out


def _launch_auths(op, launch, created, call_specs, partition, region, account, lookup):
    """The checks of a launch: the action on every created type (with its request tags) and
    every existing resource used (with its tags); ec2:CreateTags with ec2:CreateAction on each
    created type that gets tags; iam:PassRole for the instance profile's roles."""
    action = f"ec2:{op}"
    arn = functools.partial(ec2_arn, partition, region, account)
    existing = lambda rid: lookup.ec2_tags(region, rid) or {}  # noqa: E731
    ec2_tags = ("aws", "ec2")
    out = [_auth(action, arn(rt, "*"), region, request_tags=launch.request_tags(call_specs, rt))
           for rt in created]
    for lt in launch.templates:
        out.append(_auth(action, arn("launch-template", lt["id"]), region,
                         resource_tags=lt.get("tags") or {}, tag_prefixes=ec2_tags))
    for rtype, ids in (("image", launch.images), ("subnet", launch.subnets),
                       ("security-group", launch.groups)):
        out.extend(_auth(action, arn(rtype, rid), region, resource_tags=existing(rid),
                         tag_prefixes=ec2_tags) for rid in ids)
    for rt in created:
        tags = launch.request_tags(call_specs, rt)
        if tags:
            out.append(_auth("ec2:CreateTags", arn(rt, "*"), region, request_tags=tags,
                             extra={"ec2:CreateAction": [op]}))
    return out + _pass_roles(lookup, launch.profiles, partition, account, region)


def _create_fleet(params, partition, region, account, lookup):
    """CreateFleet (instant): fleet/*, instance/*, volume/*, network-interface/* and, for a
    spot default, spot-instances-request/*; templates, AMIs, subnets, security groups."""
    launch = _Launch()
    for cfg in _as_list(params.get("LaunchTemplateConfigs")):
        data = launch.add_template(cfg.get("LaunchTemplateSpecification") or {}, lookup, region)
        for o in _as_list(cfg.get("Overrides")) or [{}]:
            launch._add(launch.images, o.get("ImageId") or data.get("ImageId"))
            launch._add(launch.subnets,
                        *([o["SubnetId"]] if o.get("SubnetId") else launch.template_subnets(data)))
    created = ["fleet", "instance", "volume", "network-interface"]
    target = params.get("TargetCapacitySpecification") or {}
    if str(target.get("DefaultTargetCapacityType", "")).lower() == "spot":
        created.append("spot-instances-request")
    specs = _tag_specs(params.get("TagSpecification", params.get("TagSpecifications")))
    return _launch_auths("CreateFleet", launch, created, specs, partition, region, account, lookup)


def _run_instances(params, partition, region, account, lookup):
    """RunInstances: instance/*, volume/*, network-interface/* (spot-instances-request/* for a
    spot market), and the template, AMI, subnets and security groups it uses."""
    launch = _Launch()
    data = launch.add_template(params.get("LaunchTemplate") or {}, lookup, region)
    interfaces = [ni for ni in _as_list(params.get("NetworkInterface")) if isinstance(ni, dict)]
    launch._add(launch.images, params.get("ImageId") or data.get("ImageId"))
    subnets = [params.get("SubnetId")] + [ni.get("SubnetId") for ni in interfaces]
    launch._add(launch.subnets, *(s for s in subnets if s))
    if not launch.subnets:
        launch._add(launch.subnets, *launch.template_subnets(data))
    launch._add(launch.groups, *_as_list(params.get("SecurityGroupId")))
    for ni in interfaces:
        launch._add(launch.groups, *_as_list(ni.get("SecurityGroupId")))
    if params.get("IamInstanceProfile"):
        launch.profiles = []
        launch._add_profile(params["IamInstanceProfile"])
    market = (params.get("InstanceMarketOptions") or data.get("InstanceMarketOptions") or {})
    created = ["instance", "volume", "network-interface"]
    if str(market.get("MarketType", "")).lower() == "spot":
        created.append("spot-instances-request")
    specs = _tag_specs(params.get("TagSpecification", params.get("TagSpecifications")))
    return _launch_auths("RunInstances", launch, created, specs, partition, region, account,
                         lookup)


def _ec2(op, params, partition, region, account, lookup):
    arn = functools.partial(ec2_arn, partition, region, account)
    ec2_tags = ("aws", "ec2")
    if op.startswith("Describe"):
        return [_auth(f"ec2:{op}", "*", region)]
    if op == "CreateFleet":
        return _create_fleet(params, partition, region, account, lookup)
    if op == "RunInstances":
        return _run_instances(params, partition, region, account, lookup)
    if op == "CreateLaunchTemplate":
        tags = _tag_specs(params.get("TagSpecification")).get("launch-template", {})
        out = [_auth("ec2:CreateLaunchTemplate", arn("launch-template", "*"), region,
                     request_tags=tags)]
        if tags:
            out.append(_auth("ec2:CreateTags", arn("launch-template", "*"), region,
                             request_tags=tags,
                             extra={"ec2:CreateAction": ["CreateLaunchTemplate"]}))
        return out
    # A resource EC2 does not know is answered with its NotFound error before any tag
    # condition could be evaluated: such ids are left to the service (no authorization).
    if op == "DeleteLaunchTemplate":
        tid, name = params.get("LaunchTemplateId"), params.get("LaunchTemplateName")
        lt = lookup.launch_template(region, template_id=tid, template_name=name)
        if lt is None:
            return []
        return [_auth("ec2:DeleteLaunchTemplate", arn("launch-template", lt["id"]), region,
                      resource_tags=lt.get("tags") or {}, tag_prefixes=ec2_tags)]
    if op == "TerminateInstances":
        known = [(i, lookup.ec2_tags(region, i)) for i in _as_list(params.get("InstanceId"))]
        return [_auth("ec2:TerminateInstances", arn("instance", i), region,
                      resource_tags=tags, tag_prefixes=ec2_tags)
                for i, tags in known if tags is not None]
    if op in ("CreateTags", "DeleteTags"):
        items = [t for t in _as_list(params.get("Tag")) if isinstance(t, dict) and "Key" in t]
        request = {t["Key"]: t["Value"] for t in items if "Value" in t}
        keys = [t["Key"] for t in items]
        out = []
        for rid in _as_list(params.get("ResourceId")):
            rtype, tags = _ec2_type(rid), lookup.ec2_tags(region, rid)
            if tags is None:
                continue
            out.append(_auth(f"ec2:{op}", arn(rtype, rid) if rtype else "*", region,
                             request_tags=request, tag_keys=keys, resource_tags=tags,
                             tag_prefixes=ec2_tags))
        return out
    return [_auth(f"ec2:{op}", "*", region)]


def _iam(op, params, partition, region, account, lookup):
    """IAM is global: ARNs have no region. Instance-profile checks carry the profile's tags."""
    name = params.get("InstanceProfileName")
    if not name:
        return [_auth(f"iam:{op}", "*", region)]
    path = params.get("Path") or "/"
    arn = f"arn:{partition}:iam::{account}:instance-profile{path}{name}"
    request = _tags(_as_list(params.get("Tags")))
    iam_tags = ("aws", "iam")
    if op == "CreateInstanceProfile":
        return [_auth("iam:CreateInstanceProfile", arn, region, request_tags=request)]
    profile = lookup.instance_profile(name) or {}
    arn, tags = profile.get("arn") or arn, profile.get("tags") or {}
    if op == "TagInstanceProfile":
        return [_auth("iam:TagInstanceProfile", arn, region, request_tags=request,
                      resource_tags=tags, tag_prefixes=iam_tags)]
    if op == "UntagInstanceProfile":
        return [_auth("iam:UntagInstanceProfile", arn, region, resource_tags=tags,
                      tag_keys=[str(k) for k in _as_list(params.get("TagKeys"))],
                      tag_prefixes=iam_tags)]
    out = [_auth(f"iam:{op}", arn, region, resource_tags=tags, tag_prefixes=iam_tags)]
    if op == "AddRoleToInstanceProfile" and params.get("RoleName"):
        role = f"arn:{partition}:iam::{account}:role/{params['RoleName']}"
        out.append(_auth("iam:PassRole", role, region,
                         extra={"iam:PassedToService": [EC2_PRINCIPAL]}))
    return out


_SQS_ACTIONS = {"DeleteMessageBatch": "DeleteMessage", "SendMessageBatch": "SendMessage",
                "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}


def _sqs(op, params, partition, region, account):
    """Batch operations are authorized as their single action; the queue ARN comes from the
    URL's last two path segments (account, name) or GetQueueUrl's QueueName."""
    action = "sqs:" + _SQS_ACTIONS.get(op, op)
    url = params.get("QueueUrl")
    if url:
        parts = str(url).rstrip("/").split("/")
        name = parts[-1]
        owner = parts[-2] if len(parts) > 1 and parts[-2].isdigit() else account
    elif params.get("QueueName"):
        name, owner = params["QueueName"], params.get("QueueOwnerAWSAccountId") or account
    else:
        return [_auth(action, "*", region)]
    return [_auth(action, f"arn:{partition}:sqs:{region}:{owner}:{name}", region)]


def _ssm_arn(name, partition, region, account):
    """Parameter ARNs drop the name's leading slash; AWS's public ones have no account."""
    name = str(name)
    if name.startswith("arn:"):
        return name
    if ":" in name:  # a version or label selector: name:3, name:label
        name = name.rsplit(":", 1)[0]
    name = name.lstrip("/")
    acct = "" if name.startswith("aws/service/") else account
    return f"arn:{partition}:ssm:{region}:{acct}:parameter/{name}"


def authorizations(service, operation, params, region, account, lookup, partition="aws"):
    """The authorizations AWS checks for one call; [] for calls nothing authorizes
    (sts:GetCallerIdentity). Unknown operations: `service:Operation` on "*"."""
    params = params or {}
    if service == "ec2":
        return _ec2(operation, params, partition, region, account, lookup)
    if service == "iam":
        return _iam(operation, params, partition, region, account, lookup)
    if service == "sqs":
        return _sqs(operation, params, partition, region, account)
    if service == "sts" and operation == "GetCallerIdentity":
        return []
    if service == "ssm" and operation in ("GetParameter", "GetParameters"):
        names = _as_list(params.get("Name")) + _as_list(params.get("Names"))
        return [_auth(f"ssm:{operation}", _ssm_arn(n, partition, region, account), region)
                for n in names]
    if service == "eks" and operation == "DescribeCluster":
        arn = f"arn:{partition}:eks:{region}:{account}:cluster/{params.get('name', '*')}"
        return [_auth("eks:DescribeCluster", arn, region)]
    if service == "arc-zonal-shift" and operation == "GetManagedResource":
        extra = {}
        if params.get("ResourceIdentifier"):
            extra["arc-zonal-shift:ResourceIdentifier"] = [params["ResourceIdentifier"]]
        return [_auth("arc-zonal-shift:GetManagedResource", "*", region, extra=extra)]
    return [_auth(f"{service}:{operation}", "*", region)]
