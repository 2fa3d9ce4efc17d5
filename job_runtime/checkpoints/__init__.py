"""The job's checkpoint location, cared for by the driver: one owner (``ownership``), what
a killed driver left repaired (``recovery``), the state-partition pin (``pinning``), state
of operators the query no longer has (``nonrestored``), and storage hygiene: the pure
rules (``hygiene``) and the work (``janitor``) that prune old run directories and
abandoned savepoint directories. Called by job_runtime.run."""
