"""Observability: JSON logs that name their request, job and trace (``logging``),
OpenTelemetry traces from the API through RabbitMQ to the workers (``tracing``,
``propagation``, ``http``), and metrics."""
