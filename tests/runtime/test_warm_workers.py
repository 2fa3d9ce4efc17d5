"""The executors' Kafka sink starts its tasks' Python workers before batch 0 (job_runtime.kafka.warm):
the workers the warm-up job started are the ones the next job's tasks run on.

Runs tests/runtime/warm_job.py in a child process (its own JVM and pyspark daemon).
"""

import json
import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).with_name("warm_job.py")


def test_the_next_job_runs_on_the_workers_the_warm_up_started() -> None:
    done = subprocess.run([sys.executable, str(JOB)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found["warmed"]) == 2  # one task per task slot of local[2]
    assert len(found["after"]) == 2
    assert set(found["after"]) <= set(found["warmed"]), found  # no new worker: the warmed ones were reused
    assert found["daemon"] not in found["warmed"]  # the workers are pyspark's, not this process
