"""The timer's idle gate (handlers.settled, handlers._gate, passes.Passes.due): which jobs the 2 s timer leaves alone.

A settled job with no driver (suspended, failed, finished; nothing pending) gets a timer
pass only every --idle-poll-seconds, so it costs no API request in between; every other
job, and any job with a driver pod, an operation, an error or a requeue hint, keeps the
2 s timer. The decisions come from the real ``decide``, two passes deep, as the glue runs it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_contract.runtime_status import RunState, RuntimeStatus
from streamjob_operator import handlers, passes
from streamjob_operator.api.spec import StreamJobSpec, parse_spec
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.model import DriverPod, JobProgress, Observations, PodPhase, Problem
from streamjob_operator.reconcile.policy import JOB_POLL_SECONDS as POLL

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def spec(**over: Any) -> StreamJobSpec:
    return parse_spec({
        "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
        "job": {"entrypoint": "jobs.wordcount:build"},
        "checkpoint": {"location": "s3a://streamjob/checkpoints/wc"},
        "s3": {"endpoint": "http://127.0.0.1:9000", "pathStyleAccess": True, "credentialsSecret": {"name": "s3"}},
        "restartPolicy": {"type": "Never"},
        **over,
    })


def observed(*drivers: DriverPod, job: JobProgress | None = None, problems: tuple[Problem, ...] = ()) -> Observations:
    return Observations(name="wc", namespace="ns", uid="1234abcd-0000", generation=1, drivers=drivers, job=job, problems=problems)


def settle(s: StreamJobSpec, *drivers: DriverPod, passes: int = 2, **kw: Any) -> tuple[bool, LifecycleState | None]:
    """Runs decide ``passes`` times on its own status (as the glue chains passes); the gate's verdict on the last."""
    status = StreamJobStatus()
    for _ in range(passes):
        decision = decide(s, status, observed(*drivers, **kw), NOW)
        status = decision.status
    return handlers.settled(decision, observed(*drivers, **kw)), status.state


FAILED_POD = DriverPod(name="wc-driver-1", phase=PodPhase.failed, exit_code=1, exit_kind=ExitCode.FAILED, message="boom")
RUNNING_POD = DriverPod(name="wc-driver-1", phase=PodPhase.running, ip="127.0.0.2")


@pytest.mark.parametrize(("job", "drivers", "kw", "expected"), [
    pytest.param(spec(state="suspended"), (), {}, True, id="created-suspended-idles"),
    pytest.param(spec(), (), {}, False, id="a-job-to-deploy-keeps-the-timer"),
    pytest.param(spec(), (RUNNING_POD,), {"job": JobProgress(RuntimeStatus(state=RunState.RUNNING, last_batch_id=3, latest_completed_batch=3))}, False,
                 id="a-driver-keeps-the-timer"),
    pytest.param(spec(state="suspended"), (), {"problems": (Problem("S3Unreachable", "timed out"),)}, False,
                 id="an-observe-problem-keeps-the-timer"),
])
def test_settled(job: StreamJobSpec, drivers: tuple[DriverPod, ...], kw: dict[str, Any], expected: bool) -> None:
    verdict, state = settle(job, *drivers, **kw)
    assert verdict is expected, f"state={state}"


def test_a_failed_job_idles_with_its_ended_driver_pod_kept() -> None:
    decision = decide(spec(), StreamJobStatus(), observed(), NOW)  # deploys the driver
    status = decision.status
    for _ in range(3):  # then the driver fails for good (restartPolicy Never)
        decision = decide(spec(), status, observed(FAILED_POD), NOW)
        status = decision.status
    assert status.state == LifecycleState.failed
    assert handlers.settled(decision, observed(FAILED_POD))  # an ended pod changes only by an event
    assert not handlers.settled(decision, observed(RUNNING_POD))
    gone = decide(spec(), status, observed(), NOW)
    assert gone.status.state == LifecycleState.failed
    assert handlers.settled(gone, observed())


