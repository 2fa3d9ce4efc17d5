"""Kafka: the exactly-once sink (``sink``), the clients' SASL settings (``auth``) and the
watch that fails a query stuck waiting for a source's offsets (``offsets_watch``).
Called by job_runtime.query and job_runtime.run."""
