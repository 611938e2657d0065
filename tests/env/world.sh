#!/usr/bin/env bash
# Resets the gap layer and moto and creates the AWS side of an existing EKS cluster (see
# world.py), then writes the jointer config for it to tests/env/.run/jointer.yaml and a
# summary of the created ids to tests/env/.run/world.json.
#
# Needs a running environment (tests/env/up.sh). Run it before each test that needs a
# clean world; it takes about 3 s (mostly moto re-initialising after its reset).
#
# Usage: tests/env/world.sh
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -f "${RUN_DIR}/env" ]] || die "the test environment is not up (run tests/env/up.sh)"
# shellcheck source=/dev/null
source "${RUN_DIR}/env"

start="$(now_ms)"

# The gap layer's reset drops its own state (access entries, pod identity associations,
# add-ons, faults, call log, price changes) and resets moto, which drops every object in
# every service (and re-creates the AWS-managed IAM policies), so each world starts from
# exactly the same state.
curl -fsS --max-time 30 -X POST "${JOINTER_GAP_URL}/_gap/reset" > /dev/null

"$JOINTER_TESTENV_PYTHON" "${ENV_DIR}/world.py" "${RUN_DIR}/world.json"
# The tests start with an empty call log: the world's own calls are not theirs.
curl -fsS --max-time 10 -X DELETE "${JOINTER_GAP_URL}/_gap/calls" > /dev/null

# The configuration under test: the cluster above, with the defaults the tests start from.
cat > "${RUN_DIR}/jointer.yaml" <<YAML
cluster: { name: ${JOINTER_TEST_CLUSTER}, region: ${AWS_REGION} }
identity: pod-identity
controller: { install: bundled, namespace: kube-system }
interruption: true
YAML

log "world created in $(fmt_ms $(( $(now_ms) - start ))): ${RUN_DIR}/world.json, ${RUN_DIR}/jointer.yaml"
