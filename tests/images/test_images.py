"""Smoke tests of the images scripts/build-images.sh builds from Dockerfile and images/operator/Dockerfile.

Each command runs inside the image as `docker run --read-only` would run it, through the
real node's containerd and runc (``RealNode.run_image``: the image's user, environment
and working directory, its root read-only; the module's own real test bed). The e2e tests
run the driver, executors and operator pods from these images (tests/e2e).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import TestBed, imagestore

REPO = Path(__file__).resolve().parents[2]
RUNTIME = imagestore.runtime_image()
OPERATOR = imagestore.operator_image()
SCRIPTS = {
    RUNTIME: ["streamjob-runtime", "streamjob-savepoints", "kubectl-streamjob", "streamjob-operator"],
    OPERATOR: ["streamjob-operator", "streamjob-savepoints", "kubectl-streamjob"],
}


@pytest.fixture
def run(testbed: TestBed) -> object:
    """run(image, command, mounts=...) -> (exit code, stdout + stderr) of a container of ``image``."""
    assert testbed.node is not None

    def run_in(image: str, command: list[str], **kwargs: object) -> tuple[int, str]:
        result = testbed.node.run_image(image, command, **kwargs)  # type: ignore[union-attr,arg-type]
        return result.returncode, result.stdout + result.stderr

    return run_in


@pytest.mark.parametrize(("image", "script"), [(i, s) for i, scripts in SCRIPTS.items() for s in scripts])
def test_every_console_script_answers_help(image: str, script: str, run: Any) -> None:
    code, out = run(image, [script, "--help"])
    assert code == 0, out
    assert "usage" in out.lower()


@pytest.mark.parametrize("image", [RUNTIME, OPERATOR])
def test_images_run_as_non_root_and_hold_no_test_tooling(image: str, run: Any) -> None:
    probe = ("import importlib.util as u, os; "
             "print(os.getuid(), os.getgid(), [m for m in ('testbed', 'pytest') if u.find_spec(m)])")
    code, out = run(image, ["python3", "-c", probe])
    assert code == 0, out
    uid = "185 185" if image == RUNTIME else "65532 65532"
    assert out.strip() == f"{uid} []"
    code, out = run(image, ["sh", "-c", "command -v streamjob-testbed || echo absent"])
    assert out.strip() == "absent"


def test_runtime_image_has_java_17_spark_the_s3a_jars_and_arrow(run: Any) -> None:
    # pyarrow: the Kafka sink reads its records as Arrow batches on the driver and in the tasks
    code, out = run(RUNTIME, ["sh", "-c", "java -version 2>&1 | head -n1; ls $SPARK_HOME/jars | grep -E "
                              "'^(spark-core_2.13|hadoop-aws|bundle)-' | sort; python3 -c 'import pyspark; print(pyspark.__version__)'; "
                              "python3 -c 'import pyarrow; print(\"pyarrow\", pyarrow.__version__)' 2>&1 | tail -n1"])
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith('openjdk version "17.'), out
    assert [line.split("-")[0] for line in lines[1:4]] == ["bundle", "hadoop", "spark"], out
    assert lines[-2] == "4.3.0", out
    assert lines[-1].startswith("pyarrow "), out


def test_runtime_image_writes_nowhere_but_tmp(tmp_path: Path, run: Any) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    scratch.chmod(0o777)
    code, out = run(RUNTIME, ["sh", "-c", "touch /opt/spark/x 2>&1; touch /tmp/ok && echo tmp-writable"],
                    mounts=((str(scratch), "/tmp", False),))
    assert "Read-only file system" in out and "tmp-writable" in out, out
    assert (scratch / "ok").exists()


def test_operator_image_has_no_jvm_and_no_spark(run: Any) -> None:
    code, out = run(OPERATOR, ["sh", "-c", "command -v java || echo no-java; python3 -c 'import pyspark' 2>&1 | tail -n1"])
    assert "no-java" in out and "No module named 'pyspark'" in out, out


def test_runtime_image_validates_a_job_and_names_the_bad_field(tmp_path: Path, run: Any) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "good.yaml").write_text((REPO / "examples" / "jobs" / "tumbling.yaml").read_text())
    (jobs / "bad.yaml").write_text((REPO / "examples" / "jobs" / "tumbling.yaml").read_text().replace("sink:", "sinkk:", 1))
    mounts = ((str(jobs), "/jobs", True),)
    code, out = run(RUNTIME, ["streamjob-runtime", "validate", "--job", "/jobs/good.yaml"], mounts=mounts)
    assert code == 0, out
    code, out = run(RUNTIME, ["streamjob-runtime", "validate", "--job", "/jobs/bad.yaml"], mounts=mounts)
    assert code != 0 and "sink" in out, out
