"""The bus: the codec, the AMQP and in-memory brokers, and all of jobrail's Taskiq glue."""
