"""What happened to a tenant's jobs (the lifecycle feed and its streams), and the
integration events between modules."""
