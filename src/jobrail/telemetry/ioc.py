"""The telemetry a process's container hands out: its tracer provider and the
instruments of the clients the composition root makes."""

from dishka import Provider, Scope, provide
from opentelemetry.trace import TracerProvider

from jobrail.settings import Settings
from jobrail.telemetry.instruments import Instruments
from jobrail.telemetry.tracing import process_tracer_provider


class TelemetryProvider(Provider):
    scope = Scope.APP

    @provide
    def tracer_provider(self) -> TracerProvider:
        return process_tracer_provider()

    @provide
    def instruments(self, tracer_provider: TracerProvider, settings: Settings) -> Instruments:
        exported = settings.telemetry.otlp_endpoint is not None
        return Instruments(tracer_provider, exported=exported)
