"""Batches and chains: jobs that run as one piece of work."""
