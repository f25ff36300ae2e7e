"""The real-trace setting every CouchSurfer experiment shares: a seeded slice of the Alibaba
GPU 2023 pod and node lists (a seeded generator of their shape where ../shared/data lacks
them) and Lucid's measured pairs (the fitted model + residuals where absent)."""

from __future__ import annotations

GUARD = 0.05
#: pods sampled per scale (all usable pods at 1,000 GPUs and above)
TRACE_JOBS = {32: 1_000, 256: 3_000}
TRACE_LOAD = 0.9


def measurements_for(seed: int):
    """(Measurements or None, PairTruth, label): Lucid's pairs where present."""
    from schedlab.couchsurfer.interference import PairTruth, shared_measurements

    m = shared_measurements()
    if m is None:
        return None, PairTruth(), "fitted interference model + seeded residuals (no Lucid data)"
    return m, PairTruth(m), "Lucid's 1,388 measured pairs"


def trace_slice(gpus: int, seed: int, jobs: int | None = None, load: float = TRACE_LOAD):
    """(TraceLoad, truth, ran_with) for a ``gpus``-GPU slice of the Alibaba GPU 2023 trace."""
    from schedlab.couchsurfer.alibaba import load_alibaba, pods_to_jobs, select_cluster
    from schedlab.traces.alibaba_gpu2023 import shared_trace, synthetic_nodes, synthetic_pods

    m, truth, inter = measurements_for(seed)
    jobs = TRACE_JOBS.get(gpus) if jobs is None else jobs
    found = shared_trace()
    if found is not None:
        got = load_alibaba(found[1], found[0], gpus=gpus, seed=seed, jobs=jobs, sample=1.0,
                           load=load, measurements=m)
        source = "Alibaba GPU 2023 pod list + node list (real)"
    else:
        cluster = select_cluster(synthetic_nodes(1213, seed), gpus, seed)
        got = pods_to_jobs(synthetic_pods(8_000, seed), cluster, seed=seed, jobs=jobs,
                           load=load, measurements=m)
        source = "seeded generator shaped like Alibaba GPU 2023 (alibaba/ absent from the data dir)"
    ran_with = (f"{source}; {got.cluster.gpus} GPUs on {got.cluster.nodes} nodes; "
                f"{len(got.jobs)} pods sampled (seed {seed}), arrivals compressed to offered "
                f"load {load}; {inter}")
    return got, truth, ran_with


def data_kind(ran_with: str) -> str:
    """Result.data for a run described by ``ran_with`` (the sentences trace_slice and
    measurements_for write): a stand-in when the trace or Lucid's measurements were absent."""
    absent = ("(no ../shared/data)", "(no Lucid data)", "(no ../shared/data/colocation)")
    return "stand-in" if any(a in ran_with for a in absent) else "real"
