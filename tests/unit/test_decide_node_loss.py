"""Truth table of reconcile.decide for a lost node (issue 27): a driver that stops answering, a driver evicted.

A ready driver whose control endpoint has not answered for
spec.restartPolicy.driverUnreachableSeconds is deleted with grace 0 and the job
restarts from its checkpoint, counted as a failure; a driver evicted by the
node controller is deleted with grace 0 at once instead of a minute after its
grace period. Before, both waited for Kubernetes: 300 s of default toleration,
the grace period, then 60 s more.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from test_decide import BASE, NOW, READY, Expect, at, check, make_spec, obs, pod, running

from streamjob_contract.lifecycle import LifecycleState
from streamjob_contract.runtime_status import RuntimeStatus
from streamjob_operator.api.status import JobMetrics, StreamJobStatus
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.model import DeleteDriver, JobProgress, Observations

SILENT = JobProgress()  # the endpoint did not answer this pass, nor the one before (the first unanswered poll: now)


def silent_for(seconds: float) -> JobProgress:
    """Not answered this pass; the operator's first unanswered poll of it was ``seconds`` ago."""
    return JobProgress(unanswered_since=NOW - timedelta(seconds=seconds))

OFF = make_spec(restartPolicy={"driverUnreachableSeconds": 0})


def answered(seconds_ago: float, **over: Any) -> StreamJobStatus:
    """Running and ready; the driver last answered ``seconds_ago``."""
    metrics = JobMetrics.of(RuntimeStatus.model_validate({"state": "RUNNING", "runId": "r1", "queryId": "q1",
                                                          "latestCompletedBatch": 41}), observed_at=at(-seconds_ago))
    return running(job=metrics, **over)


CASES = [
    pytest.param(
        BASE, answered(31), obs(pod(), job=silent_for(21)),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["DriverUnreachable"],
               actions=[DeleteDriver("wc-driver-1", grace_seconds=0)], status={"restart_count": 1},
               status_op={"avoid_node": None}),
        id="a ready driver silent for longer than driverUnreachableSeconds is deleted with grace 0 and replaced",
    ),
    pytest.param(
        BASE, answered(31), obs(pod(node="node-a"), job=silent_for(21)),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["DriverUnreachable"],
               actions=[DeleteDriver("wc-driver-1", grace_seconds=0)], status_op={"avoid_node": "node-a"}),
        id="the restart records the node the silent driver was on: its replacement avoids it",
    ),
    pytest.param(
        BASE, answered(12), obs(pod(), job=silent_for(2)),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["JobNotReady"], requeue=5.0),
        id="a driver silent for less is waited on, and looked at again within 5 s",
    ),
    pytest.param(
        BASE, answered(28), obs(pod(), job=silent_for(18)),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["JobNotReady"], requeue=2.0),
        id="the next look is when the limit is reached",
    ),
    pytest.param(
        BASE, answered(600), obs(pod(), job=SILENT),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["JobNotReady"], requeue=5.0),
        id="a late pass (an overloaded operator, 600 s since it last asked) does not delete on its first unanswered poll",
    ),
    pytest.param(
        BASE, answered(600), obs(pod(), job=silent_for(21)),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["DriverUnreachable"],
               actions=[DeleteDriver("wc-driver-1", grace_seconds=0)]),
        id="counted from the first unanswered poll, plus at most one poll interval before it (21 + 10 s)",
    ),
    pytest.param(
        BASE, answered(600, deployed_at=at(-30)), obs(pod(), job=SILENT),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["JobNotReady"]),
        id="a driver that never answered since it was created is left to readiness, whatever the last answer of another",
    ),
    pytest.param(
        OFF, answered(3600), obs(pod(), job=SILENT),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["JobNotReady"]),
        id="driverUnreachableSeconds 0 turns it off",
    ),
    pytest.param(
        BASE, answered(3600), obs(pod(), job=None),
        Expect(state=LifecycleState.running, op=None, actions=[], events=[]),
        id="a pass that did not poll the driver decides nothing about it",
    ),
    pytest.param(
        BASE, answered(3600), obs(pod(), job=READY),
        Expect(state=LifecycleState.running, op=None, actions=[]),
        id="a driver that answers again is kept",
    ),
    pytest.param(
        BASE, running(), obs(pod(deleting=True, evicted_from_lost_node=True, deletion_deadline=NOW + timedelta(seconds=30)),
                             job=None),
        Expect(actions=[DeleteDriver("wc-driver-1", grace_seconds=0)], events=["DriverForceDeleted", "JobNotReady"]),
        id="a driver evicted by the node controller is deleted with grace 0 at once",
    ),
    pytest.param(
        OFF, running(), obs(pod(deleting=True, evicted_from_lost_node=True, deletion_deadline=NOW + timedelta(seconds=30)),
                            job=None),
        Expect(actions=[], events=["JobNotReady"]),
        id="with driverUnreachableSeconds 0 an evicted driver waits out its grace period as before",
    ),
]


@pytest.mark.parametrize(("spec", "status", "observations", "expect"), CASES)
def test_decide_node_loss(spec: Any, status: StreamJobStatus, observations: Observations, expect: Expect) -> None:
    check(decide(spec, status, observations, NOW), expect)


def test_the_default_is_half_a_minute_and_the_crd_says_so() -> None:
    """The documented default (docs/operations.md, "Lost node") is what a spec without the field gets, at apply too."""
    import yaml
    from pathlib import Path

    assert make_spec().restart_policy.driver_unreachable_seconds == 30
    crd = yaml.safe_load((Path(__file__).resolve().parents[2] / "crds" / "streamjob.io_streamjobs.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    field = schema["restartPolicy"]["properties"]["driverUnreachableSeconds"]
    assert (field["default"], field["minimum"], field["maximum"]) == (30, 0, 3600)


def test_the_replacement_of_a_silent_driver_is_created_avoiding_its_node_and_the_next_restart_forgets_it() -> None:
    from streamjob_operator.reconcile.model import CreateDriver

    lost = decide(BASE, answered(31), obs(pod(node="node-a"), job=silent_for(21)), NOW)
    assert lost.status.operation is not None and lost.status.operation.avoid_node == "node-a"
    # the old pod is gone: passes follow (Stopping, the restart delay) until the next driver is created, avoiding node-a
    status, now, created = lost.status, NOW, []
    for _ in range(10):
        now += timedelta(seconds=60)
        step = decide(BASE, status, obs(job=None), now)
        status, created = step.status, [a for a in step.actions if isinstance(a, CreateDriver)]
        if created:
            break
    assert [c.avoid_node for c in created] == ["node-a"], status
    # a restart for another reason (the driver exited) avoids no node
    from test_decide import failed

    exited = decide(BASE, running(), obs(failed()), NOW)
    assert exited.status.operation is not None and exited.status.operation.avoid_node is None
