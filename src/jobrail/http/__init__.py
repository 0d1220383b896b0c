"""The shared HTTP edge: errors, the request guard, authentication and rate limits,
the schemas every room's routes share, the server."""
