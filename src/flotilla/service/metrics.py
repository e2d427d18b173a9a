"""Prometheus metrics of the scheduling loop, in one registry the server exposes at /metrics.

Names follow Prometheus conventions (``flotilla_`` prefix, base units, ``_total`` counters).
The algorithm's own duration is separate from the whole cycle's, as in Armada, so a slow
algorithm in async mode is visible even while cycles stay fast.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_WAIT_SECONDS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "flotilla_cycle_seconds",
            "Duration of a whole scheduling cycle.",
            buckets=_SECONDS,
            registry=r,
        )
        self.algorithm_seconds = Histogram(
            "flotilla_algorithm_seconds",
            "Duration of the scheduling algorithm alone (in async mode, beside the loop).",
            buckets=_SECONDS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "flotilla_queue_depth", "Jobs waiting in a queue.", ["queue"], registry=r
        )
        self.running_jobs = Gauge(
            "flotilla_running_jobs", "Jobs holding resources, per queue.", ["queue"], registry=r
        )
        self.allocated = Gauge(
            "flotilla_queue_allocated",
            "Resources held by a queue's jobs (cores, bytes, GPUs…).",
            ["queue", "resource"],
            registry=r,
        )
        self.dominant_share = Gauge(
            "flotilla_queue_dominant_share",
            "A queue's dominant share of the fleet, divided by its weight.",
            ["queue"],
            registry=r,
        )
        self.decisions = Counter(
            "flotilla_decisions_total",
            "Scheduling decisions by outcome (scheduled, unschedulable).",
            ["outcome"],
            registry=r,
        )
        self.preemptions = Counter(
            "flotilla_preemptions_total", "Jobs preempted, by queue.", ["queue"], registry=r
        )
        self.cluster_capacity = Gauge(
            "flotilla_cluster_capacity",
            "A ready cluster's capacity per resource (cores, bytes, GPUs…).",
            ["cluster", "resource"],
            registry=r,
        )
        self.cluster_allocated = Gauge(
            "flotilla_cluster_allocated",
            "Resources the active runs on a cluster hold, per resource.",
            ["cluster", "resource"],
            registry=r,
        )
        self.node_capacity = Gauge(
            "flotilla_node_capacity",
            "A node's capacity per resource (fleets of up to 1000 nodes).",
            ["cluster", "node", "resource"],
            registry=r,
        )
        self.node_allocated = Gauge(
            "flotilla_node_allocated",
            "Resources the active runs hold on a node, per resource (up to 1000 nodes).",
            ["cluster", "node", "resource"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "flotilla_queue_wait_seconds",
            "Seconds from a job's submission to its first lease (first attempts only).",
            ["queue"],
            buckets=_WAIT_SECONDS,
            registry=r,
        )
        self.gpu_held_seconds = Counter(
            "flotilla_gpu_held_seconds_total",
            "GPU-seconds held by runs whose GPU use was measured (service/gpu_metrics.py).",
            ["cluster", "queue"],
            registry=r,
        )
        self.gpu_used_seconds = Counter(
            "flotilla_gpu_used_seconds_total",
            "GPU-seconds those runs kept GPUs busy (utilisation × time); over held: efficiency.",
            ["cluster", "queue"],
            registry=r,
        )
        self.gpu_memory_used = Gauge(
            "flotilla_gpu_memory_used_bytes",
            "GPU memory the active measured runs hold, as last sampled.",
            ["cluster", "queue"],
            registry=r,
        )
        self.leader = Gauge(
            "flotilla_leader", "1 while this replica holds the scheduling lease.", registry=r
        )
