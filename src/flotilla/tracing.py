"""OpenTelemetry traces of a job's way through the service: submit → schedule → dispatch.

Spans are made with the OpenTelemetry API, which does nothing until a tracer provider is
installed: off by default, at the cost of a no-op call per span. ``flotilla up``/``serve``
install one when ``FLOTILLA_TRACES`` asks for an exporter:

- ``console``: each finished span as JSON on standard output (needs ``opentelemetry-sdk``);
- ``otlp``: to an OpenTelemetry collector, configured by the standard ``OTEL_EXPORTER_OTLP_*``
  variables (needs ``opentelemetry-exporter-otlp``).

The three steps happen in different requests and threads (a job waits in its queue between
them), so they are separate traces; the job ids they carry as the ``flotilla.job_ids``
attribute tie them together, and the job id is what a trace search looks for.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from opentelemetry import trace

TRACES_ENV = "FLOTILLA_TRACES"
JOB_IDS = "flotilla.job_ids"
EXPORTERS = ("console", "otlp")


class TracingError(RuntimeError):
    """``FLOTILLA_TRACES`` names an exporter that is unknown or not installed."""


def tracer() -> trace.Tracer:
    """Flotilla's tracer (a no-op one unless ``configure`` installed a provider)."""
    return trace.get_tracer("flotilla")


def job_ids(ids: Iterable[str]) -> dict[str, list[str]]:
    """The attribute that ties a span to jobs."""
    return {JOB_IDS: list(ids)}


def configure(environ: Mapping[str, str] | None = None) -> str | None:
    """Install a tracer provider with the exporter ``FLOTILLA_TRACES`` names; returns a line
    saying so, or None when tracing stays off. Raises ``TracingError`` naming the variable."""
    environ = os.environ if environ is None else environ
    choice = environ.get(TRACES_ENV, "").strip().lower()
    if choice in ("", "off", "none"):
        return None
    if choice not in EXPORTERS:
        raise TracingError(
            f"{TRACES_ENV}={choice}: unknown exporter (use one of: off, {', '.join(EXPORTERS)})"
        )
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
            SpanExporter,
        )
    except ImportError:
        raise TracingError(
            f"{TRACES_ENV}={choice}: needs the opentelemetry-sdk package "
            "(uv pip install opentelemetry-sdk)"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "flotilla"}))
    if choice == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
        except ImportError:
            raise TracingError(
                f"{TRACES_ENV}=otlp: needs the opentelemetry-exporter-otlp package "
                "(uv pip install opentelemetry-exporter-otlp)"
            ) from None
        exporter: SpanExporter = OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return f"traces: {choice} exporter ({TRACES_ENV})"
