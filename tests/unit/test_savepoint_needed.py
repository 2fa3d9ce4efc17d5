"""Truth tables for job_runtime.savepoints.needed: the state files a restore of a savepoint's batch loads."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from job_runtime.savepoints import needed
from streamjob_contract.s3 import StoredFile


def snapshot_zip(ssts: list[str], logs: list[str] = []) -> bytes:  # noqa: B006 (read only)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        body = {"sstFiles": [{"dfsSstFileName": n} for n in ssts], "logFiles": [{"dfsLogFileName": n} for n in logs]}
        archive.writestr("metadata", "v1\n" + json.dumps(body))
    return buf.getvalue()


def chosen(paths: list[str], batch: int, zips: dict[str, bytes] | None = None) -> set[str]:
    files = [StoredFile(p, 1) for p in paths]
    return {f.path for f in needed.restore_set(files, batch, lambda path: (zips or {})[path])}


CHANGELOGS = [f"state/0/0/{v}.changelog" for v in range(1, 9)]


@pytest.mark.parametrize(
    ("paths", "batch", "kept"),
    [
        pytest.param(CHANGELOGS, 5, {f"state/0/0/{v}.changelog" for v in range(1, 8)},
                     id="no-snapshot-every-changelog-up-to-the-planned-batch"),
        pytest.param([*CHANGELOGS, "state/0/0/4.zip"], 5, {"state/0/0/4.zip", "state/0/0/5.changelog", "state/0/0/6.changelog",
                                                           "state/0/0/7.changelog"}, id="newest-snapshot-and-changelogs-above-it"),
        pytest.param([*CHANGELOGS, "state/0/0/2.zip", "state/0/0/6.zip"], 5,
                     {"state/0/0/6.zip", "state/0/0/7.changelog"}, id="snapshot-of-the-batch-state-is-the-base"),
        pytest.param([*CHANGELOGS, "state/0/0/7.zip"], 5, {f"state/0/0/{v}.changelog" for v in range(1, 8)},
                     id="a-snapshot-of-the-planned-version-is-no-base"),
        pytest.param(["state/0/0/1.delta", "state/0/0/2.delta", "state/0/0/2.snapshot", "state/0/0/3.delta", "state/0/0/4.delta"], 2,
                     {"state/0/0/2.snapshot", "state/0/0/3.delta", "state/0/0/4.delta"}, id="hdfs-snapshot-and-deltas"),
        pytest.param(["state/0/0/3_ab.zip", "state/0/0/3_ab.changelog", "state/0/0/4_cd.changelog"], 2,
                     {"state/0/0/3_ab.zip", "state/0/0/4_cd.changelog"}, id="checkpoint-format-v2-names"),
        pytest.param(["state/0/1/left-keyToNumValues/1.delta", "state/0/1/left-keyToNumValues/2.snapshot",
                      "state/0/1/left-keyToNumValues/3.delta", "state/0/1/left-keyToNumValues/9.delta"], 1,
                     {"state/0/1/left-keyToNumValues/2.snapshot", "state/0/1/left-keyToNumValues/3.delta"},
                     id="join-store-subdirectory"),
        pytest.param(["metadata", "offsets/5", "commits/5", "sources/0/3", "state/0/_metadata/metadata",
                      "state/0/_stateSchema/default/0_x"], 5,
                     {"metadata", "offsets/5", "commits/5", "sources/0/3", "state/0/_metadata/metadata",
                      "state/0/_stateSchema/default/0_x"}, id="everything-else-kept"),
    ],
)
def test_state_versions_a_restore_loads(paths: list[str], batch: int, kept: set[str]) -> None:
    zips = {p: snapshot_zip([]) for p in paths if p.endswith(".zip")}
    assert chosen(paths, batch, zips) == kept


def test_only_the_sst_and_log_files_a_kept_zip_names() -> None:
    paths = ["state/0/0/2.zip", "state/0/0/4.zip", "state/0/0/5.changelog",
             "state/0/0/SSTs/a.sst", "state/0/0/SSTs/b.sst", "state/0/0/SSTs/c.sst", "state/0/0/logs/w1.log", "state/0/0/logs/w2.log",
             "state/0/1/1.changelog", "state/0/1/SSTs/z.sst", "state/0/2/3.zip", "state/0/2/SSTs/q.sst"]
    zips = {"state/0/0/2.zip": snapshot_zip(["a.sst"], ["w1.log"]), "state/0/0/4.zip": snapshot_zip(["b.sst"], ["w2.log"]),
            "state/0/2/3.zip": b"not a zip"}
    assert chosen(paths, 3, zips) == {
        "state/0/0/4.zip", "state/0/0/5.changelog", "state/0/0/SSTs/b.sst", "state/0/0/logs/w2.log",
        "state/0/1/1.changelog",  # no zip: changelogs only, no SST needed
        "state/0/2/3.zip", "state/0/2/SSTs/q.sst",  # an unreadable zip keeps every SST of its store
    }
