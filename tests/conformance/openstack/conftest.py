"""Fixtures of the OpenStack conformance checks.

The simulator and a stock clouds.yaml are set up by the Rust test that runs
these checks (adapters/sim/openstack/tests/conformance.rs): OS_CLOUD and
OS_CLIENT_CONFIG_FILE name the cloud, CONFORMANCE_FIXTURE what it holds.
"""

import json
import os
import subprocess

import openstack
import pytest


@pytest.fixture(scope="session")
def fixture():
    with open(os.environ["CONFORMANCE_FIXTURE"]) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def conn():
    """An openstacksdk connection from the stock clouds.yaml."""
    connection = openstack.connect(cloud=os.environ["OS_CLOUD"])
    yield connection
    connection.close()


class CliError(Exception):
    pass


def cli(*args, json_output=True):
    """Runs the `openstack` CLI; its JSON answer, or its text."""
    command = ["openstack", *args]
    if json_output:
        command += ["-f", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise CliError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout) if json_output else done.stdout


@pytest.fixture(scope="session")
def openstack_cli():
    return cli
