"""The StreamJob test bed: real Kubernetes control plane, S3, Kafka and a real node on this machine.

Used by tests (``tests/conftest.py``) and by developers (``streamjob-testbed up``).
The operator never imports this package.
"""

from testbed.cluster import S3Credentials, TestBed, TestBedError

__all__ = ["S3Credentials", "TestBed", "TestBedError"]
