"""The Kafka runtime tests' job, input and reference: examples/jobs/kafka_windows.yaml over
examples/jobs/kafka_events.py's events, read back as a read_committed consumer."""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import runtime_reference as reference
import yaml
from pause_points import PausePoint, pause_env
from runtime_harness import EXAMPLES, RuntimeProcess, run_args, runtime_env
from runtime_inputs import load_example
from runtime_outputs import _row

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from kafka_io import consume_all  # noqa: E402

DELAY_MS = 10_000
# Spark's Kafka source gives up on an unreachable broker after its admin calls time out
# (default.api.timeout.ms, 60 s) and fetchOffset.numRetries more tries: shortened for broker-down tests
FAIL_FAST = {"kafka.default.api.timeout.ms": "10000", "kafka.request.timeout.ms": "5000", "fetchOffset.numRetries": "1"}
# Spark's standalone cluster inside the driver JVM: 2 workers of 1 core and 1 GiB, each running
# its executor as a JVM process of its own (in the driver's process group), so an executor can
# be killed alone; a killed executor is replaced by its worker.
EXECUTORS = "local-cluster[2,1,1024]"
EVENTS = 600  # 5 minutes of event time, 6 batches of maxOffsetsPerTrigger=100


def load_events_module() -> ModuleType:
    return load_example("kafka_events")


def topics(broker: Any) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:6]
    return broker.create_topic(f"events-{suffix}"), broker.create_topic(f"windows-{suffix}", partitions=2)


def kafka_job(broker: Any, source: str, target: str, path: Path, source_options: dict[str, str] | None = None, **sink: Any) -> Path:
    """kafka_windows.yaml pointed at the test's broker and topics, written to `path`."""
    job = yaml.safe_load((EXAMPLES / "kafka_windows.yaml").read_text())
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": source, **(source_options or {})}
    job["pipeline"]["sources"][0]["options"].update(options)
    job["pipeline"]["sink"]["kafka"].update({"bootstrapServers": broker.bootstrap, "topic": target, **sink})
    path.write_text(json.dumps(job))
    return path


def reference_windows(events: list[Any]) -> Counter[reference.Row]:
    """Closed windows of strictly time-ordered events: independent of how Spark cut the batches
    (nothing is late), all windows ending at or before the final watermark."""
    evs = [reference.Ev(e.user, e.ts_ms, e.amount) for e in events]
    final_mark = max(e.ts_ms for e in evs) - DELAY_MS
    return reference.windowed([(evs, final_mark)], length_ms=10_000, late="never")


def committed_windows(bootstrap: str, topic: str, expect: int | None = None, timeout: float = 60.0) -> Counter[reference.Row]:
    """The windows a read_committed consumer sees on `topic` (each record counted)."""
    rows: Counter[reference.Row] = Counter()
    for message in consume_all(bootstrap, topic, expect, timeout=timeout):
        record = json.loads(message.value())
        assert message.key().decode() == record["user"], (message.key(), record)
        rows[_row(record)] += 1
    return rows


def start_run(processes: list[RuntimeProcess], tmp_path: Path, job: Path, checkpoint: Path, *, name: str, label: str,
              point: PausePoint | None = None, trigger: str = "available-now", extra: tuple[str, ...] = (),
              master: str = "local[2]") -> RuntimeProcess:
    """A runtime process of `job` on `checkpoint` (logs under tmp_path/runs), paused at `point`
    (pause files under tmp_path/pauses) when given; registered in `processes` for teardown.
    `master` EXECUTORS runs the executors as processes of their own."""
    env = runtime_env(pause_env([point], tmp_path / "pauses")) if point else runtime_env()
    args = run_args(job, checkpoint.as_uri(), name=name, trigger=trigger, extra=extra)
    proc = RuntimeProcess(tmp_path / "runs", args, env=env, label=label, master=master)
    processes.append(proc.start())
    return proc
