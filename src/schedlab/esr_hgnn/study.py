"""Library-level studies the experiments and the CLI share: one call per question asked.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) asks three things: how many reads and how much time
trie sampling saves on a CPU (measured); what the multi-channel unit, with and without
reusability-driven grouping, gains over CPU and GPU sampling (modelled); and what that buys end to
end with a HAN model (measured model time plus measured or modelled sampling time).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schedlab.esr_hgnn.engine import measure_samplers, sample_channels
from schedlab.esr_hgnn.graph import HeteroGraph
from schedlab.esr_hgnn.grouping import fanout_hop_cost, make_grouper, total_cost
from schedlab.esr_hgnn.hwmodel import (
    HardwareConfig,
    cpu_energy,
    cpu_model_seconds,
    estimate_unit,
    gpu_energy,
    gpu_seconds,
)
from schedlab.esr_hgnn.policies import SAMPLERS, make_sampler
from schedlab.esr_hgnn.trie import MetapathTrie


def compare_sampling(graph: HeteroGraph, metapaths: Sequence[str],
                     batches: Sequence[np.ndarray], fanouts: Sequence[int],
                     seed: int, repeats: int = 3) -> list[dict]:
    """Reads and measured CPU time per mini-batch of every registered sampler."""
    samplers = [make_sampler(name) for name in SAMPLERS]
    return [dict(sampler=m.sampler, reads=m.reads, hops=m.hops, cpu_seconds=m.seconds,
                 frontier_entries=m.frontier_entries)
            for m in measure_samplers(graph, samplers, metapaths, batches, fanouts, seed,
                                      repeats)]


def hardware_comparison(graph: HeteroGraph, metapaths: Sequence[str],
                        batches: Sequence[np.ndarray], fanouts: Sequence[int],
                        cfg: HardwareConfig, groupers: Sequence[str], seed: int,
                        repeats: int = 3) -> list[dict]:
    """One row per platform: measured CPU, the CPU cost model, modelled GPU, and the modelled
    unit per grouping.

    ``cpu-<sampler>`` rows are measured thread CPU time (it moves with the machine's load);
    ``cpu-<sampler>-model`` rows count the same batch's reads through
    :func:`hwmodel.cpu_model_seconds` (cache model x cited latencies), which does not.

    The unit is modelled with naive sampling per channel (multi-channel hardware without the trie)
    and with trie sampling under each grouper; GPU sampling is modelled as the naive paradigm that
    DGL/PyG run on GPUs.
    """
    rows = []
    cpu = {r["sampler"]: r for r in compare_sampling(graph, metapaths, batches, fanouts, seed,
                                                     repeats)}
    for name, r in cpu.items():
        rows.append(dict(platform=f"cpu-{name}", kind="measured", grouper="", reads=r["reads"],
                         seconds=r["cpu_seconds"], energy_j=cpu_energy(r["cpu_seconds"], cfg)))
    for name in SAMPLERS:  # the same work on the CPU cost model: counted, load-independent
        sampler = make_sampler(name)
        modelled = []
        for i, seeds in enumerate(batches):
            b = sampler.sample(graph, metapaths, seeds, fanouts, np.random.default_rng([seed, i]),
                               trace=True)
            modelled.append(cpu_model_seconds(b.trace, b.hops, cfg))
        seconds = float(np.median(modelled))
        rows.append(dict(platform=f"cpu-{name}-model", kind="modelled (counted accesses)",
                         grouper="", reads=cpu[name]["reads"], seconds=seconds,
                         energy_j=cpu_energy(seconds, cfg),
                         measured_over_model=cpu[name]["cpu_seconds"] / seconds))
    naive = cpu["naive"]
    gpu = gpu_seconds(naive["reads"], naive["hops"], cfg)
    rows.append(dict(platform="gpu-naive", kind="modelled", grouper="", reads=naive["reads"],
                     seconds=gpu, energy_j=gpu_energy(gpu, cfg)))
    hop_cost = fanout_hop_cost(fanouts)
    for sampler_name, grouper_names in (("naive", ["round-robin"]), ("trie", list(groupers))):
        for grouper_name in grouper_names:
            grouping = make_grouper(grouper_name).group(metapaths, cfg.channels, hop_cost, seed)
            estimates = [estimate_unit(sample_channels(graph, make_sampler(sampler_name),
                                                       grouping, seeds, fanouts, seed + i), cfg)
                         for i, seeds in enumerate(batches)]
            rows.append(dict(
                platform=f"esr-{sampler_name}", kind="modelled", grouper=grouper_name,
                reads=float(np.mean([e.reads for e in estimates])),
                seconds=float(np.median([e.seconds for e in estimates])),
                energy_j=float(np.mean([e.energy_j for e in estimates])),
                row_hit_rate=float(np.mean([e.row_hits / max(1, e.reads) for e in estimates])),
                expected_cost=total_cost(grouping, hop_cost),
                placement=cfg.placement, graph_copies=estimates[0].graph_copies,
                grouping=" | ".join(",".join(g) for g in grouping if g)))
    if "optimal" in groupers:  # the same unit with a private graph copy per sampling channel
        other = "replicated" if cfg.placement == "partitioned" else "partitioned"
        alt = cfg.model_copy(update={"placement": other})
        grouping = make_grouper("optimal").group(metapaths, cfg.channels, hop_cost, seed)
        estimates = [estimate_unit(sample_channels(graph, make_sampler("trie"), grouping, seeds,
                                                   fanouts, seed + i), alt)
                     for i, seeds in enumerate(batches)]
        rows.append(dict(platform=f"esr-trie-{other}", kind="modelled", grouper="optimal",
                         reads=float(np.mean([e.reads for e in estimates])),
                         seconds=float(np.median([e.seconds for e in estimates])),
                         energy_j=float(np.mean([e.energy_j for e in estimates])),
                         placement=other, graph_copies=estimates[0].graph_copies))
    return rows


def redundancy(metapaths: Sequence[str], fanouts: Sequence[int]) -> float:
    """Share of naive reads a single trie avoids, predicted from the metapaths' shapes alone."""
    from schedlab.esr_hgnn.trie import naive_weighted_cost

    cost = fanout_hop_cost(fanouts)
    naive = naive_weighted_cost(metapaths, cost)
    return 1.0 - MetapathTrie(metapaths).weighted_cost(cost) / naive


def end_to_end(graph: HeteroGraph, metapaths: Sequence[str], batches: Sequence[np.ndarray],
               fanouts: Sequence[int], cfg: HardwareConfig, seed: int,
               repeats: int = 3) -> list[dict]:
    """Mini-batch HAN inference time with each sampler: sampling + model, per batch (medians)."""
    import torch

    from schedlab.esr_hgnn.han import make_model, time_inference

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core, like the sampler, so thread CPU time is the whole cost
    try:
        return _end_to_end_rows(graph, metapaths, batches, fanouts, cfg, seed, repeats,
                                make_model, time_inference)
    finally:
        torch.set_num_threads(threads)


def _end_to_end_rows(graph, metapaths, batches, fanouts, cfg, seed, repeats, make_model,
                     time_inference) -> list[dict]:
    target = metapaths[0][0]
    model, features = make_model(metapaths, graph.node_counts[target], seed=seed)
    sampling = {r["sampler"]: r["cpu_seconds"]
                for r in compare_sampling(graph, metapaths, batches, fanouts, seed, repeats)}
    trie = make_sampler("trie")
    model_times = []
    for i, seeds in enumerate(batches):
        batch = trie.sample(graph, metapaths, seeds, fanouts, np.random.default_rng([seed, i]))
        model_times.append(time_inference(model, features, batch, repeats).seconds)
    model_s = float(np.median(model_times))
    hw = hardware_comparison(graph, metapaths, batches[:1], fanouts, cfg, ["optimal"], seed, 1)
    unit = next(r["seconds"] for r in hw if r["platform"] == "esr-trie")
    rows = []
    for name, seconds in (("cpu-naive", sampling["naive"]), ("cpu-trie", sampling["trie"]),
                          ("esr-trie (modelled)", unit)):
        rows.append(dict(pipeline=name, sampling_seconds=seconds, model_seconds=model_s,
                         total_seconds=seconds + model_s,
                         sampling_share=seconds / (seconds + model_s)))
    return rows
