"""The control plane is the real one: RBAC enforced, controllers running."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from testbed import TestBed
from testbed.waiting import wait_for, wait_gone


def test_owner_reference_garbage_collection_deletes_dependents(core_v1: client.CoreV1Api, namespace: str) -> None:
    owner = core_v1.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner")))
    core_v1.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name="dependent",
        owner_references=[client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)],
    )))

    core_v1.delete_namespaced_config_map("owner", namespace)

    wait_gone(lambda: core_v1.read_namespaced_config_map("dependent", namespace), 60, "ConfigMap dependent (owner deleted)")


def test_rbac_forbids_a_service_account_without_roles(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    core_v1.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="nobody")))
    token = core_v1.create_namespaced_service_account_token(
        "nobody", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    ).status.token
    configuration = client.Configuration()
    configuration.host = testbed.api_url
    configuration.ssl_ca_cert = str(testbed.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as as_nobody:
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(as_nobody).list_namespaced_pod(namespace)

    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in refused.value.body


def test_deleting_a_namespace_removes_it_and_its_objects(core_v1: client.CoreV1Api) -> None:
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="doomed")))
    core_v1.create_namespaced_config_map("doomed", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="inside")))
    wait_for(lambda: core_v1.read_namespaced_service_account("default", "doomed"), 30, "default ServiceAccount in doomed")

    core_v1.delete_namespace("doomed")

    wait_gone(lambda: core_v1.read_namespace("doomed"), 60, "namespace doomed")
