"""The driver's /status payload as a contract: the writer cannot add an undeclared field, the reader
tolerates a newer runtime (unknown fields, an unknown state) and an older one (absent fields)."""

from __future__ import annotations

import pytest

from streamjob_contract.runtime_status import RunState, RuntimeStatus, SavepointState, SavepointStatus


def test_a_writer_cannot_send_a_field_the_type_does_not_declare() -> None:
    with pytest.raises(ValueError, match="does not declare \\['newField'\\]"):
        RuntimeStatus.checked({"state": "RUNNING", "newField": 1})


def test_the_written_body_is_camel_case_with_every_field() -> None:
    body = RuntimeStatus.checked({"state": "RUNNING", "lastBatchId": 3, "savepointInProgress": {"id": "a", "state": "IN_PROGRESS"}})
    assert (body["state"], body["lastBatchId"], body["latestCompletedBatch"]) == ("RUNNING", 3, None)
    assert body["savepointInProgress"]["state"] == "IN_PROGRESS" and "batchId" in body["savepointInProgress"]


@pytest.mark.parametrize(
    ("body", "state", "ready"),
    [
        pytest.param({"state": "RUNNING", "lastBatchId": 0}, RunState.RUNNING, True, id="running-with-a-batch"),
        pytest.param({"state": "RUNNING"}, RunState.RUNNING, False, id="no-batch-yet"),
        pytest.param({"state": "RUNNING", "lastBatchId": 1, "lastError": "boom"}, RunState.RUNNING, False, id="an-error"),
        pytest.param({"state": "WARMING", "lastBatchId": 1, "futureField": True}, None, False, id="a-newer-runtime"),
        pytest.param({}, None, False, id="an-older-runtime"),
    ],
)
def test_a_reader_reads_what_it_knows(body: dict[str, object], state: RunState | None, ready: bool) -> None:
    status = RuntimeStatus.model_validate(body)
    assert (status.state, status.ready) == (state, ready)


def test_a_savepoint_request_reads_its_state() -> None:
    sp = SavepointStatus.model_validate({"id": "x", "state": "COMPLETED", "path": "s3://b/sp", "batchId": 7})
    assert (sp.state, sp.path, sp.batch_id) == (SavepointState.COMPLETED, "s3://b/sp", 7)

