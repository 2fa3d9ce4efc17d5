"""Never start fresh by accident (issue 24, section 3), through the operator on the test bed.

A job commits batches; its checkpoint is wiped while its driver is frozen (so the
driver writes nothing after the wipe, as a lifecycle rule or a manual delete would
leave it), then the driver is killed. The operator restarts it from the checkpoint and
passes the last batch it saw committed (--expect-committed): the new driver finds no
committed batch and exits CHECKPOINT_BEHIND (15) before it writes a batch. The job is
Failed, not restarted fresh and not crash-looping; status, the Degraded condition and an
event name both batches, as docs/operations.md ("Checkpoint behind") says. The documented
way out (spec.checkpoint.acceptBehindBatch set to the named batch, with restartNonce)
resumes the job from the empty checkpoint, and it commits again.

Before c896a495 (the operator passed no batch, the runtime checked none) the restart
claimed the empty location and started from batch 0. Run on its parent (0228dc0, this
file and streamjob_e2e.py copied in), the test failed waiting for Failed: "timed out
after 180s ... Failed", the job Running on behind-driver-2, "resuming checkpoint ... after
batch 4" into the wiped location.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.lifecycle import LifecycleState

from streamjob_e2e import (
    DriverCounter,
    Jobs,
    Operator,
    assert_exactly_once,
    kill_driver_process,
    output_values,
    rate_job,
    signal_driver_process,
)


RESTART_DELAY_SECONDS = 1
REFUSAL_TIMEOUT = 180.0  # the refusal comes before the driver starts a JVM: seconds, even on a loaded machine


def keys_under(s3: Any, prefix: str) -> list[str]:
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="streamjob", Prefix=prefix)
            for o in page.get("Contents", [])]


def test_a_wiped_checkpoint_is_refused_with_both_batches_named_and_accept_behind_batch_resumes_it(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any, namespace: str,
) -> None:
    prefix = f"e2e/{namespace}/behind"
    jobs.apply(rate_job("behind", testbed, prefix=prefix,
                        restartPolicy={"type": "FixedDelay", "delaySeconds": RESTART_DELAY_SECONDS, "maxRestarts": 5}))
    jobs.wait_ready("behind", driverPod="behind-driver-1")
    jobs.wait("behind", "committed batches", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 3)

    # frozen, the driver commits nothing more: what the operator last saw committed stays the job's last batch
    signal_driver_process(testbed, namespace, "behind-driver-1", signal.SIGSTOP)
    location = jobs.status("behind")["checkpointLocation"]
    ckpt = location.split("://streamjob/", 1)[1]
    wiped = keys_under(s3, f"{ckpt}/")
    assert any("/commits/" in k for k in wiped), wiped
    for start in range(0, len(wiped), 1000):
        s3.delete_objects(Bucket="streamjob", Delete={"Objects": [{"Key": k} for k in wiped[start:start + 1000]]})
    written = output_values(s3, prefix)
    kill_driver_process(testbed, namespace, "behind-driver-1")

    failed = jobs.wait("behind", "Failed", lambda st: st.get("state") == LifecycleState.failed, timeout=REFUSAL_TIMEOUT)
    committed = failed["lastCheckpoint"]["batchId"]  # kept: the empty checkpoint does not lower it
    assert committed >= 3 and failed["driverPod"] == "behind-driver-2" and failed["totalRestarts"] == 1, failed
    pod = jobs.core.read_namespaced_pod("behind-driver-2", namespace)
    exit_code = pod.status.container_statuses[0].state.terminated.exit_code
    assert exit_code == ExitCode.CHECKPOINT_BEHIND, exit_code

    # the docs' words: reason CheckpointBehind, both batches in the condition, the event and status.lastError
    both = f"checkpoint {location} holds no committed batch, behind batch {committed} the job committed"
    degraded = jobs.condition("behind", "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CheckpointBehind") and both in degraded["message"], degraded
    assert both in failed["lastError"], failed["lastError"]
    refused = jobs.wait_event("behind", "CheckpointBehind")
    assert both in refused[0] and "exit 15" in refused[0] and "acceptBehindBatch" in refused[0], refused

    # not started fresh: no batch planned or committed in the empty location, the output as it was
    assert not [k for k in keys_under(s3, f"{ckpt}/") if "/commits/" in k or "/offsets/" in k]
    assert sorted(output_values(s3, prefix)) == sorted(written)
    assert_exactly_once(written)
    # and not retried: a permanent exit. A crash loop would have made behind-driver-3 one restart delay after the
    # refusal (1 s); ten times that without a change, with the events and conditions read in between
    deadline = time.monotonic() + 10 * RESTART_DELAY_SECONDS
    while time.monotonic() < deadline:
        st = jobs.status("behind")
        assert (st.get("state"), st.get("driverPod"), st.get("totalRestarts")) == (LifecycleState.failed, "behind-driver-2", 1), st
        time.sleep(0.5)
    assert [p.metadata.name for p in jobs.driver_pods("behind")] == ["behind-driver-2"]

    # the way out, as documented: accept the named batch and restart, in one apply
    jobs.patch("behind", {"checkpoint": {"acceptBehindBatch": committed}, "restartNonce": 1})
    resumed = jobs.wait_ready("behind", driverPod="behind-driver-3")
    assert resumed["checkpointLocation"] == location
    created = wait_for(lambda: [m for r, m in jobs.events("behind") if r == "DriverCreated" and "behind-driver-3" in m], 30,
                       "the DriverCreated event of behind-driver-3")
    assert f"acceptBehindBatch={committed}: accepted behind it" in created[0], created
    wait_for(lambda: keys_under(s3, f"{ckpt}/commits/"), 180, f"{location} to hold a committed batch again")
