"""Truth table for job_runtime.kafka.marker_copy.fallback: the marker when the group's offsets expired."""

from __future__ import annotations

import pytest

from job_runtime.kafka.marker_copy import MarkerCopy, MarkerUnknownError, Offset, fallback
from job_runtime.kafka.sink import Marker

GROUP = "streamjob-sink.ns.job"
M4, M5 = Offset.of(Marker(4, "d4")), Offset.of(Marker(5, "d5"))


@pytest.mark.parametrize(
    ("copy", "pending_committed_in_spark", "expected"),
    [
        pytest.param(None, False, None, id="no-copy-nothing-published"),
        pytest.param(MarkerCopy(GROUP, M5), False, M5, id="settled-copy-is-the-marker"),
        pytest.param(MarkerCopy("streamjob-sink.ns.other", M5), False, None, id="another-jobs-copy-is-not-ours"),
        pytest.param(MarkerCopy(GROUP, M4, M5), True, M5, id="pending-batch-spark-committed-was-published"),
        pytest.param(MarkerCopy(GROUP, None, M4), True, M4, id="first-batch-pending-then-committed"),
    ],
)
def test_fallback(copy: MarkerCopy | None, pending_committed_in_spark: bool, expected: Offset | None) -> None:
    assert fallback(copy, GROUP, pending_committed_in_spark) == expected


def test_a_pending_batch_nobody_can_settle_is_an_error_naming_it() -> None:
    with pytest.raises(MarkerUnknownError, match="cannot tell whether batch 5 was published.*last batch known published is 4"):
        fallback(MarkerCopy(GROUP, M4, M5), GROUP, False)


def test_the_copy_keeps_the_groups_metadata_as_the_sink_parses_it() -> None:
    copy = MarkerCopy(GROUP, M4, M5)
    assert MarkerCopy.parse(copy.to_bytes()) == copy
    assert M5 is not None and Marker.parse(M5.offset, M5.metadata) == Marker(5, "d5")
