"""OpenTelemetry for workers: traces and metrics, configured by the standard `OTEL_*` variables.

Workflow and activity spans come from Temporal's replay-safe `TracingInterceptor`; model calls
add `chat {model}` spans with the gen_ai semantic conventions and tools `execute_tool {name}`
spans, both inside activities (so replays never emit them again). Metrics: tokens, cost, model
and tool latency (activities), runs by terminal reason and approvals waiting (workflow metric
meter, which is replay-safe). With `OTEL_EXPORTER_OTLP_ENDPOINT` set and the `otlp` extra
installed, spans go to that collector; otherwise nothing is exported.
"""

from __future__ import annotations

import logging
import os

from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["Instruments", "configure_from_env", "tracing_configured"]

log = logging.getLogger("capstan.runtime.telemetry")
SCOPE = "capstan"


def configure_from_env() -> TracerProvider | None:
    """Install an OTLP-exporting tracer provider when the environment asks for one."""
    if (
        not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_SDK_DISABLED") == "true"
    ):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the `otlp` extra is not installed")
        return None
    name = os.environ.get("OTEL_SERVICE_NAME", "capstan-worker")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


class Instruments:
    """The tracer and meters the activities use (injected, so tests can capture them)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(SCOPE)
        meter = metrics.get_meter(SCOPE)
        self.tokens = meter.create_counter("capstan.tokens", unit="{token}")
        self.cost = meter.create_counter("capstan.cost", unit="USD")
        self.model_latency = meter.create_histogram("capstan.model.duration", unit="ms")
        self.tool_latency = meter.create_histogram("capstan.tool.duration", unit="ms")


def tracing_configured(tracer_provider: trace.TracerProvider | None = None) -> bool:
    """Whether spans can go anywhere: a provider was given, or one was installed globally
    (`configure_from_env`, or the embedding application, before the worker is built). The
    default global provider is a proxy that drops every span."""
    provider = tracer_provider or trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
