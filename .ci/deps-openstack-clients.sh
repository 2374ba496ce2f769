#!/usr/bin/env bash
# Installs the real OpenStack clients the simulator's conformance run uses
# (tests/conformance/openstack): openstacksdk, python-openstackclient and
# pytest, pinned, into a venv keyed by the pins under
# ~/.cache/server-controller/openstack-clients/. Prints nothing when the venv
# is already there; its path is what tests/openstack_conformance.rs looks for
# (or OPENSTACK_CLIENTS_VENV). Idempotent and quiet.
set -euo pipefail

OPENSTACKSDK=4.22.0
OPENSTACKCLIENT=10.5.0
PYTEST=9.2.0
KEYSTONEAUTH=5.18.1
OSC_LIB=4.7.0
KEY="sdk-$OPENSTACKSDK-osc-$OPENSTACKCLIENT-ksa-$KEYSTONEAUTH-osclib-$OSC_LIB-pytest-$PYTEST"
VENV="${OPENSTACK_CLIENTS_VENV:-$HOME/.cache/server-controller/openstack-clients/$KEY}"

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
