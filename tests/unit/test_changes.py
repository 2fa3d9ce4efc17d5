"""The spec-field -> change-kind table, and the restart-policy arithmetic."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from streamjob_operator.api.spec import RestartPolicy, StreamJobSpec
from streamjob_operator.reconcile.changes import CHANGE_TABLE, ChangeKind, changed_fields, classify
from streamjob_operator.reconcile.policy import parse_duration, restart_delay

NOW = datetime(2025, 3, 1, tzinfo=timezone.utc)


def test_every_spec_field_says_what_a_change_needs() -> None:
    fields = {f.alias or name for name, f in StreamJobSpec.model_fields.items()}
    top = {path for path in CHANGE_TABLE if "." not in path}
    assert fields == top, f"missing: {fields - top}, stale: {top - fields}"
    # a nested entry (the most specific wins) names a field of its parent
    for path in (p for p in CHANGE_TABLE if "." in p):
        head, _, rest = path.partition(".")
        model = StreamJobSpec.model_fields[next(n for n, f in StreamJobSpec.model_fields.items() if (f.alias or n) == head)]
        nested = model.annotation
        assert nested is not None and rest in {f.alias or n for n, f in nested.model_fields.items()}, path


def test_accepting_a_checkpoint_behind_needs_no_redeploy_the_location_does() -> None:
    old = {"checkpoint": {"location": "s3a://b/ck"}}
    assert classify(old, {"checkpoint": {"location": "s3a://b/ck", "acceptBehindBatch": 41}}) is ChangeKind.ignore
    assert classify(old, {"checkpoint": {"location": "s3a://b/ck2"}}) is ChangeKind.savepoint_redeploy


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        pytest.param({"image": "a"}, {"image": "a"}, ChangeKind.ignore, id="nothing changed needs nothing"),
        pytest.param({"image": "a"}, {"image": "b"}, ChangeKind.savepoint_redeploy, id="an image change needs a savepoint redeploy"),
        pytest.param({"sparkConf": {}}, {"sparkConf": {"x": "1"}}, ChangeKind.savepoint_redeploy, id="a new conf key needs a redeploy"),
        pytest.param({"executor": {"instances": 1}}, {"executor": {"instances": 2}}, ChangeKind.savepoint_redeploy,
                     id="rescaling executors needs a redeploy"),
        pytest.param({"statePartitions": 8, "image": "a"}, {"statePartitions": 16, "image": "b"}, ChangeKind.state_repartition,
                     id="state partitions win over other changes"),
        pytest.param({"restartNonce": 0}, {"restartNonce": 1}, ChangeKind.restart_only, id="a restartNonce needs a restart only"),
        pytest.param({"restartPolicy": {"type": "Never"}}, {"restartPolicy": {"type": "FixedDelay"}}, ChangeKind.ignore,
                     id="the restart policy is read live"),
        pytest.param({"savepoint": {"location": "s3://a"}}, {"savepoint": {"location": "s3://b"}}, ChangeKind.ignore,
                     id="the savepoint settings are read live"),
        pytest.param({"state": "running"}, {"state": "suspended"}, ChangeKind.ignore, id="suspend is a lifecycle transition, not a diff"),
        pytest.param({}, {"somethingNew": 1}, ChangeKind.savepoint_redeploy, id="an unknown field is treated as needing a redeploy"),
    ],
)
def test_classify(old: dict, new: dict, kind: ChangeKind) -> None:
    assert classify(old, new) is kind


def test_changed_fields_name_the_leaf_paths() -> None:
    assert changed_fields({"executor": {"instances": 1, "cores": 1}}, {"executor": {"instances": 2, "cores": 1}}) == {
        "executor.instances": ChangeKind.savepoint_redeploy
    }


def policy(**kw: object) -> RestartPolicy:
    return RestartPolicy.model_validate(kw)


@pytest.mark.parametrize(
    ("p", "count", "failures", "delay"),
    [
        pytest.param(policy(type="Never"), 0, [NOW], None, id="Never never restarts"),
        pytest.param(policy(type="FixedDelay", delaySeconds=5, maxRestarts=2), 1, [NOW], 5.0, id="FixedDelay waits its delay"),
        pytest.param(policy(type="FixedDelay", delaySeconds=5, maxRestarts=2), 2, [NOW], None, id="FixedDelay stops at maxRestarts"),
        pytest.param(policy(delaySeconds=2, backoffMultiplier=3, maxDelaySeconds=100), 0, [NOW], 2.0, id="backoff starts at delaySeconds"),
        pytest.param(policy(delaySeconds=2, backoffMultiplier=3, maxDelaySeconds=100), 2, [NOW], 18.0, id="backoff multiplies"),
        pytest.param(policy(delaySeconds=2, backoffMultiplier=3, maxDelaySeconds=100), 6, [NOW], 100.0, id="backoff is capped"),
        pytest.param(policy(type="FailureRate", maxFailures=1, failureRateIntervalSeconds=10), 0,
                     [NOW - timedelta(seconds=5), NOW], None, id="FailureRate exhausted within the window"),
        pytest.param(policy(type="FailureRate", maxFailures=1, failureRateIntervalSeconds=10, delaySeconds=3), 0,
                     [NOW - timedelta(seconds=50), NOW], 3.0, id="FailureRate forgets failures outside the window"),
    ],
)
def test_restart_delay(p: RestartPolicy, count: int, failures: list[datetime], delay: float | None) -> None:
    assert restart_delay(p, count, failures, NOW) == delay


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("7d", 604800)])
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds


def test_parse_duration_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("1x")
