"""The exactly-once Kafka sink's batch cap (job_runtime.kafka.budget): how many records a batch may
hold, how a planned batch is counted from Spark's offset log, and when a planned batch is planned
again. Truth tables over the pure functions; the runtime side is tests/runtime/test_runtime_kafka_backlog.py."""

from __future__ import annotations

import pytest

from job_runtime.kafka import budget

META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
INITIAL = '\x00v1\n{"events":{"0":0,"1":0}}'  # sources/0/0 as Spark's Kafka source writes it (a NUL byte first)


def offsets(*lines: str) -> str:
    return "\n".join(["v1", META, *lines]) + "\n"


@pytest.mark.parametrize(("timeout_ms", "noted", "executors", "cap"), [
    pytest.param(60_000, None, False, 600_000, id="default-timeout"),
    pytest.param(900_000, None, False, 9_000_000, id="max-timeout"),
    pytest.param(1_000, None, False, 10_000, id="min-timeout"),
    pytest.param(60_000, 40_000, False, 40_000, id="a-note-lowers-it"),
    pytest.param(60_000, 10_000_000, False, 600_000, id="a-note-never-raises-it"),
    pytest.param(60_000, 10, False, budget.MIN_BATCH_RECORDS, id="never-below-the-floor"),
    # executors: a task's transaction holds its partition only and a slow task sends in chunks: twice the cap
    pytest.param(60_000, None, True, 1_200_000, id="executors-default-timeout"),
    pytest.param(900_000, None, True, 18_000_000, id="executors-max-timeout"),
    pytest.param(1_000, None, True, 20_000, id="executors-min-timeout"),
    pytest.param(60_000, 40_000, True, 40_000, id="executors-a-note-left-by-the-driver-mode-still-lowers-it"),
    pytest.param(60_000, 10_000_000, True, 1_200_000, id="executors-a-note-never-raises-it"),
])
def test_the_cap_follows_the_transaction_timeout(timeout_ms: int, noted: int | None, executors: bool, cap: int) -> None:
    assert budget.batch_cap(timeout_ms, noted, executors=executors) == cap


def test_the_sink_picks_the_cap_of_its_producers() -> None:
    """The writer's cap (job_runtime.kafka.sink.batch_cap) follows sink.kafka.producers; no store, no note."""
    from job_runtime.kafka.sink import batch_cap
    from streamjob_contract.jobdef import KafkaSink

    base = {"bootstrapServers": "kafka:9092", "topic": "out"}
    assert batch_cap(KafkaSink.model_validate(base), None) == 600_000
    assert batch_cap(KafkaSink.model_validate({**base, "producers": "executors"}), None) == 1_200_000
    assert batch_cap(KafkaSink.model_validate({**base, "producers": "executors", "transactionTimeoutMs": 10_000}), None) == 200_000


@pytest.mark.parametrize(("options", "expected", "own"), [
    pytest.param({}, "300000", "unset", id="unset-gets-the-cap"),
    pytest.param({"maxOffsetsPerTrigger": "1000"}, "1000", None, id="smaller-kept"),
    pytest.param({"maxOffsetsPerTrigger": "5000000"}, "300000", "5000000", id="larger-lowered"),
    pytest.param({"maxOffsetsPerTrigger": "lots"}, "300000", "lots", id="unreadable-replaced"),
    pytest.param({"maxoffsetspertrigger": "5000000"}, "300000", "5000000", id="any-spelling-lowered-and-replaced"),
])
def test_a_kafka_source_plans_at_most_the_cap(options: dict[str, str], expected: str, own: str | None) -> None:
    capped, lowered = budget.capped_options({"subscribe": "events", **options}, 300_000)
    assert capped == {"subscribe": "events", "maxOffsetsPerTrigger": expected}
    assert lowered == own


