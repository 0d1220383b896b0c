"""The trace context in job message labels, read back by the worker.

``EnqueueJob`` stores the W3C context of its span (``traceparent``, ``tracestate``)
with the job, and every message of the job carries it among its labels. Labels also
hold the platform's own keys (``queue_name``, ``limit_keys``, ...) and come from the
wire, so the worker reads them only through the propagator, and only string values:
a label of another type is ignored, not an error.

The spans on either side of RabbitMQ (the outbox's publish, the worker's run) carry
OpenTelemetry's messaging attributes: ``AMQP_SEND`` and ``AMQP_PROCESS``.
"""

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter


class _StringLabels(Getter[Mapping[str, Any]]):
    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [key for key, value in carrier.items() if isinstance(value, str)]


_LABELS = _StringLabels()

AMQP_SEND = {
    "messaging.system": "rabbitmq",
    "network.protocol.name": "amqp",
    "messaging.operation.type": "send",
}
AMQP_PROCESS = {**AMQP_SEND, "messaging.operation.type": "process"}


def context_from_labels(labels: Mapping[str, Any]) -> Context:
    """The context a message's labels carry (an empty one if they carry none)."""
    return propagate.extract(labels, context=Context(), getter=_LABELS)


def current_trace_context() -> dict[str, str]:
    """The current trace context as labels (empty when there is no valid span)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
