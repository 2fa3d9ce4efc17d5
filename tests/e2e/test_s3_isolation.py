"""One tenant's S3 endpoint cannot stall the operator (issue 24, section 4), on the test bed.

Eight StreamJobs point spec.s3.endpoint at a loopback server that accepts TCP
connections and never answers. Their drivers cannot start (an image with no runtime:
exit 127, restartPolicy Never), so every pass of theirs reads the job's checkpoint on
that endpoint (the operator's own S3 call, reconcile.observe). The operator runs with
4 handler threads, fewer than those jobs: with botocore's defaults (60 s connect, 60 s
read, retries) each of those reads held a thread for minutes, and a healthy job's
driver kill waited for a free one. Here the healthy job's killed driver is replaced,
and the replacement commits, while every thread has those jobs to serve.

Before 42ebc254 (S3Limits) the operator made these reads with botocore's defaults. That
operator (the parent of 42ebc254 has no --workers flag, so it was played by this one with
--s3-connect-timeout-seconds 60 --s3-read-timeout-seconds 60 --s3-max-attempts 6
--s3-unresponsive-seconds 0.001 and the Clients.s3_call of before the one-probe rule)
failed this test where it should: ok-driver-2 was not recorded within 50 s of the kill.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.k8s.clients import S3Limits

from streamjob_e2e import Jobs, Operator, kill_driver_process, rate_job


WORKERS = 4
BLACKHOLED_JOBS = 2 * WORKERS
# The bound on the kill -> replacement pod recorded: below botocore's 60 s read timeout, so an operator whose
# threads all wait on the endpoint with its defaults misses it (none is free before one of those waits ends, and
# the next queued pass is another blackholed job's); above the bounded wait of the fixed operator's first calls
# to the endpoint (S3Limits().worst_case_seconds(): 28 s, after which the endpoint is skipped) plus the restart
# itself (the pod's exit seen, the 1 s delay, two passes), with room for a loaded 2-core machine.
BOTOCORE_READ_TIMEOUT = 60.0
RESTART_BOUND = 50.0
assert S3Limits().worst_case_seconds() + 10 < RESTART_BOUND < BOTOCORE_READ_TIMEOUT


class Blackhole:
    """A loopback TCP server that accepts every connection and never sends a byte (nor closes one)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    server = Blackhole()
    yield server
    server.close()


@pytest.fixture
def few_threads_operator(testbed: TestBed, crd: None, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Operator]:
    """The operator with WORKERS handler threads (the chart's default is 16): a few slow jobs are "many"."""
    op = Operator(testbed, tmp_path / "operator.log", lease=f"streamjob-e2e-{uuid.uuid4().hex[:6]}",
                  extra_args=["--workers", str(WORKERS)])
    op.start()
    yield op
    op.stop()
    if request.session.testsfailed:
        print(f"--- operator log {op.log_path} (tail) ---\n{op.log()[-6000:]}")


# slow: 3 to 8 minutes (nine jobs, two Spark starts); the CI budget. The rule it checks is unit-tested in the default
# run (tests/unit/test_operator_s3_limits.py); run it with `bash scripts/test.sh -m slow tests/e2e/test_s3_isolation.py`.
@pytest.mark.slow
def test_jobs_on_a_blackholed_s3_endpoint_do_not_delay_a_healthy_jobs_restart(
    testbed: TestBed, few_threads_operator: Operator, jobs: Jobs, s3_secret: str, blackhole: Blackhole, namespace: str,
) -> None:
    started = time.monotonic()
    jobs.apply(rate_job("ok", testbed, prefix=f"e2e/{namespace}/ok",
                        restartPolicy={"type": "FixedDelay", "delaySeconds": 1, "maxRestarts": 5}))
    jobs.wait_ready("ok", driverPod="ok-driver-1")
    before = jobs.wait("ok", "a committed batch", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)

    # then the tenants with the blackholed endpoint (before, they kept the healthy job from being seen ready at all)
    stuck = [f"stuck-{i}" for i in range(BLACKHOLED_JOBS)]
    for name in stuck:
        jobs.apply(rate_job(name, testbed, prefix=f"e2e/{namespace}/{name}", image=testbed.busybox_image(),
                            driver={"coreRequest": "10m"},  # eight of them beside the healthy job on 2 CPUs
                            s3={"endpoint": blackhole.endpoint}, restartPolicy={"type": "Never"}))

    # every blackholed job's driver has exited, so each of its passes reads its checkpoint on the endpoint, and the
    # operator is calling it on every thread it has
    def exited(name: str) -> bool:
        pods = jobs.driver_pods(name)
        return bool(pods) and all(p.status.phase == "Failed" for p in pods)

    wait_for(lambda: all(exited(name) for name in stuck), 180, "the blackholed jobs' drivers to exit")
    wait_for(lambda: len(blackhole.accepted) >= WORKERS, 120, f"{WORKERS} connections to the blackholed endpoint")

    kill_driver_process(testbed, namespace, "ok-driver-1")
    killed = time.monotonic()
    print(f"killed ok-driver-1 {killed - started:.0f}s into the test, {len(blackhole.accepted)} connections to the blackhole")
    jobs.wait("ok", "the replacement driver recorded", lambda st: st.get("driverPod") == "ok-driver-2", timeout=RESTART_BOUND)
    took = time.monotonic() - killed
    wait_for(lambda: jobs.driver_pods("ok") and [p.metadata.name for p in jobs.driver_pods("ok")] == ["ok-driver-2"], 30,
             "ok-driver-2 to replace ok-driver-1")
    jobs.wait("ok", "a batch committed by the replacement",
              lambda st: st.get("driverPod") == "ok-driver-2" and st.get("ready") is True
              and st["lastCheckpoint"]["batchId"] > before["lastCheckpoint"]["batchId"] + 1)
    print(f"ok-driver-2 recorded {took:.1f}s after the kill, committing {time.monotonic() - killed:.0f}s after it")

    # the blackholed jobs are reported, not silent: each says its endpoint does not answer
    for name in stuck:
        st = jobs.wait(name, "Failed with the endpoint reported", lambda st: st.get("state") == LifecycleState.failed
                       and blackhole.endpoint in ((st.get("reconcileError") or {}).get("message") or ""), timeout=120)
        assert st["reconcileError"]["reason"], st["reconcileError"]
