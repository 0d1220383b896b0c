"""The job lifecycle: the Job aggregate, its use cases and the worker-side runner."""
