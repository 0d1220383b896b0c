"""jobrail: durable jobs for FastAPI services on Taskiq, RabbitMQ, Postgres and Redis."""

__version__ = "0.1.0"
