"""Status writes are conditional on the resourceVersion the pass read (issue 24, section 4).

On the test bed's API server, no operator running: the Actor writes a StreamJob's
status as a pass would. A write onto a version another writer has since replaced is
refused (409) and leaves the newer status as it was, so a replica that read before a
Lease handover cannot put an older write-ahead record over the new leader's. Before
the change, Actor.write_status sent no resourceVersion and the stale write won.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from streamjob_operator.api.spec import API_GROUP, API_VERSION, PLURAL
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.k8s.act import Actor
from streamjob_operator.k8s.clients import Clients
from streamjob_operator.k8s.resources import Owner


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "StreamJob", "metadata": {"name": name},
        "spec": {
            "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
            "job": {"entrypoint": "jobs.wordcount:build"},
            "checkpoint": {"location": "s3a://streamjob/checkpoints/wc"},
            "savepoint": {"location": "s3://streamjob/savepoints"},
            "s3": {"endpoint": "http://127.0.0.1:9000", "credentialsSecret": {"name": "s3"}},
            "state": "suspended",
        },
    }


def test_a_status_write_onto_a_replaced_version_is_refused(kube_api: client.ApiClient, crd: None, namespace: str) -> None:
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, manifest("wc"))
    read = custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, "wc")
    owner = Owner("wc", namespace, read["metadata"]["uid"])
    actor = Actor(Clients(kube_api), write_timeout=5)

    # the other writer (the new leader) records its pass on the version both read
    newer = actor.write_status(owner, StreamJobStatus(driver_epoch=7, last_error="the new leader's record"),
                               read["metadata"]["resourceVersion"])
    assert newer is not None and newer != read["metadata"]["resourceVersion"]

    # the old replica's pass, on the version it read before: refused, nothing written
    with pytest.raises(ApiException) as refused:
        actor.write_status(owner, StreamJobStatus(driver_epoch=6, last_error="a stale record"), read["metadata"]["resourceVersion"])
    assert refused.value.status == 409
    status = custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, "wc")["status"]
    assert status["driverEpoch"] == 7 and status["lastError"] == "the new leader's record", status

    # a pass that read the current version writes
    assert actor.write_status(owner, StreamJobStatus(driver_epoch=8), newer) is not None
    status = custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, "wc")["status"]
    assert status["driverEpoch"] == 8, status
