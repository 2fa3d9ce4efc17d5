"""The fence's pure parts and its epoch files on local disk: the newest driver wins
(job_runtime.checkpoints.epoch), a Kafka marker ahead of a batch is never published over
(job_runtime.kafka.sink.publish_decision), and the batch a resumed checkpoint must hold
(streamjob_operator.reconcile.decide.rollout.expected_batch, passed as --expect-committed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from job_runtime.checkpoints import epoch
from job_runtime.kafka.sink import KafkaSinkError, Marker, publish_decision
from streamjob_operator.api.spec import parse_spec
from streamjob_operator.k8s import resources
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile.decide import spec_json
from streamjob_operator.reconcile.decide.rollout import expected_batch
from streamjob_operator.reconcile.model import CreateDriver


def test_each_start_takes_the_next_epoch_and_the_older_driver_is_fenced(tmp_path: Path) -> None:
    location = (tmp_path / "ckpt").as_uri()
    first = epoch.take(location)
    assert first.epoch == 1 and not first.fenced()
    first.check("batch 0, before its output")  # nothing newer: no error
    second = epoch.take(location)
    assert second.epoch == 2 and first.fenced() and not second.fenced()
    with pytest.raises(epoch.FencedError) as fenced:
        first.check("batch 7, before its output")
    assert str(fenced.value) == (
        f"checkpoint {location}: fenced at batch 7, before its output: a newer driver took it (epoch 1 replaced or gone, "
        "see _streamjob_epochs/); this driver stopped without writing further output or commits"
    )


def test_an_executor_checks_the_drivers_epoch_from_a_portable_copy_without_credentials(tmp_path: Path) -> None:
    import pickle

    from streamjob_contract.s3 import S3Config

    first = epoch.take(tmp_path.as_uri())
    portable = pickle.loads(pickle.dumps(first.portable()))  # as a task's closure carries it
    portable.fence().check("a task's commit")  # still the newest driver: passes
    epoch.take(tmp_path.as_uri())
    with pytest.raises(epoch.FencedError, match="a task's commit"):
        portable.fence().check("a task's commit")
    secret = epoch.Fence("s3://b/ck", 3, first.store, S3Config(endpoint_url="http://s3:9000", access_key_id="AKIA", secret_access_key="s3cr3t"))
    shipped = secret.portable()
    assert shipped.s3 is not None and shipped.s3.endpoint_url == "http://s3:9000"
    assert b"s3cr3t" not in pickle.dumps(shipped) and b"AKIA" not in pickle.dumps(shipped)


def test_drivers_starting_at_the_same_instant_take_distinct_epochs(tmp_path: Path) -> None:
    location = (tmp_path / "ckpt").as_uri()
    taken: list[int] = []
    barrier = threading.Barrier(6)

    def start() -> None:
        barrier.wait()
        taken.append(epoch.take(location).epoch)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == [1, 2, 3, 4, 5, 6]


def test_old_epoch_files_are_pruned_and_a_throttled_check_runs_once_per_interval(tmp_path: Path) -> None:
    location = (tmp_path / "ckpt").as_uri()
    fences = [epoch.take(location) for _ in range(epoch.KEEP + 5)]
    left = sorted(int(p.name) for p in (tmp_path / "ckpt" / epoch.EPOCH_DIR).iterdir())
    assert left == list(range(5, epoch.KEEP + 6))
    # a driver that slept through KEEP restarts: its successor's file is pruned, its own too; still fenced
    assert fences[0].fenced() and fences[3].fenced() and not fences[-1].fenced()
    throttle = epoch.Throttle(3600)
    assert epoch.replaced(fences[0], throttle, running=True)  # the first check is due
    assert not epoch.replaced(fences[0], throttle, running=True)  # throttled
    assert epoch.replaced(fences[0], throttle, running=False)  # the query ended: checked at once


DIGEST = "d" * 32


@pytest.mark.parametrize(
    ("last", "batch", "replay_until", "decision"),
    [
        pytest.param(None, 0, None, "publish", id="no-marker-publishes"),
        pytest.param(Marker(4, "x"), 5, None, "publish", id="marker-behind-publishes"),
        pytest.param(Marker(5, DIGEST), 5, None, "skip", id="same-batch-same-input-skips"),
        pytest.param(Marker(6, "x"), 5, 6, "replay", id="explicit-restore-replays-up-to-the-recorded-marker"),
        pytest.param(Marker(5, "other"), 5, 5, "replay", id="explicit-restore-replays-the-same-id-with-other-input"),
    ],
)
def test_publish_decision(last: Marker | None, batch: int, replay_until: int | None, decision: str) -> None:
    assert publish_decision(last, batch, DIGEST, replay_until) == decision


@pytest.mark.parametrize(
    ("last", "replay_until", "message"),
    [
        pytest.param(Marker(6, "x"), None, "batch 5 not published: the job already published batch 6 (the marker", id="ahead"),
        pytest.param(Marker(5, "x"), None, "batch 5 not published: the job already published batch 5 with other input",
                     id="same-id-other-input"),
        pytest.param(Marker(9, "x"), 4, "batch 5 not published: the job already published batch 9", id="past-the-replay"),
    ],
)
def test_a_marker_ahead_is_an_error_naming_both_batches(last: Marker, replay_until: int | None, message: str) -> None:
    with pytest.raises(KafkaSinkError) as refused:
        publish_decision(last, 5, DIGEST, replay_until)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("last", "accepted", "expected"),
    [
        pytest.param(None, None, None, id="nothing-committed-expects-nothing"),
        pytest.param(812, None, 812, id="expects-the-last-committed-batch"),
        pytest.param(812, 812, None, id="accepted-behind-exactly-that-batch"),
        pytest.param(812, 700, 812, id="an-acceptance-of-another-batch-is-stale"),
    ],
)
def test_expected_batch(last: int | None, accepted: int | None, expected: int | None) -> None:
    assert expected_batch(last, accepted) == expected


def test_the_driver_pod_carries_the_expected_batch() -> None:
    spec = parse_spec({"image": "img:1", "job": {"entrypoint": "jobs.wc:build"}, "checkpoint": {"location": "s3a://b/ck"}})
    text = spec_json(spec)
    for expect, args in ((812, ["--expect-committed", "812"]), (None, [])):
        action = CreateDriver("wc-driver-3", 3, text, "s3a://b/ck/run-1", None, "h", expect_committed=expect)
        runtime = resources.driver_pod(Owner("wc", "ns", "uid-1"), spec, action, RuntimeLayout())["spec"]["containers"][0]["args"]
        found = runtime[runtime.index("--expect-committed"):runtime.index("--expect-committed") + 2] if expect else []
        assert found == args and ("--expect-committed" in runtime) == (expect is not None)
