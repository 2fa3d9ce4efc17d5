"""The S3 server is a real one, for boto3 and for Spark's s3a."""

from __future__ import annotations

import uuid
from typing import Any

from testbed import TestBed


def test_boto3_put_get_list(s3: Any, testbed: TestBed) -> None:
    prefix = f"boto3-{uuid.uuid4().hex[:8]}/"
    s3.put_object(Bucket="streamjob", Key=prefix + "a.txt", Body=b"alpha")
    s3.put_object(Bucket="streamjob", Key=prefix + "b/c.txt", Body=b"gamma")

    body = s3.get_object(Bucket="streamjob", Key=prefix + "a.txt")["Body"].read()
    listed = s3.list_objects_v2(Bucket="streamjob", Prefix=prefix)

    assert body == b"alpha"
    assert sorted(o["Key"] for o in listed["Contents"]) == [prefix + "a.txt", prefix + "b/c.txt"]
    assert {b["Name"] for b in s3.list_buckets()["Buckets"]} >= set(testbed.buckets)
