"""The Kafka connector jars: one list (images/runtime/kafka-jars.txt) read by the test bed's
fetch and by the runtime image's Maven step (the jars in the built image are checked
against it by tests/images/test_images.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def listed() -> list[str]:
    lines = (REPO / "images" / "runtime" / "kafka-jars.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_list_names_the_connector_and_its_client() -> None:
    artifacts = {c.split(":")[1] for c in listed()}
    assert {"spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2"} <= artifacts

