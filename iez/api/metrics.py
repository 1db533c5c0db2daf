"""Prometheus metrics of one API instance: request counts and latencies, allocations, stale OSSs."""

from __future__ import annotations

from time import perf_counter

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ApiMetrics:
    """The metrics of one app, in a registry of its own (several apps may share a process in tests)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "iez_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "iez_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=self.registry,
        )
        self.allocations = Counter(
            "iez_allocations", "Allocations stored through the API", ["policy"], registry=self.registry
        )
        self.allocation_failures = Counter(
            "iez_allocation_failures", "POST /v1/allocate calls refused because requests did not fit",
            registry=self.registry,
        )
        self.stale_oss = Gauge(
            "iez_stale_oss", "OSSs past 3 of their report intervals without a report (iez.freshness)", registry=self.registry
        )
        self.known_oss = Gauge("iez_oss", "OSSs that ever reported", registry=self.registry)


class MetricsMiddleware:
    """Pure ASGI middleware (no per-request task switch): counts and times every HTTP request by route."""

    def __init__(self, app, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = perf_counter()
        status = 500

        async def send_recording(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording)
        finally:
            route = scope.get("iez_route") or getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(perf_counter() - start)
