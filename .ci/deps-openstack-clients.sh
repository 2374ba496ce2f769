#!/usr/bin/env bash
# Installs the real OpenStack clients the simulator's conformance run uses
# (tests/conformance/openstack): openstacksdk, python-openstackclient and
# pytest, pinned, into a venv keyed by the pins under
# ~/.cache/server-controller/openstack-clients/. Prints nothing when the venv
# is already there. `--path` prints the venv's path and installs nothing: the
# conformance test (adapters/sim/openstack/tests/conformance.rs) asks it where
# to look; OPENSTACK_CLIENTS_VENV overrides the path. Idempotent and quiet.
set -euo pipefail

OPENSTACKSDK=4.22.0
OPENSTACKCLIENT=10.5.0
PYTEST=9.2.0
KEYSTONEAUTH=5.18.1
OSC_LIB=4.7.0
KEY="sdk-$OPENSTACKSDK-osc-$OPENSTACKCLIENT-ksa-$KEYSTONEAUTH-osclib-$OSC_LIB-pytest-$PYTEST"
VENV="${OPENSTACK_CLIENTS_VENV:-$HOME/.cache/server-controller/openstack-clients/$KEY}"

if [ "${1:-}" = "--path" ]; then
  echo "$VENV"
  exit 0
fi

if [ -f "$VENV/stamp" ] && [ "$(cat "$VENV/stamp")" = "$KEY" ]; then
  exit 0
fi

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "openstacksdk==$OPENSTACKSDK" "python-openstackclient==$OPENSTACKCLIENT" "pytest==$PYTEST" \
  "keystoneauth1==$KEYSTONEAUTH" "osc-lib==$OSC_LIB"
echo "$KEY" >"$VENV/stamp"
echo "deps-openstack-clients: installed $KEY in $VENV"
