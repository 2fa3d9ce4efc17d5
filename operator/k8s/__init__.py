"""Everything that talks to Kubernetes, S3 or the driver: builders (pure), clients, the actor, the lease."""
