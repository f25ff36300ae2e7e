"""X-Bucket: online bucketing resource allocation for dynamic workflows.

Phung & Thain (../shared/papers/15-xbucket.md). The four X-Bucket allocators (PG/PE/DG/DE),
the alternatives they are compared against, a trace-replay simulator, and a local executor
that runs real tasks under the allocations it predicts.
"""

from schedlab.xbucket.compare import compare, run_one
from schedlab.xbucket.executor import ExecutionRecord, LocalExecutor, TaskSpec
from schedlab.xbucket.metrics import summarise
from schedlab.xbucket.policies import (
    ALLOCATORS,
    ALTERNATIVES,
    XBUCKET_FAMILY,
    Allocator,
    Declared,
    MaxSeen,
    MaxThroughput,
    MinWaste,
    WholeMachine,
    XBucket,
    make_allocator,
)
from schedlab.xbucket.simulator import Replay, ReplayConfig, replay
from schedlab.xbucket.state import BucketingState
from schedlab.xbucket.types import RESOURCES, Defaults, Machine, ResourceReport, Resources, Task
from schedlab.xbucket.workloads import SHAPES, WORKFLOWS, read_reports, synthetic

__all__ = [
    "ALLOCATORS", "ALTERNATIVES", "RESOURCES", "SHAPES", "WORKFLOWS", "XBUCKET_FAMILY",
    "Allocator", "BucketingState", "Declared", "Defaults", "ExecutionRecord", "LocalExecutor",
    "Machine", "MaxSeen", "MaxThroughput", "MinWaste", "Replay", "ReplayConfig",
    "ResourceReport", "Resources", "Task", "TaskSpec", "WholeMachine", "XBucket", "compare",
    "make_allocator", "read_reports", "replay", "run_one", "summarise", "synthetic",
]
