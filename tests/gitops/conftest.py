"""Fixtures of the GitOps tests: the test bed's e2e fixtures (tests/e2e/streamjob_e2e.py) for the lifecycle capture."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))  # streamjob_e2e, shared with tests/e2e

from streamjob_e2e import crd, drivers, jobs, operator, s3_secret  # noqa: E402,F401
