"""The Kafka connector jars: one list (testbed/build/kafka-jars.txt) read by the test bed's
fetch and mirrored by the Dockerfile; a drift between them fails here."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def listed() -> list[str]:
    lines = (REPO / "testbed" / "build" / "kafka-jars.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def maven_url(coordinate: str) -> str:
    group, artifact, version = coordinate.split(":")
    return f"https://repo1.maven.org/maven2/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"


def test_the_list_names_the_connector_and_its_client() -> None:
    artifacts = {c.split(":")[1] for c in listed()}
    assert {"spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2"} <= artifacts


def test_the_dockerfile_adds_exactly_the_listed_jars() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    added = {line.split()[1] for line in dockerfile.splitlines() if line.startswith("ADD ") and ("kafka" in line or "commons-pool2" in line)}
    assert {maven_url(c) for c in listed()} == {a for a in added if a.startswith("https://")}
