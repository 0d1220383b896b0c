"""The HTTP API: app factory, error mapping, health, jobs routes, tenancy."""
