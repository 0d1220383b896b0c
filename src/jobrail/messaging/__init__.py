"""Moving messages: envelopes, the outbox, the Taskiq brokers and the queue topology."""
