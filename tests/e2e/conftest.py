"""Fixtures of the end-to-end tests; they live in streamjob_e2e.py with the helpers the tests import."""

from streamjob_e2e import built_images, crd, drivers, host_dir, jobs, operator, s3_secret  # noqa: F401
