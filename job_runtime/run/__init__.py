"""The driver's life: the Runner (``runner``) with its checks before the query starts
(``startup``), its savepoint requests (``savepoint_requests``) and its HTTP control
endpoint (``control``). Called by job_runtime.main."""
