"""Savepoint requests named by the operator (POST /savepoints with "id"): the name is kept, and asking again
with a known name answers that request and starts nothing new, so a retried POST never takes two savepoints."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from http import HTTPStatus
from pathlib import Path

import pytest

from job_runtime.run.control import SAVEPOINT_ID, ControlError
from job_runtime.run.savepoint_requests import SavepointOps
from job_runtime.settings import RuntimeSettings
from streamjob_contract.runtime_status import RunState


def running_ops() -> SavepointOps:
    ops = object.__new__(SavepointOps)
    ops.settings = RuntimeSettings(job_file=Path("job.json"), name="wc", namespace="ns",
                                   checkpoint_location="s3a://b/checkpoints/wc", state_partitions=2,
                                   savepoint_location="s3://b/savepoints/wc")
    ops._lock = threading.RLock()
    ops._commands = queue.Queue()
    ops._state = RunState.RUNNING
    ops._stop_reason = None
    ops._savepoints = OrderedDict()
    ops._active_savepoint = None
    return ops


def test_a_named_request_keeps_its_name_and_a_second_ask_starts_nothing() -> None:
    ops = running_ops()
    first = ops.request_savepoint("s3://b/savepoints/wc/sp-1", True, "sp-0123456789ab")
    assert first == {"id": "sp-0123456789ab", "path": "s3://b/savepoints/wc/sp-1"}
    again = ops.request_savepoint("s3://b/savepoints/wc/sp-1", True, "sp-0123456789ab")
    assert again == first
    assert ops._commands.qsize() == 1  # one savepoint queued, not two
    assert [r["id"] for r in ops.savepoints()] == ["sp-0123456789ab"]


def test_another_request_while_one_is_in_progress_is_refused() -> None:
    ops = running_ops()
    ops.request_savepoint(None, False, "sp-a")
    with pytest.raises(ControlError) as refused:
        ops.request_savepoint(None, False, "sp-b")
    assert refused.value.status == HTTPStatus.CONFLICT


def test_an_unnamed_request_gets_a_name_from_the_runtime() -> None:
    ops = running_ops()
    answer = ops.request_savepoint(None, False)
    assert SAVEPOINT_ID.fullmatch(answer["id"]) and answer["path"].startswith("s3://b/savepoints/wc/")


@pytest.mark.parametrize("name", ["", "UPPER", "a b", "x" * 64, "-lead"])
def test_names_the_control_endpoint_refuses(name: str) -> None:
    assert SAVEPOINT_ID.fullmatch(name) is None