def test_the_gate_holds_for_the_interval_and_any_other_pass_reopens_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(passes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(handlers, "PASSES", passes.Passes(lambda key: None, lambda: [], lambda: 1))
    monkeypatch.setattr(handlers.SETTINGS, "idle_seconds", 60.0)
    suspended = decide(spec(state="suspended"), StreamJobStatus(), observed(), NOW)
    suspended = decide(spec(state="suspended"), suspended.status, observed(), NOW)
    handlers._gate("ns", "idle", suspended, observed())
    assert not handlers.PASSES.due(("ns", "idle"))
    clock[0] += 59.0
    assert not handlers.PASSES.due(("ns", "idle"))
    clock[0] += 1.0
    assert handlers.PASSES.due(("ns", "idle"))
    handlers._gate("ns", "idle", suspended, observed())
    assert not handlers.PASSES.due(("ns", "idle"))
    resumed = decide(spec(), suspended.status, observed(), NOW)  # a spec change's pass: the job deploys
    handlers._gate("ns", "idle", resumed, observed())
    assert handlers.PASSES.due(("ns", "idle"))
    assert handlers.PASSES.due(("ns", "never-seen"))


READY = JobProgress(RuntimeStatus(state=RunState.RUNNING, last_batch_id=3, latest_completed_batch=3))
STARTING = JobProgress(RuntimeStatus(state=RunState.STARTING))


def run_until_ready(s: StreamJobSpec, job: JobProgress, at: datetime = NOW) -> Any:
    """decide's passes as the glue chains them: deploy, then the driver pod running and answering ``job``."""
    decision = decide(s, StreamJobStatus(), observed(), at)
    status = decision.status
    pod = DriverPod(name=str(status.driver_pod), phase=PodPhase.running, ip="127.0.0.2")
    for _ in range(4):
        decision = decide(s, status, observed(pod, job=job), at)
        status = decision.status
    return decision, observed(pod, job=job)


def test_a_ready_job_skips_timer_passes_until_its_next_poll() -> None:
    decision, obs = run_until_ready(spec(), READY)
    assert decision.status.state == LifecycleState.running and decision.status.ready
    assert not handlers.settled(decision, obs)  # it has a live driver: not the idle gate's
    assert handlers.steady_for(decision, obs, NOW, POLL) == pytest.approx(POLL)
    assert handlers.steady_for(decision, obs, NOW + timedelta(seconds=4), POLL) == pytest.approx(POLL - 4)
    assert handlers.steady_for(decision, obs, NOW + timedelta(seconds=POLL), POLL) == 0.0
    # 1,000 jobs at the default budget of 20 polls/s: each is polled every 50 s
    assert handlers.steady_for(decision, obs, NOW + timedelta(seconds=POLL), 50.0) == pytest.approx(40.0)


@pytest.mark.parametrize(("job", "change", "problems"), [
    pytest.param(STARTING, None, (), id="not-ready-yet"),
    pytest.param(READY, {"image": "ghcr.io/streamjob/streamjob-runtime:0.1.1"}, (), id="a-spec-change-to-roll-out"),
    pytest.param(READY, None, (Problem("S3Unreachable", "timed out"),), id="an-observe-problem"),
])
def test_the_timer_keeps_its_2s_passes_for(job: JobProgress, change: dict[str, Any] | None,
                                           problems: tuple[Problem, ...]) -> None:
    decision, obs = run_until_ready(spec(), job)
    if change is not None:  # the changed spec's pass starts the upgrade: an operation, a requeue
        decision = decide(spec(**change), decision.status, obs, NOW)
    obs = observed(*obs.drivers, job=obs.job, problems=problems)
    assert handlers.steady_for(decision, obs, NOW, POLL) == 0.0


def test_the_gate_of_a_ready_job_reopens_at_its_next_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(passes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(handlers, "PASSES", passes.Passes(lambda key: None, lambda: [], lambda: 1))
    decision, obs = run_until_ready(spec(), READY, at=datetime.now(timezone.utc))
    handlers._gate("ns", "ready", decision, obs)
    assert not handlers.PASSES.due(("ns", "ready"))
    clock[0] += POLL + handlers.POLL_JITTER * POLL  # at the latest: the next poll plus the jitter
    assert handlers.PASSES.due(("ns", "ready"))
