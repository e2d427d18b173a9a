"""The durable store: jobs, runs, events, queues, quotas, clusters, nodes and leases in SQL.

``SqlStore.open(url)`` connects (SQLite file by default, PostgreSQL by URL) and migrates the
schema to the latest revision. ``Store`` is the contract; see ``flotilla.store.protocol``.
"""

from flotilla.store.engine import DEFAULT_URL, SchemaStatus, make_engine, upgrade
from flotilla.store.errors import (
    AmbiguousJobError,
    ConflictError,
    DuplicateJobError,
    IllegalTransitionError,
    InvalidDependencyError,
    InvalidJobError,
    LeaseLostError,
    NotFoundError,
    StaleRunError,
    StoreError,
    job_not_found,
)
from flotilla.store.observe import CommitObserver, CommittedChanges
from flotilla.store.protocol import (
    CheckpointReport,
    CycleCommit,
    CycleWrite,
    RunRequest,
    Store,
    Transition,
)
from flotilla.store.records import (
    ClusterRecord,
    DependencyRecord,
    EventRecord,
    FleetChange,
    FleetRecord,
    JobPage,
    JobRecord,
    Lease,
    NodeRecord,
    RunRecord,
)
from flotilla.store.run_report import RunReportQuery, RunReportRow
from flotilla.store.sql import SqlStore
from flotilla.store.states import (
    ACTIVE_JOB_STATES,
    JOB_TRANSITIONS,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    JobState,
    RunState,
)
from flotilla.store.usage import UsageGrouping, UsageQuery, UsageReport, UsageRow

__all__ = [
    "ACTIVE_JOB_STATES",
    "DEFAULT_URL",
    "JOB_TRANSITIONS",
    "TERMINAL_JOB_STATES",
    "WAITING_JOB_STATES",
    "AmbiguousJobError",
    "CheckpointReport",
    "ClusterRecord",
    "CommitObserver",
    "CommittedChanges",
    "ConflictError",
    "CycleCommit",
    "CycleWrite",
    "DependencyRecord",
    "DuplicateJobError",
    "EventRecord",
    "FleetChange",
    "FleetRecord",
    "IllegalTransitionError",
    "InvalidDependencyError",
    "InvalidJobError",
    "JobPage",
    "JobRecord",
    "JobState",
    "Lease",
    "LeaseLostError",
    "NodeRecord",
    "NotFoundError",
    "RunRecord",
    "RunReportQuery",
    "RunReportRow",
    "RunRequest",
    "RunState",
    "SchemaStatus",
    "SqlStore",
    "StaleRunError",
    "Store",
    "StoreError",
    "Transition",
    "UsageGrouping",
    "UsageQuery",
    "UsageReport",
    "UsageRow",
    "job_not_found",
    "make_engine",
    "upgrade",
]
