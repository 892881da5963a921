"""OpenTelemetry tracing, shared by the SDK and the node (docs/observability.md).

Rules kept here:
- Optional. OpenTelemetry is the extra ``waitgraph[otel]``; it is imported only when tracing may
  be on, and without it every function here answers "off" (``tracer`` is None, nothing injected).
- Nothing is recorded or exported unless configured: by the application, which installed its own
  ``TracerProvider`` (an agent framework that traces already), or by the standard ``OTEL_*``
  variables, which make :func:`configure` install the OpenTelemetry SDK's provider with the
  exporters ``OTEL_TRACES_EXPORTER`` names (the SDK's own entry points; ``otlp`` by default once an
  ``OTEL_EXPORTER_OTLP_*ENDPOINT`` is set). Sampler, resource, batch processor and exporter read
  their variables themselves (``OTEL_TRACES_SAMPLER``, ``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_*``). ``OTEL_SDK_DISABLED=true``
  turns it all off.
- Context travels as W3C trace context (``traceparent``, ``tracestate``), written and read by
  OpenTelemetry's ``TraceContextTextMapPropagator``: as gRPC metadata on every call, and the
  wait's ``traceparent`` inside ``RegisterWait`` (stored with the edge in the replicated state).
- Spans follow the OpenTelemetry RPC conventions (:data:`RPC_SYSTEM`, :func:`rpc_attributes`).
- Off costs next to nothing (figure 10 of BENCHMARKS.md measures it): :func:`tracer` answers None
  from a flag, looking for an application's provider again at most every :data:`RECHECK_S`, and
  :func:`inject` returns at once while nothing in the process has imported OpenTelemetry's API
  (no span can be current then).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any

logger = logging.getLogger("waitgraph.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
HEADERS = (TRACEPARENT, TRACESTATE)
"""The gRPC metadata keys of W3C trace context (lowercase, as gRPC requires)."""

RPC_SYSTEM = "grpc"
"""``rpc.system.name`` of every RPC span."""
SCOPE = "waitgraph"
"""The instrumentation scope of every span waitgraph makes."""

_lock = threading.Lock()
_installed: Any = None
"""The provider :func:`configure` installed from the environment, once."""
_tried_env = False
_propagator: Any = None
_tracer: Any = None
"""waitgraph's tracer once a provider was found: OpenTelemetry's global provider is set once."""
_off_until = 0.0
RECHECK_S = 1.0
"""While off, how often :func:`tracer` looks again for a provider the application installed."""


def _probe() -> bool:
    """``waitgraph[otel]`` is installed (found, not imported: importing waits for first use)."""
    try:
        return importlib.util.find_spec("opentelemetry.sdk.trace") is not None
    except (ImportError, ValueError):
        return False


_AVAILABLE = _probe() and os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def available() -> bool:
    """OpenTelemetry's API and SDK are installed (``waitgraph[otel]``) and not disabled
    (``OTEL_SDK_DISABLED``, read when this module is imported)."""
    return _AVAILABLE


def trace_api() -> Any | None:
    """``opentelemetry.trace`` if something in this process imported it (else no span exists)."""
    return sys.modules.get("opentelemetry.trace") if _AVAILABLE else None


def env_configured(environ: Mapping[str, str] | None = None) -> bool:
    """The ``OTEL_*`` variables ask for export: an exporter other than ``none`` is named, or an
    OTLP endpoint is set."""
    env = os.environ if environ is None else environ
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(service_name: str, attributes: Mapping[str, str] | None = None) -> bool:
    """Install the OpenTelemetry SDK's tracer provider from the ``OTEL_*`` variables, unless the
    application installed one already or the variables ask for nothing. True when spans are
    recorded from now on. ``service_name`` applies when ``OTEL_SERVICE_NAME`` is not set;
    ``attributes`` are added to the resource (``OTEL_RESOURCE_ATTRIBUTES`` wins over them)."""
    global _installed, _tried_env, _off_until
    if not available():
        return False
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return True  # the application's own provider
    with _lock:
        if _installed is not None:
            return True
        _tried_env = True
        if not env_configured():
            return False
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        given = dict(attributes or {})
        given[SERVICE_NAME] = os.environ.get("OTEL_SERVICE_NAME") or service_name
        # Resource.create merges OTEL_RESOURCE_ATTRIBUTES; the sampler comes from OTEL_TRACES_SAMPLER.
        provider = TracerProvider(resource=Resource.create(given))
        for exporter in _exporters():
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _installed = provider
        _off_until = 0.0  # found by the next tracer() call, not a recheck later
        return True


def _exporters() -> list[Any]:
    """One exporter per name of ``OTEL_TRACES_EXPORTER`` (default ``otlp``), each built with no
    arguments so that it reads its own variables; ``otlp`` is the OTLP/gRPC exporter."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    found = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    made = []
    for name in names:
        if name == "none":
            continue
        ep = found.get(name) or (found.get("otlp_proto_grpc") if name == "otlp" else None)
        if ep is None:
            raise ValueError(f"OTEL_TRACES_EXPORTER names {name!r}; installed: {', '.join(sorted(found))}")
        made.append(ep.load()())
    return made


