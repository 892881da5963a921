"""A minimal OTLP/gRPC trace receiver: the collector the tracing tests, the benchmark and the
docs' screenshot export to (docs/observability.md).

It serves ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` with grpcio (the stubs
of the ``opentelemetry-proto`` package, in ``waitgraph[otel]``) and keeps every span it receives
as a plain :class:`Span`; :meth:`Receiver.dump` writes them as JSON (``scripts/trace_page.py``
draws a page from that file).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(frozen=True, slots=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One received span, ids in lowercase hex (``parent_span_id`` empty for a root)."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: tuple[Event, ...]
    links: tuple[Link, ...]
    status: str
    trace_state: str = ""
    flags: int = 0

    def event(self, name: str) -> Event | None:
        return next((e for e in self.events if e.name == name), None)


def _value(v: Any) -> Any:
    case = v.WhichOneof("value")
    if case == "array_value":
        return [_value(x) for x in v.array_value.values]
    if case == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if case == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, case) if case else None


def _attributes(kvs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def spans_of(request: Any) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest``."""
    out = []
    for rs in request.resource_spans:
        service = str(_attributes(rs.resource.attributes).get("service.name", ""))
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        service=service,
                        name=s.name,
                        kind=KINDS.get(s.kind, str(s.kind)),
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=_attributes(s.attributes),
                        events=tuple(Event(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in s.events),
                        links=tuple(
                            Link(lk.trace_id.hex(), lk.span_id.hex(), _attributes(lk.attributes)) for lk in s.links
                        ),
                        status={0: "UNSET", 1: "OK", 2: "ERROR"}.get(s.status.code, "UNSET"),
                        trace_state=s.trace_state,
                        flags=s.flags,
                    )
                )
    return out


class Receiver:
    """An OTLP/gRPC trace endpoint on ``127.0.0.1:<port>`` (:attr:`endpoint`), keeping what it gets."""

    def __init__(self, port: int = 0) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self.requests = 0
        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                got = spans_of(request)
                with receiver._lock:
                    receiver._spans.extend(got)
                    receiver.requests += 1
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    @property
    def endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set to (plaintext gRPC)."""
        return f"http://127.0.0.1:{self.port}"

    def spans(self, where: Callable[[Span], bool] | None = None) -> list[Span]:
        with self._lock:
            got = list(self._spans)
        return [s for s in got if where is None or where(s)]

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def dump(self, path: Path) -> None:
        """Every span received, as JSON (a list of :class:`Span` dicts)."""
        path.write_text(json.dumps([asdict(s) for s in self.spans()], indent=1, sort_keys=True) + "\n")

    def close(self) -> None:
        self.server.stop(0)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(path: Path) -> list[Span]:
    """Spans :meth:`Receiver.dump` wrote."""
    out = []
    for raw in json.loads(path.read_text()):
        raw["events"] = tuple(Event(**e) for e in raw["events"])
        raw["links"] = tuple(Link(**lk) for lk in raw["links"])
        out.append(Span(**raw))
    return out
