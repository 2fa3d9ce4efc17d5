"""A StreamJob's name is refused at apply time when the objects named after it could not exist.

The rule (api.crd.name_rules) is checked both ways against the real API server:
every name it accepts gives owned objects the API server accepts (a server-side
dry run of the builders' manifests), and every name it refuses would have broken
one of them on every reconcile pass.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml

from streamjob_operator.api import crd
from streamjob_operator.api.spec import parse_spec
from streamjob_operator.k8s import resources
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.model import CreateDriver
from testbed import locate
from testbed.waiting import crds_established, wait_for

from test_crd_validation import base

ACCEPTED = [
    pytest.param("a", id="one letter"),
    pytest.param("a" * 63, id="63 characters"),
    pytest.param("clicks-per-user-2", id="letters digits and dashes"),
    pytest.param("j" + "-9" * 31, id="63 characters ending in a digit"),
]

# (name, why the message gives, whether this test bed's API server refuses an owned object)
REFUSED = [
    pytest.param("a" * 70, "must be no more than 63 characters", True, id="70 characters (label value)"),
    pytest.param("a" * 64, "must be no more than 63 characters", True, id="64 characters (label value)"),
    # Kubernetes 1.36 (the test bed) allows a Service name with a digit first
    # (KEP-5311, beta); every earlier version refuses it, so the rule keeps it out
    pytest.param("1clicks", "must start with a lowercase letter", False, id="a digit first (Service name before 1.36)"),
    pytest.param("clicks.per.user", "no '.'", True, id="dots (Service name)"),
]
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # Service names, Kubernetes < 1.36

def owned_objects(name: str, namespace: str) -> dict[str, Any]:
    """Every object the operator creates for a job, as a List, at a small and a large driver epoch."""
    owner = Owner(name, namespace, "00000000-0000-0000-0000-000000000000")
    spec = parse_spec({**base()["spec"], "serviceAccountName": "default"})  # the pod needs an existing account
    layout = RuntimeLayout()
    items = [
        resources.driver_service(owner, layout),
        resources.driver_service_account(owner),
        resources.driver_role(owner),
        resources.driver_role_binding(owner),
        resources.token_secret(owner, "t0ken"),
    ]
    for epoch in (1, 123456):
        action = CreateDriver(pod=names.driver_pod(name, epoch), epoch=epoch, spec_json="{}",
                              checkpoint_location="s3a://b/ck/run-1", spec_hash="0")
        items += [resources.job_config_map(owner, spec, epoch), resources.driver_pod(owner, spec, action, layout)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def dry_run(kubectl_run, namespace: str, name: str):
    return kubectl_run("create", "--dry-run=server", "-n", namespace, "-f", "-",
                       stdin=json.dumps(owned_objects(name, namespace)), check=False)


@pytest.mark.parametrize("name", ACCEPTED)
def test_an_accepted_name_gives_objects_the_api_server_accepts(kubectl_run, streamjob_crd, namespace, name):
    obj = base()
    obj["metadata"]["name"] = name
    applied = kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert applied.returncode == 0, applied.stderr
    created = dry_run(kubectl_run, namespace, name)
    assert created.returncode == 0, created.stderr


@pytest.mark.parametrize(("name", "why", "refused_here"), REFUSED)
def test_a_name_owned_objects_cannot_carry_is_refused_saying_why(kubectl_run, streamjob_crd, namespace, name, why,
                                                                 refused_here):
    downstream = dry_run(kubectl_run, namespace, name)
    if refused_here:
        assert downstream.returncode != 0, "the rule refuses a name that would have worked"
    else:
        assert downstream.returncode == 0, downstream.stderr  # this API server is more lenient than older ones
        assert not DNS_1035_LABEL.match(names.driver_service(name))
    obj = base()
    obj["metadata"]["name"] = name
    result = kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert result.returncode != 0, f"accepted {name!r}"
    assert "metadata.name" in result.stderr and why in result.stderr, result.stderr
    assert kubectl_run("get", "sj", name, "-n", namespace, check=False).returncode != 0


def test_a_job_created_before_the_name_rules_can_still_be_updated_and_deleted(kubectl_run, testbed, namespace):
    """The rules skip updates: a job with a bad name from an older CRD must still lose its finalizer."""
    group = "ratchet.streamjob.io"
    generated = crd.generate_crd()
    generated["metadata"]["name"] = f"{crd.PLURAL}.{group}"
    generated["spec"]["group"] = group
    generated["spec"]["names"] = {**generated["spec"]["names"], "kind": "RatchetJob", "listKind": "RatchetJobList",
                                  "plural": crd.PLURAL, "singular": "ratchetjob", "shortNames": []}
    old = copy.deepcopy(generated)
    del old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    resource = f"{crd.PLURAL}.{group}"
    kubectl_run("apply", "--server-side", "-f", "-", stdin=json.dumps(old))
    try:
        kubectl = str(locate.bin_dir() / "kubectl")
        wait_for(lambda: crds_established(kubectl, str(testbed.kubeconfig), [resource]), 60, f"{resource} to be established")
        job = base()
        job.update(apiVersion=f"{group}/v1alpha1", kind="RatchetJob")
        job["metadata"] = {"name": "1" + "a" * 69, "finalizers": ["streamjob.io/test"]}
        wait_for(lambda: kubectl_run("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job), check=False).returncode == 0,
                 60, "the old CRD serves RatchetJobs")

        kubectl_run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(generated))
        fresh = {**job, "metadata": {"name": "2" + "a" * 69}}
        wait_for(lambda: kubectl_run("create", "-n", namespace, "-f", "-", stdin=json.dumps(fresh), check=False).returncode != 0,
                 60, "the new CRD refuses bad names")

        name = job["metadata"]["name"]
        kubectl_run("patch", resource, name, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"observedGeneration": 1}}))
        kubectl_run("patch", resource, name, "-n", namespace, "--type=merge", "-p", json.dumps({"metadata": {"finalizers": None}}))
        kubectl_run("delete", resource, name, "-n", namespace, "--wait=true", "--timeout=60s")
        assert kubectl_run("get", resource, name, "-n", namespace, check=False).returncode != 0
    finally:
        kubectl_run("delete", "crd", resource, "--ignore-not-found", "--wait=false", check=False)