def shutdown() -> None:
    """Flush and stop the provider :func:`configure` installed (a stopping node, an exiting tool)."""
    provider = _installed
    if provider is not None:
        provider.shutdown()


def tracer() -> Any | None:
    """waitgraph's tracer when spans may be recorded, else None. The ``OTEL_*`` variables are read
    on the first call (an agent's process exports as ``waitgraph-agent`` unless
    ``OTEL_SERVICE_NAME`` says otherwise); an application's own provider is found within
    :data:`RECHECK_S` of its installing it. While nothing in the process has imported
    OpenTelemetry's API there is no provider to find: None at once."""
    global _tracer, _off_until
    if _tracer is not None or not _AVAILABLE:
        return _tracer
    if not _tried_env:
        if env_configured():
            try:
                configure("waitgraph-agent")
            except Exception:  # a bad OTEL_* setting must not fail the agent's calls
                logger.exception("tracing is not configured")
        _mark_tried()
    api = trace_api()
    if api is None:
        return None
    now = time.monotonic()
    if now < _off_until:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider):
        _off_until = now + RECHECK_S
        return None
    _tracer = provider.get_tracer(SCOPE, _version())
    return _tracer


def _mark_tried() -> None:
    global _tried_env
    _tried_env = True


def _version() -> str:
    try:
        return version("waitgraph")
    except PackageNotFoundError:
        return "unknown"


def propagator() -> Any:
    global _propagator
    if _propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _propagator = TraceContextTextMapPropagator()
    return _propagator


def inject(context: Any = None) -> tuple[tuple[str, str], ...]:
    """The ``traceparent`` (and ``tracestate``) of ``context``'s span (default: the current one),
    as gRPC metadata; empty when there is no valid span."""
    trace = trace_api()
    if trace is None or not trace.get_current_span(context).get_span_context().is_valid:
        return ()  # the common case when nothing traces: no carrier built
    carrier: dict[str, str] = {}
    propagator().inject(carrier, context=context)
    return tuple((k, carrier[k]) for k in HEADERS if k in carrier)


def extract(metadata: Iterable[tuple[str, str | bytes]]) -> Any | None:
    """The OpenTelemetry context of the caller's span in gRPC ``metadata``; None without a valid
    ``traceparent`` (or without OpenTelemetry)."""
    if not _AVAILABLE:
        return None
    carrier = {k: v for k, v in metadata if k in HEADERS and isinstance(v, str)}
    if TRACEPARENT not in carrier:
        return None
    return extract_carrier(carrier)


def extract_carrier(carrier: Mapping[str, str]) -> Any | None:
    """As :func:`extract`, from a mapping (an MCP request's ``_meta``); None without a valid span."""
    if not _AVAILABLE:
        return None
    from opentelemetry import trace

    ctx = propagator().extract({k: v for k, v in carrier.items() if k in HEADERS and isinstance(v, str)})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def traceparent(span: Any) -> str:
    """``span``'s W3C traceparent when it is sampled (what a wait stores), else ``""``: an
    unsampled wait stores nothing, as a caller's sampled flag decides."""
    ctx = span.get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def span_context(traceparent_value: str) -> Any | None:
    """The span context a stored traceparent names (for a link), or None when it names none."""
    if not _AVAILABLE or not traceparent_value:
        return None
    from opentelemetry import trace

    ctx = propagator().extract({TRACEPARENT: traceparent_value})
    sc = trace.get_current_span(ctx).get_span_context()
    return sc if sc.is_valid else None


def rpc_attributes(method: str, address: str | None = None) -> dict[str, str | int]:
    """The RPC conventions' attributes of a call of ``method`` (``waitgraph.v1.Service/Method``)
    to ``address`` (``host:port``, client side)."""
    attrs: dict[str, str | int] = {"rpc.system.name": RPC_SYSTEM, "rpc.method": method}
    if address:
        host, _, port = address.rpartition(":")
        attrs["server.address"] = host or address
        if port.isdigit() and host:
            attrs["server.port"] = int(port)
    return attrs


def end_rpc_span(span: Any, code_name: str, server: bool) -> None:
    """Set ``rpc.response.status_code`` and, for a failure, the error status, then end ``span``.
    A server marks only the codes the conventions call its own errors."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("rpc.response.status_code", code_name)
    if code_name != "OK" and (not server or code_name in SERVER_ERRORS):
        span.set_attribute("error.type", code_name)
        span.set_status(Status(StatusCode.ERROR))
    span.end()


SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"})
"""The gRPC codes that mark a server span as an error (the RPC conventions); the others are the
caller's."""
