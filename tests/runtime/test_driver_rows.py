"""The driver mode's reader (job_runtime.kafka.driver_rows) keeps nothing of a batch on the
driver once it is sent, where `toLocalIterator` keeps every partition it returned for as long
as the driver lives (the 3 M-record backlog's OutOfMemoryError: docs/delivery.md).

Runs tests/runtime/driver_rows_job.py in a child process (its own JVM) with each reader.
"""

import json
import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).with_name("driver_rows_job.py")
BATCHES = 4


def run_job(tmp_path: Path, reader: str) -> dict:
    done = subprocess.run([sys.executable, str(JOB), str(tmp_path / reader), reader, str(BATCHES)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_driver_reads_every_row_in_partition_order_and_spark_holds_no_finished_partition(tmp_path: Path) -> None:
    ours = run_job(tmp_path, "driver_rows")
    assert ours["batches"] == BATCHES == len(ours["seen"])
    # every row once, partition after partition (ranges of the batch's values, each sorted): in order
    assert all(values == sorted(values) and len(values) == 1500 for values in ours["seen"])
    assert sorted(n for values in ours["seen"] for n in values) == list(range(BATCHES * 1500))
    assert ours["held"] == 0
    # a reader stopped early had read the batch's first record; nothing it fetched ahead got in the way
    assert ours["first"] == [values[0] for values in ours["seen"]]
    assert sorted(ours["first"]) == [b * 1500 for b in range(BATCHES)]  # a file a batch, in any order

    # what the reader works around: toLocalIterator's partitions stay on the driver, one job per partition
    # read, batch after batch (when a Spark release stops this, the workaround can go)
    theirs = run_job(tmp_path, "toLocalIterator")
    assert sorted(n for values in theirs["seen"] for n in values) == list(range(BATCHES * 1500))
    assert theirs["batches"] == BATCHES
    assert theirs["held"] == 3 * BATCHES  # one job a partition, 3 partitions a batch
