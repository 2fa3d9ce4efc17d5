"""/status's latestCompletedBatch against Spark's reported batch: never older than a batch Spark
reported as run (the operator reads Ready and lastCheckpoint from one answer), and the checkpoint
listed at most once per progress report (not on every call).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamjob_contract import checkpoint
from job_runtime.run.runner import Runner


def commit(tmp_path: Path, batch: int) -> None:
    (tmp_path / "c" / "commits").mkdir(parents=True, exist_ok=True)
    (tmp_path / "c" / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_a_reported_batch_is_never_ahead_of_latest_completed(runner: Runner, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    listings: list[int | None] = []
    real = checkpoint.latest_completed_batch

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        listings.append(result := real(*args, **kwargs))
        return result

    monkeypatch.setattr(checkpoint, "latest_completed_batch", counted)
    assert runner._latest_completed_batch() is None  # nothing committed: listed, then cached
    commit(tmp_path, 0)
    assert runner._latest_completed_batch() is None  # within the cache's seconds, no batch reported: cached
    assert runner._latest_completed_batch(report="t1") == 0  # Spark reported batch 0: listed at once
    assert runner._latest_completed_batch(report="t2") == 0  # an idle report names batch 1: listed...
    assert runner._latest_completed_batch(report="t2") == 0  # ...once for that report
    assert listings == [None, 0, 0]
    commit(tmp_path, 1)
    assert runner._latest_completed_batch(report="t3") == 1  # batch 1 ran: its own report, listed
    assert runner._latest_completed_batch(report="t3") == 1
    assert listings == [None, 0, 0, 1]


def test_status_answers_every_field_of_the_contract_type(runner: Runner) -> None:
    from streamjob_contract.runtime_status import RuntimeStatus

    body = runner.status()
    assert set(body) == {info.alias for info in RuntimeStatus.model_fields.values()}
    assert (body["state"], body["job"], body["statePartitions"]) == ("STARTING", "ns/j", 2)
