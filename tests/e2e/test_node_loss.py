"""A driver that stops answering, as on a lost node, is replaced after spec.restartPolicy.driverUnreachableSeconds.

On the test bed a lost node is played by freezing the driver's processes
(SIGSTOP of its process group): the pod stays Running in the API, its control
endpoint accepts connections and never answers, as across a dead node or a
partition. The operator deletes the pod with grace 0 and restarts the job from
its checkpoint, counted as a failure; the output stays exactly once. Before,
nothing happened until a kubelet reported the pod gone (on a lost node: the
300 s default toleration, the grace period and 60 s more).

The time from the freeze to the replacement's first batch is in
docs/benchmarks/node-loss.md (benchmarks/node_loss.py), not asserted here.
"""

from __future__ import annotations

import signal
from typing import Any

from testbed import TestBed

from streamjob_e2e import (
    DriverCounter,
    Jobs,
    Operator,
    assert_exactly_once,
    output_values,
    rate_job,
    signal_driver_process,
)


UNREACHABLE_SECONDS = 15


def test_a_frozen_driver_is_replaced_after_driver_unreachable_seconds_and_the_output_stays_exactly_once(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any, namespace: str,
) -> None:
    prefix = f"e2e/{namespace}/lost"
    jobs.apply(rate_job("lost", testbed, prefix=prefix,
                        restartPolicy={"type": "FixedDelay", "delaySeconds": 0, "maxRestarts": 5,
                                       "driverUnreachableSeconds": UNREACHABLE_SECONDS}))
    jobs.wait_ready("lost", driverPod="lost-driver-1")
    before = jobs.wait("lost", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 2)

    signal_driver_process(testbed, namespace, "lost-driver-1", signal.SIGSTOP)  # alive, holding its sockets, answering nothing
    replaced = jobs.wait_ready("lost", driverPod="lost-driver-2", timeout=240)
    assert replaced["totalRestarts"] == 1 and replaced["checkpointLocation"] == before["checkpointLocation"]
    unreachable = jobs.wait_event("lost", "DriverUnreachable")
    assert "lost-driver-1" in unreachable[0] and "driverUnreachableSeconds=15" in unreachable[0], unreachable
    assert "lost-driver-1" not in [p.metadata.name for p in jobs.driver_pods("lost")]

    done = jobs.wait("lost", "progress past the frozen driver's last batch",
                     lambda st: st["lastCheckpoint"]["batchId"] > before["lastCheckpoint"]["batchId"] + 2)
    assert done["driverPod"] == "lost-driver-2"
    assert_exactly_once(output_values(s3, prefix))
