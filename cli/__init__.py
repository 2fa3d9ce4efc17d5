"""kubectl streamjob: the kubectl plugin for StreamJobs."""
