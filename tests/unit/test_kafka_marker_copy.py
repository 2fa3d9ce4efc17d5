"""job_runtime.kafka.marker_copy: the marker when the group's offsets expired (a truth table for ``fallback``),
and the copy's protocol on a local checkpoint directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from job_runtime.kafka.marker_copy import DurableMarker, MarkerCopy, MarkerUnknownError, Offset, fallback
from job_runtime.kafka.sink import Marker
from streamjob_contract.s3 import Store, parse_location

GROUP = "streamjob-sink.ns.job"
M4, M5 = Offset.of(Marker(4, "d4")), Offset.of(Marker(5, "d5"))


@pytest.mark.parametrize(
    ("copy", "pending_committed_in_spark", "replaying_before_pending", "expected"),
    [
        pytest.param(None, False, False, None, id="no-copy-nothing-published"),
        pytest.param(MarkerCopy(GROUP, M5), False, False, M5, id="settled-copy-is-the-marker"),
        pytest.param(MarkerCopy("streamjob-sink.ns.other", M5), False, False, None, id="another-jobs-copy-is-not-ours"),
        pytest.param(MarkerCopy(GROUP, M4, M5), True, False, M5, id="pending-batch-spark-committed-was-published"),
        pytest.param(MarkerCopy(GROUP, None, M4), True, False, M4, id="first-batch-pending-then-committed"),
        pytest.param(MarkerCopy(GROUP, M4, M5), False, True, M4, id="restore-of-a-savepoint-from-before-the-pending-batch"),
    ],
)
def test_fallback(copy: MarkerCopy | None, pending_committed_in_spark: bool, replaying_before_pending: bool,
                  expected: Offset | None) -> None:
    assert fallback(copy, GROUP, pending_committed_in_spark, replaying_before_pending) == expected


def test_a_pending_batch_nobody_can_settle_is_an_error_naming_it() -> None:
    with pytest.raises(MarkerUnknownError, match="cannot tell whether batch 5 was published.*last batch known published is 4"):
        fallback(MarkerCopy(GROUP, M4, M5), GROUP, False)


def test_the_copy_keeps_the_groups_metadata_as_the_sink_parses_it() -> None:
    copy = MarkerCopy(GROUP, M4, M5)
    assert MarkerCopy.parse(copy.to_bytes()) == copy
    assert M5 is not None and Marker.parse(M5.offset, M5.metadata) == Marker(5, "d5")


def test_the_protocol_on_a_checkpoint_directory(tmp_path: Path) -> None:
    """Around a Kafka commit on a real local store: what a reader finds when the group has no offset, at each step."""
    store = Store(parse_location(tmp_path.as_uri()), None)
    copy = DurableMarker(store, GROUP)
    assert copy.resolve(-1001, None) == (-1001, None)  # nothing published yet, no copy: as the group says

    copy.record_pending(None, Marker(0, "d0"))  # killed here: nobody can tell whether batch 0 was published
    with pytest.raises(MarkerUnknownError, match="batch 0"):
        copy.resolve(-1001, None)
    store.write_bytes("commits/0", b"v1\n{}")  # ...unless Spark committed batch 0
    assert Marker.parse(*copy.resolve(-1001, None)) == Marker(0, "d0")

    copy.record_pending(Marker(0, "d0"), Marker(1, "d1"))
    copy.record_committed(Marker(1, "d1"))
    assert Marker.parse(*copy.resolve(-1001, None)) == Marker(1, "d1")
    assert copy.resolve(2, "from the group") == (2, "from the group")  # the group, while it has an offset, is the truth

    copy.record_pending(Marker(1, "d1"), Marker(2, "d2"))
    copy.reconcile(Marker(1, "d1"))  # a start after the transaction of batch 2 was aborted (init_transactions)
    assert Marker.parse(*copy.resolve(-1001, None)) == Marker(1, "d1")
    assert DurableMarker(store, "streamjob-sink.ns.other").resolve(-1001, None) == (-1001, None)  # another job's copy

    copy.record_pending(Marker(1, "d1"), Marker(2, "d2"))  # a savepoint taken now carries this copy, not offsets/2
    with pytest.raises(MarkerUnknownError, match="batch 2"):
        copy.resolve(-1001, None)
    assert Marker.parse(*DurableMarker(store, GROUP, restoring=True).resolve(-1001, None)) == Marker(1, "d1")
