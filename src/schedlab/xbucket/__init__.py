"""X-Bucket: online bucketing resource allocation for dynamic workflows.

Phung & Thain (../shared/papers/15-xbucket.md). The four X-Bucket allocators (PG/PE/DG/DE),
the alternatives they are compared against, a trace-replay simulator, and a local executor
that runs real tasks under the allocations it predicts, and a Parsl executor built on it
(``XBucketExecutor``, in ``schedlab.xbucket.parsl``).
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "compare": "compare", "run_one": "compare", "ExecutionRecord": "executor",
    "LocalExecutor": "executor", "TaskSpec": "executor", "TaskTooLargeError": "executor",
    "summarise": "metrics", "TIME_WEIGHTED": "policies", "cold_start_table": "coldstart",
    "ALLOCATORS": "policies", "ALTERNATIVES": "policies", "Allocator": "policies",
    "Declared": "policies", "MaxSeen": "policies", "MaxThroughput": "policies",
    "MinWaste": "policies", "WholeMachine": "policies", "XBUCKET_FAMILY": "policies",
    "XBucket": "policies", "make_allocator": "policies", "Replay": "simulator",
    "ReplayConfig": "simulator", "replay": "simulator", "BucketingState": "state",
    "Defaults": "types", "Machine": "types", "RESOURCES": "types", "ResourceReport": "types",
    "Resources": "types", "Task": "types", "SHAPES": "workloads", "WORKFLOWS": "workloads",
    "read_reports": "workloads", "synthetic": "workloads", "staggered": "workloads",
    "XBucketExecutor": "parsl",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
