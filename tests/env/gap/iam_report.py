"""What IAM decided for the controllers' role sessions since the gap layer started (roles.py),
printed after the suite by tests/run.sh: per service account (jointer-controller, karpenter),
the actions used and how often, the calls refused while the role held all its policies, and
the granted actions that neither controller used (least privilege).

    "$JOINTER_TESTENV_PYTHON" tests/env/gap/iam_report.py [--json]
"""

import http.client
import json
import os
import sys
from urllib.parse import urlsplit


def fetch():
    url = urlsplit(os.environ["JOINTER_GAP_URL"])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request("GET", "/_gap/iam")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def main():
    report = fetch()
    if "--json" in sys.argv[1:]:
        print(json.dumps(report, indent=2))
        return
    principals = report["principals"]
    refused = [d for d in report["denied"] if d["role_intact"]]
    print(f"IAM: {report['evaluated']} calls of the controllers' role sessions evaluated, "
          f"{len(refused)} refused while the role held all its policies")
    for d in refused:
        print(f"  refused {d['label']} ({d['cluster']}): {d['action']} on {d['resource']}")
    for label, p in sorted(principals.items()):
        used = ", ".join(f"{a} {n}" for a, n in p["used"].items())
        print(f"{label}: {sum(p['used'].values())} authorizations allowed — {used}")
    if principals:
        unused = set.intersection(*(set(p["unused_grants"]) for p in principals.values()))
        print("granted but used by no controller: " + (", ".join(sorted(unused)) or "none"))


if __name__ == "__main__":
    main()
