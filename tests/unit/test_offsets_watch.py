"""The Kafka offsets watch (job_runtime.kafka.offsets_watch): the deadline comes from the source's own options."""

from __future__ import annotations

from typing import Any

from job_runtime.kafka import offsets_watch
from streamjob_contract.jobdef import parse_job_definition


def job(options: dict[str, str], kind: str = "kafka") -> Any:
    source: dict[str, Any] = {"name": "events", "kind": kind, "options": options}
    if kind == "rate":
        source["options"] = {}
    return parse_job_definition({"pipeline": {"sources": [source], "sink": {"kind": "console"}}})


class Query:
    def __init__(self, message: str) -> None:
        self.status = {"message": message}


def test_the_deadline_is_the_sources_timeouts_and_retries_plus_a_margin() -> None:
    base = {"subscribe": "t", "kafka.bootstrap.servers": "127.0.0.1:9"}
    assert offsets_watch.kafka_offsets_deadline(job(base)) == 60 * 4 + 3 + offsets_watch.MARGIN_SECONDS
    fast = {**base, "kafka.default.api.timeout.ms": "10000", "fetchOffset.numRetries": "1"}
    assert offsets_watch.kafka_offsets_deadline(job(fast)) == 10 * 2 + 1 + offsets_watch.MARGIN_SECONDS
    assert offsets_watch.kafka_offsets_deadline(job({}, kind="rate")) is None


def test_only_a_kafka_offsets_wait_past_the_deadline_is_a_stall(monkeypatch: Any) -> None:
    now = [100.0]
    monkeypatch.setattr(offsets_watch.time, "monotonic", lambda: now[0])
    watch = offsets_watch.OffsetsWatch(30.0)
    getting = Query("Getting offsets from KafkaV2[Subscribe[events]]")
    assert watch.stalled(getting) is None
    now[0] += 29
    assert watch.stalled(getting) is None
    assert watch.stalled(Query("Waiting for next trigger")) is None  # the wait ended: the clock restarts
    assert watch.stalled(getting) is None
    now[0] += 31
    stalled = watch.stalled(getting)
    assert stalled is not None and "kafka source stalled" in stalled and "31s" in stalled
    assert offsets_watch.OffsetsWatch(None).stalled(getting) is None
    files = offsets_watch.OffsetsWatch(1.0)
    assert files.stalled(Query("Getting offsets from FileStreamSource[s3a://b/p]")) is None
    now[0] += 100
    assert files.stalled(Query("Getting offsets from FileStreamSource[s3a://b/p]")) is None
