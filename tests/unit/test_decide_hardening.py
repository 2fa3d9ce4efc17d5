"""Truth tables of reconcile.decide for issue 7: deadlines, pod reasons, reported problems, spec fields that do what they say.

Each case failed (or could not be written) before the change that added it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from test_decide import (
    BASE,
    CK,
    NEW_IMAGE,
    NEW_JSON,
    NOW,
    OLD_JSON,
    READY,
    Expect,
    at,
    check,
    failed,
    fresh,
    make_spec,
    obs,
    pod,
    running,
    with_op,
)

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import ReconcileError, StreamJobStatus
from streamjob_operator.reconcile.decide import decide, hash_text, spec_json
from streamjob_operator.reconcile.decide.conditions import record_problems
from streamjob_operator.reconcile.model import (
    CreateDriver,
    DeleteDriver,
    EnsureSupportObjects,
    PodPhase,
    Problem,
)

SP = "s3://streamjob/savepoints/wc-20250301T115000Z-upgrade"
PENDING = pod("wc-driver-2", PodPhase.pending, waiting_reason="ErrImagePull",
              message="ErrImagePull: image ghcr.io/streamjob/streamjob-runtime:0.2.0-typo not found")


def deploying(kind: str = "restart", deadline: str | None = at(100), **over: Any) -> StreamJobStatus:
    status = running(ready=False, driver_pod="wc-driver-2", driver_epoch=2, state=LifecycleState.restarting, **over)
    return with_op(status, kind=kind, phase="Deploying", restore_mode="last-state", deadline=deadline)


CASES = [
    # --- every wait has a deadline (item 5) -------------------------------------------------
    pytest.param(
        BASE, StreamJobStatus(), obs(job=None),
        Expect(op=("deploy", "Deploying"), status={"operation": "deadline=2025-03-01T12:05:00Z"}),
        id="creating a driver records a deadline of readinessTimeoutSeconds for it to run",
    ),
    pytest.param(
        BASE, deploying(), obs(PENDING, job=None),
        Expect(op=("restart", "Deploying"), actions=[], events=["ErrImagePull"],
               conditions={"Degraded": ("True", "ErrImagePull")}),
        id="a driver pod waiting on ErrImagePull is Degraded with the pod's own reason at once",
    ),
    pytest.param(
        BASE, deploying(restart_count=1), obs(PENDING, job=None), at(101),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["DriverNotStarted"],
               status={"restart_count": 2}),
        id="a restart whose driver is still pending at the deadline counts a failure and restarts per the policy",
    ),
    pytest.param(
        BASE, deploying(restart_count=3), obs(PENDING, job=None), at(101),
        Expect(state=LifecycleState.failed, op=None, events=["RestartPolicyExhausted"],
               conditions={"Degraded": ("True", "RestartPolicyExhausted")}),
        id="a driver that never starts exhausts the restart policy and the job fails with the reason",
    ),
    pytest.param(
        BASE, deploying(), obs(job=None), at(101),
        Expect(op=("restart", "Stopping"), events=["DriverNotStarted"]),
        id="a driver pod the API server keeps refusing is given up at the deadline",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(ready=False, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON,
                        state=LifecycleState.upgrading),
                kind="upgrade", phase="Deploying", restore_mode="savepoint", savepoint_path=SP, deadline=at(100)),
        obs(PENDING, job=None), at(101),
        Expect(state=LifecycleState.rolling_back, op=("rollback", "Stopping"), events=["RollingBack"],
               status={"blocked_change": "reason=RolledBack"}),
        id="an upgrade whose new driver never starts (an image typo) is rolled back from the upgrade savepoint",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(ready=False, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON,
                        state=LifecycleState.upgrading),
                kind="upgrade", phase="Deploying", restore_mode="savepoint", savepoint_path=SP, deadline=at(100)),
        obs(pod("wc-driver-2"), job=None), at(10),
        Expect(op=("upgrade", "AwaitingReady"), status={"operation": "deadline=2025-03-01T12:01:40Z"}),
        id="the upgrade deadline set at pod creation also bounds the first batch (not restarted when the pod runs)",
    ),
    # --- every failure reaches status (item 6) -------------------------------------------------
    pytest.param(
        BASE, running(), obs(pod(), problems=(Problem("S3CredentialsUnavailable", "secrets \"s3\" not found"),)),
        Expect(state=LifecycleState.running, events=["S3CredentialsUnavailable"],
               status={"reconcile_error": "reason=S3CredentialsUnavailable"},
               conditions={"Degraded": ("True", "S3CredentialsUnavailable")}),
        id="a problem observe reports is in status and an event within the pass",
    ),
    pytest.param(
        BASE, running(reconcile_error=ReconcileError(reason="S3CredentialsUnavailable", message="x", time=at(-10))),
        obs(pod(), problems=(Problem("S3CredentialsUnavailable", "secrets \"s3\" not found"),)),
        Expect(events=[], status={"reconcile_error": "count=2"}, conditions={"Degraded": ("True", "S3CredentialsUnavailable")}),
        id="the same problem again is counted, not posted again",
    ),
    pytest.param(
        BASE,
        with_op(running(state=LifecycleState.upgrading, last_reconciled_spec=OLD_JSON), kind="upgrade", phase="Savepointing",
                savepoint_path=SP, trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1",
                target_spec=NEW_JSON),
        obs(failed(code=10, kind=ExitCode.STOPPED_FOR_SAVEPOINT, message="stopped for savepoint").__class__(
            name="wc-driver-1", phase=PodPhase.failed, exit_code=10, exit_kind=ExitCode.STOPPED_FOR_SAVEPOINT,
            savepoint_path=SP, savepoint_batch=77), job=None,
            problems=(Problem("S3Error", "reading the savepoint manifest: connection refused"),)),
        Expect(op=("upgrade", "Stopping"), events=["S3Error", "SavepointCompleted"],
               status={"last_savepoint": "batch_id=77"}),
        id="a savepoint the driver reports in its termination message completes though S3 could not be read",
    ),
    pytest.param(
        BASE,
        with_op(running(state=LifecycleState.restarting), kind="restart", phase="Stopping", restore_mode="last-state"),
        obs(pod(deleting=True, deletion_deadline=NOW - timedelta(seconds=61)), job=None),
        Expect(op=("restart", "Stopping"), actions=[DeleteDriver("wc-driver-1", grace_seconds=0)], events=["DriverForceDeleted"]),
        id="a driver pod still Terminating a minute after its grace period (lost node) is deleted with grace 0",
    ),
    pytest.param(
        BASE,
        with_op(running(state=LifecycleState.restarting), kind="restart", phase="Stopping", restore_mode="last-state"),
        obs(pod(deleting=True, deletion_deadline=NOW - timedelta(seconds=30)), job=None),
        Expect(op=("restart", "Stopping"), actions=[], events=[]),
        id="a driver pod within a minute of its grace period is waited on",
    ),
    # --- spec fields that do what they say (item 7) -------------------------------------------
    pytest.param(
        make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.3.0"),
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Stopping", restore_mode="savepoint",
                savepoint_path=SP, target_spec_hash=hash_text(NEW_JSON), target_spec=NEW_JSON),
        obs(job=None),
        Expect(op=("upgrade", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, NEW_JSON, fresh(2), SP, hash_text(NEW_JSON))]),
        id="an edit made during an upgrade is not deployed unchecked: the checked target spec is",
    ),
    pytest.param(
        make_spec(initialSavepointPath="s3://streamjob/savepoints/wc-old", savepointRedeployNonce=1), running(), obs(pod()),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Stopping"), events=["RedeployingFromSavepoint"],
               status={"operation": "savepoint_path='s3://streamjob/savepoints/wc-old'"}),
        id="savepointRedeployNonce on a running job stops it without a savepoint to restore initialSavepointPath",
    ),
    pytest.param(
        make_spec(initialSavepointPath="s3://streamjob/savepoints/wc-old", savepointRedeployNonce=1),
        running(state=LifecycleState.failed, ready=False, restart_count=3), obs(failed()),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Stopping"), events=["RedeployingFromSavepoint"],
               status={"restart_count": 0}),
        id="savepointRedeployNonce recovers a failed job from the named savepoint",
    ),
    pytest.param(
        make_spec(initialSavepointPath="s3://streamjob/savepoints/wc-old"), running(), obs(pod()),
        Expect(state=LifecycleState.running, op=None, actions=[], events=[]),
        id="changing initialSavepointPath alone does nothing on a deployed job (as documented)",
    ),
    pytest.param(
        make_spec(restartPolicy={"type": "FailureRate", "maxFailures": 60, "failureRateIntervalSeconds": 3600}),
        running(failure_times=[at(-i) for i in range(60, 0, -1)]), obs(failed()),
        Expect(state=LifecycleState.failed, events=["RestartPolicyExhausted"]),
        id="FailureRate with a large maxFailures is exhausted at maxFailures + 1 failures (the history keeps them all)",
    ),
]


def _matches(value: Any, want: str) -> bool:
    """``"field=value"``: the attribute of a nested model, compared as text."""
    field, _, expected = want.partition("=")
    return value is not None and str(getattr(value, field)).strip("'") == expected.strip("'")


@pytest.mark.parametrize(("spec", "status", "observations", "now", "expect"),
                         [pytest.param(*c.values[:3], *(c.values[3:4] if len(c.values) == 5 else (at(0),)), c.values[-1], id=c.id)
                          for c in CASES])
def test_decide_hardening(spec: Any, status: StreamJobStatus, observations: Any, now: str, expect: Expect) -> None:
    from streamjob_operator.reconcile.policy import parse_time

    when = parse_time(now)
    assert when is not None
    decision = decide(spec, status, observations, when)
    plain = Expect(**{**expect.__dict__, "status": {k: v for k, v in expect.status.items() if not (isinstance(v, str) and "=" in v)}})
    check(decision, plain)
    for name, want in expect.status.items():
        if isinstance(want, str) and "=" in want:
            assert _matches(getattr(decision.status, name), want), f"status.{name} = {getattr(decision.status, name)!r} lacks {want}"


def test_act_problems_go_to_status_degraded_and_one_event() -> None:
    status = decide(BASE, running(), obs(pod()), NOW).status
    problem = Problem("QuotaExceeded", 'creating driver pod wc-driver-2: pods "wc-driver-2" is forbidden: exceeded quota: q')
    after, events = record_problems(status, [problem], NOW, 2)
    assert after.reconcile_error is not None and after.reconcile_error.reason == "QuotaExceeded"
    degraded = next(c for c in after.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "QuotaExceeded") and "exceeded quota" in degraded.message
    assert [e.reason for e in events] == ["QuotaExceeded"]
    again, events = record_problems(after, [problem], NOW + timedelta(seconds=2), 2)
    assert again.reconcile_error is not None and again.reconcile_error.count == 2 and events == ()


def test_a_blocked_upgrade_keeps_its_degraded_reason_and_a_current_s3_error_rides_along() -> None:
    """Seen on a fresh clone: S3 down during an upgrade, the savepoint failed, and for one pass Degraded said
    S3Error instead of the upgrade that was not done (the lasting state a user must act on)."""
    from streamjob_operator.api.status import BlockedChange

    block = BlockedChange(spec_hash=hash_text(spec_json(BASE)), reason="SavepointFailed", message="The upgrade was not done; the running job was kept.")
    error = ReconcileError(reason="S3Error", message="reading the savepoint manifest: Could not connect", time=at(-1))
    decision = decide(BASE, running(blocked_change=block, reconcile_error=error), obs(pod()), NOW)
    degraded = next(c for c in decision.status.conditions if c.type == "Degraded")
    assert degraded.reason == "SavepointFailed" and "kept" in degraded.message and "S3Error" in degraded.message
    after, _ = record_problems(running(blocked_change=block), [Problem("S3Error", "Could not connect")], NOW, 2)
    degraded = next(c for c in after.conditions if c.type == "Degraded")
    assert degraded.reason == "SavepointFailed" and "kept" in degraded.message and "Could not connect" in degraded.message


def test_reconcile_error_keeps_degraded_until_the_glue_clears_it() -> None:
    status = running(reconcile_error=ReconcileError(reason="QuotaExceeded", message="exceeded quota", time=at(-5)))
    decision = decide(BASE, status, obs(pod()), NOW)
    degraded = next(c for c in decision.status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "QuotaExceeded")
    cleared = decide(BASE, decision.status.model_copy(update={"reconcile_error": None}), obs(pod()), NOW)
    degraded = next(c for c in cleared.status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("False", "AsExpected")


def test_failure_history_is_bounded_by_what_failure_rate_can_ask_for() -> None:
    from streamjob_operator.api.spec import RestartPolicy
    from streamjob_operator.api.status import MAX_FAILURE_TIMES

    top = RestartPolicy.model_fields["max_failures"].metadata
    assert any(getattr(m, "le", None) == MAX_FAILURE_TIMES - 1 for m in top), top


def test_spec_json_of_target_is_what_is_recorded() -> None:
    decision = decide(NEW_IMAGE, running(), obs(pod()), NOW)
    op = decision.status.operation
    assert op is not None and op.target_spec == NEW_JSON and json.loads(op.target_spec)["image"].endswith(":0.2.0")
    assert spec_json(BASE) == OLD_JSON and CK in OLD_JSON and READY.ready


def test_a_rolled_back_change_reverted_by_the_user_stops_blocking_and_degrading() -> None:
    """After a rollback the user puts the spec back as it was: nothing is left to roll out, and the job is no
    longer Degraded by a change that is not the spec any more (kstatus and Argo CD then say healthy)."""
    from streamjob_operator.api.status import BlockedChange

    block = BlockedChange(spec_hash="hash-of-the-rolled-back-spec", reason="RolledBack", message="rolled back")
    decision = decide(BASE, running(blocked_change=block), obs(pod()), NOW)
    assert decision.status.blocked_change is None and decision.status.operation is None
    assert [e.reason for e in decision.events] == ["BlockedChangeCleared"]
    assert not [a for a in decision.actions if type(a).__name__ in ("CreateDriver", "TriggerSavepoint", "DeleteDriver")]
    conds = {c.type: (c.status, c.reason) for c in decision.status.conditions}
    assert conds["Degraded"][0] == "False" and conds["Stalled"][0] == "False", conds
