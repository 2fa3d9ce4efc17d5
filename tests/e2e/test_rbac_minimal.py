"""The chart's RBAC is minimal: a job's whole life passes under it, and every rule is used by a named step.

The operator runs as the chart's Deployment under its ServiceAccount token, the
driver under the per-job ServiceAccount and Role the operator creates (tokens
from the TokenRequest API, as the test bed's kubelet mounts them). The API
server's audit log records every request they make. Two claims:

- no request of theirs was denied (403) during the life: the grants are enough;
- every permission (verb x resource) of the operator's Roles and ClusterRole and
  of the driver's Role was used by some step, so removing any one makes the
  request of that step be denied. Operator permissions that only exist so the
  operator may grant them to drivers (RBAC's escalation check) count as used
  when the driver used them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import yaml
from kubernetes import client
from rbac_audit import Permission, first_use, permissions, requests, unused
from streamjob_e2e import REPO, Jobs, kill_driver_process, rate_job
from test_helm_install import helm

from streamjob_operator.k8s.resources import DRIVER_ROLE_RULES
from streamjob_operator.reconcile import names
from testbed import TestBed
from testbed.waiting import wait_for


JOB = "least"
OPERATOR = "streamjob-operator"  # the chart's ServiceAccount and Role names


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _executors(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"spark-role=executor,{names.LABEL_JOB}={JOB}").items)


def _running(pods: list[client.V1Pod]) -> list[client.V1Pod]:
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def _gone(jobs: Jobs) -> bool:
    try:
        jobs.get(JOB)
    except client.ApiException as err:
        return err.status == 404
    return False


def test_every_rule_of_the_chart_and_driver_rbac_is_used_and_none_is_missing(
    testbed: TestBed, crd: None, kube_api: client.ApiClient, namespace: str, s3_secret: str,
) -> None:
    release_ns = f"streamjob-rbac-{uuid.uuid4().hex[:5]}"
    core, rbac = client.CoreV1Api(kube_api), client.RbacAuthorizationV1Api(kube_api)
    jobs = Jobs(kube_api, namespace)
    steps: list[tuple[str, datetime]] = [("install", _now())]
    helm(testbed, "install", "streamjob", str(REPO / "charts" / "streamjob"), "--namespace", release_ns, "--create-namespace",
         "--set", f"watchNamespaces={{{namespace}}}", "--set", "driverServiceAccount.create=false", "--wait", "--timeout", "240s")
    operator_user = f"system:serviceaccount:{release_ns}:{OPERATOR}"
    try:
        # the install step ends when the operator (past its Lease) watches StreamJobs
        wait_for(lambda: any(q.verb == "watch" and q.resource == "streamjobs"
                             for q in requests(testbed.audit_log, {operator_user}, steps[0][1])),
                 120, "the operator watching StreamJobs (audit log)")
        steps.append(("deploy", _now()))
        jobs.apply(rate_job(JOB, testbed, prefix=f"rbac-{uuid.uuid4().hex[:6]}", executor={"instances": 1, "memory": "512m"}))
        jobs.wait(JOB, "ready with a completed batch",
                  lambda st: st.get("ready") is True and (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
        first = wait_for(lambda: _running(_executors(core, namespace)), 120, "a running executor pod")[0]
        driver_rules = rbac.read_namespaced_role(names.driver_role(JOB), namespace).rules

        steps.append(("executor failure", _now()))
        kill_driver_process(testbed, namespace, first.metadata.name)  # Spark deletes the failed pod and asks for another
        wait_for(lambda: first.metadata.name not in {p.metadata.name for p in _executors(core, namespace)}
                 and _running(_executors(core, namespace)), 180, "the failed executor deleted and a new one running")

        steps.append(("savepoint", _now()))
        jobs.patch(JOB, {"savepointNonce": 1})
        jobs.wait(JOB, "a manual savepoint", lambda st: (st.get("lastSavepoint") or {}).get("trigger") == "manual")

        steps.append(("driver failure", _now()))
        kill_driver_process(testbed, namespace, jobs.status(JOB)["driverPod"])
        jobs.wait_ready(JOB, driverPod=f"{JOB}-driver-2")

        steps.append(("delete", _now()))
        jobs.delete(JOB)
        wait_for(lambda: _gone(jobs) and not core.list_namespaced_pod(namespace).items, 240, "job, driver and executors gone")
        end = _now()

        namespace_users = {f"system:serviceaccount:{namespace}:{sa.metadata.name}"
                           for sa in core.list_namespaced_service_account(namespace).items}
        namespace_users.add(f"system:serviceaccount:{namespace}:{names.driver_service_account(JOB)}")  # deleted by now
        reqs = [q for q in requests(testbed.audit_log, {operator_user} | namespace_users, steps[0][1]) if q.at <= end]

        denied = [q for q in reqs if q.code == 403]
        assert not denied, "requests denied under the chart's RBAC:\n" + "\n".join(
            f"{q.user} {q.verb} {q.group}/{q.resource} {q.namespace}/{q.name}" for q in denied)

        operator_reqs = [q for q in reqs if q.user == operator_user]
        driver_reqs = [q for q in reqs if q.user != operator_user]
        driver_perms = permissions(driver_rules, namespace)
        operator_perms = (
            permissions(rbac.read_namespaced_role(OPERATOR, namespace).rules, namespace)
            + permissions(rbac.read_namespaced_role(f"{OPERATOR}-leader", release_ns).rules, release_ns)
            + permissions(rbac.read_cluster_role(f"{OPERATOR}-{release_ns}-crds").rules, "*")
        )
        granted = set(driver_perms)
        unused_perms = [p for p in unused(driver_perms, driver_reqs)] + [
            p for p in unused(operator_perms, operator_reqs) if p not in granted]
        used = {**{f"operator: {p}": s for p, s in first_use(operator_perms, operator_reqs, steps).items()},
                **{f"driver: {p}": s for p, s in first_use(driver_perms, driver_reqs, steps).items()}}
        assert not unused_perms, (
            "rules no step of the lifecycle used (remove them):\n" + "\n".join(map(str, unused_perms))
            + "\nused:\n" + "\n".join(f"{p}: {s}" for p, s in sorted(used.items())))
        # the chart's streamjob-driver Role (driverServiceAccount.create) grants exactly what the operator's does
        assert _chart_driver_rules(testbed, namespace) == _normal(DRIVER_ROLE_RULES) == _normal(driver_rules)
        print("first use of each permission:\n" + "\n".join(f"{p}: {s}" for p, s in sorted(used.items())))
    finally:
        helm(testbed, "uninstall", "streamjob", "--namespace", release_ns, "--wait", "--timeout", "120s")
        core.delete_namespace(release_ns)


def _normal(rules: list[Any]) -> set[Permission]:
    return set(permissions(rules, "-"))


def _chart_driver_rules(testbed: TestBed, namespace: str) -> set[Permission]:
    rendered = helm(testbed, "template", "t", str(REPO / "charts" / "streamjob"), "--namespace", "ops",
                    "--set", f"watchNamespaces={{{namespace}}}").stdout
    role = next(d for d in yaml.safe_load_all(rendered)
                if d and d["kind"] == "Role" and d["metadata"]["name"] == "streamjob-driver")
    return _normal(role["rules"])
