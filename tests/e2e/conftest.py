"""Fixtures of the end-to-end tests; they live in streamjob_e2e.py with the helpers the tests import."""

from streamjob_e2e import built_images, crd, dev_tags_on_the_real_node, drivers, host_dir, jobs, operator, real_api, s3_secret  # noqa: F401