@pytest.mark.parametrize(("options", "expected", "lowered"), [
    pytest.param({}, {"maxOffsetsPerTrigger": "600000", "maxRecordsPerPartition": "75000"},
                 {"maxOffsetsPerTrigger": "unset", "maxRecordsPerPartition": "unset"}, id="both-set"),
    pytest.param({"maxRecordsPerPartition": "20000"}, {"maxOffsetsPerTrigger": "600000", "maxRecordsPerPartition": "20000"},
                 {"maxOffsetsPerTrigger": "unset"}, id="a-smaller-split-kept"),
    pytest.param({"maxrecordsperpartition": "20000"}, {"maxOffsetsPerTrigger": "600000", "maxrecordsperpartition": "20000"},
                 {"maxOffsetsPerTrigger": "unset"}, id="a-smaller-split-in-any-spelling-kept"),
    pytest.param({"maxOffsetsPerTrigger": "1000", "maxRecordsPerPartition": "10000000"},
                 {"maxOffsetsPerTrigger": "1000", "maxRecordsPerPartition": "75000"},
                 {"maxRecordsPerPartition": "10000000"}, id="a-larger-split-lowered"),
])
def test_with_the_driver_producing_a_spark_partition_is_bounded_too(
        options: dict[str, str], expected: dict[str, str], lowered: dict[str, str]) -> None:
    limit = budget.source_limit(600_000, 1, executors=False)
    assert budget.limited_options({"subscribe": "events", **options}, limit) == ({"subscribe": "events", **expected}, lowered)
    tasks = budget.source_limit(600_000, 1, executors=True)  # each task sends its own partition: nothing to split
    assert budget.limited_options({"subscribe": "events"}, tasks) == (
        {"subscribe": "events", "maxOffsetsPerTrigger": "600000"}, {"maxOffsetsPerTrigger": "unset"})


def chain(*names: str, leaves: tuple[budget.PlanNode, ...] = (budget.PlanNode("StreamingRelationV2"),)) -> budget.PlanNode:
    """A plan whose nodes are `names` from the root down, over `leaves`."""
    node: tuple[budget.PlanNode, ...] = leaves
    for name in reversed(names):
        node = (budget.PlanNode(name, node),)
    return node[0]


@pytest.mark.parametrize(("plan", "serves"), [
    # the analyzed plans Spark 4.3 gives the examples: pass-through, parse, windows
    pytest.param(chain("Project"), True, id="pass-through"),
    pytest.param(chain("Project", "SubqueryAlias", "View", "Project", "EventTimeWatermark"), True, id="parse-only"),
    pytest.param(chain("Aggregate", "Project", "Filter", "SubqueryAlias", "View", "EventTimeWatermark"), False,
                 id="windows"),
    pytest.param(chain("Distinct", "Project"), False, id="distinct"),
    pytest.param(chain("Project", "Deduplicate", "Project"), False, id="deduplicate"),
    pytest.param(chain("SerializeFromObject", "TransformWithState", "Project"), False, id="transform-with-state"),
    # a union: one branch aggregated, the other passes the source's partitions to the sink
    pytest.param(budget.PlanNode("Union", (chain("Aggregate", "Project"), chain("Project"))), True,
                 id="union-with-an-unshuffled-branch"),
    pytest.param(budget.PlanNode("Union", (chain("Aggregate"), chain("Project", "Deduplicate"))), False,
                 id="union-of-shuffled-branches"),
    # a stream-static join may broadcast the static side and keep the stream's partitions
    pytest.param(chain("Project", "Join", leaves=(chain("Project"), budget.PlanNode("LogicalRelation"))), True,
                 id="join-keeps-it"),
    pytest.param(chain("Repartition"), True, id="repartition-keeps-it"),
])
def test_the_partition_split_only_where_it_bounds_what_the_sink_receives(plan: budget.PlanNode, serves: bool) -> None:
    assert budget.split_serves(plan) is serves
    limit = budget.source_limit(600_000, 1, executors=False)
    assert budget.unsplit(limit) == budget.SourceLimit(600_000, None)


def test_the_cap_is_shared_among_kafka_sources() -> None:
    assert budget.source_cap(300_000, 1) == 300_000
    assert budget.source_cap(300_000, 3) == 100_000
    assert budget.source_cap(300_000, 0) == 300_000  # no Kafka source: nothing to cap


@pytest.mark.parametrize(("current", "previous", "initial", "records"), [
    pytest.param(offsets('{"events":{"0":700,"1":300}}'), None, [INITIAL], 1_000, id="first-batch-from-initial-offsets"),
    pytest.param(offsets('{"events":{"0":700,"1":300}}'), offsets('{"events":{"0":500,"1":250}}'), [INITIAL], 250,
                 id="later-batch-from-the-previous-entry"),
    pytest.param(offsets('{"events":{"0":700,"1":300,"2":40}}'), offsets('{"events":{"0":500,"1":250}}'), [None], 290,
                 id="a-new-partition-counts-from-0"),
    pytest.param(offsets('{"logOffset":3}'), None, [None], None, id="a-files-source-is-not-counted"),
    pytest.param(offsets('{"logOffset":3}', '{"events":{"0":70}}'), None, [None, INITIAL.replace('"1":0', '"1":5')],
                 70, id="the-kafka-source-of-two"),
    pytest.param(offsets('{"events":{"0":700}}'), None, [None], None, id="no-start-known"),
    pytest.param(offsets('{"events":{"0":700}}'), offsets("-"), [INITIAL], 700, id="no-previous-offset-for-this-source"),
])
def test_a_planned_batch_is_counted_from_the_offset_log(current: str, previous: str | None, initial: list[str | None],
                                                       records: int | None) -> None:
    assert budget.planned_records(current, previous, initial) == records


