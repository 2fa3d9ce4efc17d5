"""The CRD refuses exactly the sparkConf keys the runtime refuses, in the same words.

Pure: the generated CRD against job_runtime.query.session.engine_conf. The API server's
side (each key refused at `kubectl apply`) is in test_crd_validation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from job_runtime.query.session import engine_conf
from job_runtime.settings import RuntimeSettings, SettingsError
from streamjob_operator.api import crd

SETTINGS = RuntimeSettings(job_file=Path("job.json"), name="j", namespace="ns",
                           checkpoint_location="file:///tmp/ck", state_partitions=8, master="local[1]")


def crd_refusals() -> dict[str, str]:
    """key -> message of every CEL rule in the generated CRD that refuses a sparkConf key."""
    spec = crd.generate_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out = {}
    for rule in spec.get("x-kubernetes-validations", []):
        if "sparkConf" not in rule["rule"]:
            continue
        match = re.fullmatch(r"!has\(self\.sparkConf\) \|\| !\('([^']+)' in self\.sparkConf\)", rule["rule"])
        assert match, f"unexpected rule on spec.sparkConf: {rule['rule']}"
        assert rule["fieldPath"] == f".sparkConf['{match.group(1)}']"
        out[match.group(1)] = rule["message"]
    return out


def runtime_refusal(key: str) -> str | None:
    """The runtime's message for `--conf key=...`, without the '--conf key: ' prefix; None if it runs."""
    settings = RuntimeSettings(**{**SETTINGS.__dict__, "spark_conf": ((key, "1"),)})
    try:
        engine_conf(settings)
    except SettingsError as err:
        prefix = f"--conf {key}: "
        assert str(err).startswith(prefix), str(err)
        return str(err)[len(prefix):]
    return None


def candidate_keys() -> set[str]:
    """Every key the runtime sets itself, every key the CRD refuses, and some users may set."""
    return set(engine_conf(SETTINGS)) | set(crd_refusals()) | {
        "spark.sql.streaming.checkpointLocation", "spark.executor.cores", "spark.sql.adaptive.enabled",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
    }


def test_the_crd_refuses_exactly_what_the_runtime_refuses():
    runtime = {k: m for k in sorted(candidate_keys()) if (m := runtime_refusal(k)) is not None}
    assert runtime, "the runtime refuses nothing: the candidate keys are wrong"
    assert crd_refusals() == runtime


@pytest.mark.parametrize("key", ["spark.sql.shuffle.partitions", "spark.sql.streaming.stateStore.providerClass",
                                 "spark.sql.streaming.checkpointLocation"])
def test_state_partitions_state_store_and_checkpoint_location_are_owned(key):
    assert key in crd_refusals()
    assert runtime_refusal(key) == crd_refusals()[key]


def test_the_refusal_names_the_streamjob_field_that_sets_the_key():
    assert "spec.statePartitions" in crd_refusals()["spark.sql.shuffle.partitions"]
    assert "spec.checkpoint.location" in crd_refusals()["spark.sql.streaming.checkpointLocation"]


def test_the_operations_guide_lists_every_owned_key():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = guide.split("## What is refused at apply time", 1)[1].split("\n## ", 1)[0]
    assert [k for k in crd_refusals() if f"`{k}`" not in section] == []


def test_a_stored_spec_with_a_credential_in_spark_conf_does_not_parse():
    """A spec stored before the CRD refused it (an operator upgrade) never reaches a driver's arguments."""
    import copy

    import yaml

    from streamjob_operator.api.spec import SpecError, parse_spec

    docs = yaml.safe_load_all((Path(__file__).resolve().parents[2] / "examples" / "s3-savepoints.yaml").read_text())
    spec = copy.deepcopy(next(d for d in docs if d["kind"] == "StreamJob")["spec"])
    parse_spec(spec)
    spec["sparkConf"] = {"spark.hadoop.fs.s3a.aws.credentials.provider": "x", "spark.hadoop.fs.s3a.secret.key": "hunter2"}
    with pytest.raises(SpecError, match=r"spec\.sparkConf: .*sparkConf\[spark\.hadoop\.fs\.s3a\.secret\.key\] holds a credential") as err:
        parse_spec(spec)
    assert "hunter2" not in str(err.value)
