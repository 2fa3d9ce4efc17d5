"""Example Python entrypoint jobs for the StreamJob runtime (see examples/jobs/entrypoint.yaml)."""