@pytest.mark.parametrize(("batch_id", "planned", "published_until", "replan"), [
    pytest.param(0, 5_000_000, None, True, id="first-deploy-backlog-never-published"),
    pytest.param(7, 5_000_000, 6, True, id="marker-behind"),
    pytest.param(7, 5_000_000, 7, False, id="already-published-is-skipped-not-replanned"),
    pytest.param(7, 5_000_000, 9, False, id="marker-ahead-is-the-sinks-error"),
    pytest.param(7, 300_000, None, False, id="within-the-cap"),
    pytest.param(7, None, None, False, id="not-counted"),
])
def test_only_an_oversized_unpublished_batch_is_planned_again(batch_id: int, planned: int | None,
                                                              published_until: int | None, replan: bool) -> None:
    assert budget.replan(batch_id, planned, 300_000, published_until) is replan


@pytest.mark.parametrize(("planned", "sent", "cap", "halved"), [
    pytest.param(300_000, 120_000, 300_000, 150_000, id="half-of-the-batch"),
    pytest.param(None, 80_000, 300_000, 40_000, id="uncounted-batch-half-of-what-was-sent"),
    pytest.param(5_000_000, 0, 300_000, 150_000, id="never-above-half-the-cap"),
    pytest.param(1_500, 0, 300_000, budget.MIN_BATCH_RECORDS, id="floor"),
])
def test_a_transaction_out_of_time_halves_the_cap(planned: int | None, sent: int, cap: int, halved: int) -> None:
    assert budget.halved_cap(planned, sent, cap) == halved


def test_the_note_round_trips_and_a_bad_one_is_ignored() -> None:
    assert budget.parse_note(budget.format_note(40_000, 3)) == 40_000
    assert budget.parse_note(None) is None
    assert budget.parse_note(b"not json") is None
    assert budget.parse_note(b'{"maxRecords": -1}') is None


def test_running_out_of_time_is_most_of_the_timeout() -> None:
    assert budget.ran_out_of_time(59.0, 60_000)
    assert not budget.ran_out_of_time(20.0, 60_000)


def test_only_an_exactly_once_kafka_sink_caps_the_jobs_kafka_sources() -> None:
    from job_runtime.query.pipeline import exactly_once_source_limit
    from streamjob_contract.jobdef import Sink, Source

    kafka = {"bootstrapServers": "broker:9092", "topic": "out"}
    sources = [Source.model_validate({"name": n, "kind": "kafka", "options": {"subscribe": n}}) for n in ("a", "b")]
    rate = [Source.model_validate({"name": "r", "kind": "rate"})]
    exactly_once = Sink.model_validate({"kind": "kafka", "kafka": kafka})
    longer = Sink.model_validate({"kind": "kafka", "kafka": {**kafka, "transactionTimeoutMs": 120_000}})
    at_least_once = Sink.model_validate({"kind": "kafka", "kafka": {**kafka, "delivery": "atLeastOnce"}})
    executors = Sink.model_validate({"kind": "kafka", "kafka": {**kafka, "producers": "executors"}})
    split = budget.PARTITION_RECORDS
    assert exactly_once_source_limit(exactly_once, sources, None) == budget.SourceLimit(300_000, split)  # 600,000 shared
    assert exactly_once_source_limit(longer, sources[:1], None) == budget.SourceLimit(1_200_000, split)
    assert exactly_once_source_limit(exactly_once, rate, None) == budget.SourceLimit(600_000, split)  # open_source caps Kafka only
    assert exactly_once_source_limit(executors, sources[:1], None) == budget.SourceLimit(1_200_000, None)  # tasks produce: no split
    assert exactly_once_source_limit(at_least_once, sources, None) is None
    assert exactly_once_source_limit(None, sources, None) is None


def test_a_kafka_source_polls_the_runtimes_default_unless_it_sets_its_own() -> None:
    from job_runtime.query.pipeline import KAFKA_READ_DEFAULTS, kafka_read_options

    assert KAFKA_READ_DEFAULTS == {"kafka.max.poll.records": "10000"}
    assert kafka_read_options({"subscribe": "events"}) == {"subscribe": "events", "kafka.max.poll.records": "10000"}
    assert kafka_read_options({"subscribe": "events", "kafka.max.poll.records": "500"}) == {
        "subscribe": "events", "kafka.max.poll.records": "500"}
