"""A real split-serving harness: a "cloud" and an "edge" process, each serving a real
random-initialised transformers Llama on CPU with its own KV cache, joined by a shaped TCP link.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). This is the serving path the simulator models, run for real
at toy scale so the delay model's predictions can be checked against measured latency:

* each site is a separate OS process (``python -m schedlab.edge_llm.harness serve``) with one
  FIFO worker (prefill and decode jobs in arrival order) and its own ``DynamicCache`` per request;
* split modes (cloud prefill + edge decode, edge prefill + cloud decode) ship the *real* KV
  tensors (every layer's keys and values, as bytes) from the prefill process to the decode
  process over TCP; the decode process rebuilds the cache and continues from the first token;
* the link is shaped: with root and ``tc``, both processes run inside a network namespace the
  harness creates, whose loopback gets a ``tbf`` qdisc at the backhaul rate (netem is not in
  every kernel, so the one-way delay is applied by the receiver holding each message); without
  them a paced sender (token bucket in user space) stands in. The client (the "device") is
  ``wan_ms`` away from the cloud and next to the edge, in both directions;
* ``profile`` times each process's own prefill and decode steps; :class:`HarnessDelayModel`
  fits them (prefill a + b·T + c·T², decode a + b·context) and predicts TTFT/TPOT/E2E of every
  mode from those fits, the KV bytes, the link and the sites' booked queues, the same structure
  as ``delay.py``. ``HarnessRouter`` takes the mode with the lowest predicted E2E.

Needs the ``hf`` extra (torch + transformers); a missing one is a one-line error.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from queue import Queue

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError, MissingDependencyError

MODES = {
    "cloud": ("cloud", "cloud"),
    "split": ("cloud", "edge"),
    "mix": ("edge", "edge"),
    "disagg": ("edge", "cloud"),
}
#: seconds a replay waits for any reply from the sites before it fails (never hangs)
STALL_S = 120.0
HEADER = struct.Struct("!II")  # json length, payload length


# --- wire format ------------------------------------------------------------------------------
def send_msg(
    sock: socket.socket, header: dict, payload: bytes = b"", pace_bps: float | None = None
) -> None:
    """A length-prefixed JSON header and a raw payload; optionally paced at ``pace_bps``."""
    data = json.dumps(header).encode()
    blob = HEADER.pack(len(data), len(payload)) + data + payload
    if not pace_bps:
        sock.sendall(blob)
        return
    chunk = 16384
    start = time.monotonic()
    for i in range(0, len(blob), chunk):
        sock.sendall(blob[i : i + chunk])
        due = start + (i + chunk) * 8.0 / pace_bps
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts, left = [], n
    while left:
        part = sock.recv(min(left, 1 << 20))
        if not part:
            raise ConnectionError("peer closed the connection")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def recv_msg(sock: socket.socket) -> tuple[dict, bytes]:
    hlen, plen = HEADER.unpack(_recv_exact(sock, HEADER.size))
    header = json.loads(_recv_exact(sock, hlen))
    return header, _recv_exact(sock, plen) if plen else b""


# --- configuration ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TinyModel:
    """The served model: a random-initialised Llama (same seed in both processes, so a KV cache
    computed by one is valid in the other)."""

    layers: int = 2
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 512
    vocab: int = 1024
    seed: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x 4 bytes (float32 on CPU)."""
        return 2 * self.layers * self.kv_heads * (self.hidden // self.heads) * 4

    def validate(self) -> TinyModel:
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be a positive integer, got {value!r}", field=name)
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ConfigError("hidden must divide by heads and heads by kv_heads", field="heads")
        return self


@dataclass(frozen=True)
class LinkSpec:
    """The shaped network: backhaul between the sites and the device-cloud WAN hop."""

    backhaul_mbps: float = 200.0
    backhaul_ms: float = 5.0  # one-way propagation between the sites
    wan_ms: float = 20.0  # one-way device <-> cloud
    shaping: str = "auto"  # auto | tc | paced

    def validate(self) -> LinkSpec:
        for name in ("backhaul_mbps", "backhaul_ms", "wan_ms"):
            value = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
                or (name == "backhaul_mbps" and value <= 0)
            ):
                kind = "positive" if name == "backhaul_mbps" else "non-negative"
                raise ConfigError(f"must be a finite {kind} number, got {value!r}", field=name)
        if self.shaping not in ("auto", "tc", "paced"):
            raise ConfigError(f"must be auto, tc or paced, got {self.shaping!r}", field="shaping")
        return self


def _require_hf():
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "the split-serving harness needs the 'hf' extra: pip install 'schedlab[hf]'"
        ) from exc
    return torch, transformers


# --- the site process -------------------------------------------------------------------------
class _DelayedSender(threading.Thread):
    """Sends messages no earlier than their due time (the one-way delay), in due order."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.heap: list = []
        self.cv = threading.Condition()
        self.seq = 0

    def send(self, sock, header, payload=b"", delay=0.0, lock=None) -> None:
        with self.cv:
            self.seq += 1
            heapq.heappush(
                self.heap, (time.monotonic() + delay, self.seq, sock, header, payload, lock)
            )
            self.cv.notify()

    def run(self) -> None:
        while True:
            with self.cv:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    timeout = None if not self.heap else self.heap[0][0] - time.monotonic()
                    self.cv.wait(timeout)
                _, _, sock, header, payload, lock = heapq.heappop(self.heap)
            with contextlib.suppress(OSError), lock or contextlib.nullcontext():
                send_msg(sock, header, payload)


class Site:
    """One serving process: model, FIFO worker, KV export/import."""

    def __init__(
        self,
        role: str,
        model: TinyModel,
        threads: int,
        client_delay_s: float,
        link_delay_s: float,
        pace_bps: float | None,
    ) -> None:
        torch, transformers = _require_hf()
        self.torch = torch
        torch.set_num_threads(threads)
        torch.manual_seed(model.seed)
        cfg = transformers.LlamaConfig(
            vocab_size=model.vocab,
            hidden_size=model.hidden,
            intermediate_size=model.ffn,
            num_hidden_layers=model.layers,
            num_attention_heads=model.heads,
            num_key_value_heads=model.kv_heads,
            max_position_embeddings=8192,
        )
        self.net = transformers.LlamaForCausalLM(cfg).eval()
        self.cache_cls = transformers.DynamicCache
        self.role, self.spec = role, model
        self.client_delay = client_delay_s
        self.link_delay = link_delay_s
        self.pace = pace_bps
        self.jobs: Queue = Queue()
        self.sender = _DelayedSender()
        self.sender.start()
        self.expect: dict[int, tuple] = {}
        self.peer: socket.socket | None = None
        self.peer_lock = threading.Lock()
        self.kv_out: Queue = Queue()
        threading.Thread(target=self._ship, daemon=True).start()

    # model steps
    def _forward(self, ids, cache):
        with self.torch.inference_mode():
            out = self.net(input_ids=ids, cache=cache, use_cache=True)
        return int(out.logits[0, -1].argmax()), out["cache"]

    def prefill(self, tokens: list[int]):
        ids = self.torch.tensor([tokens], dtype=self.torch.long)
        return self._forward(ids, self.cache_cls())

    def decode(self, first: int, cache, steps: int) -> list[int]:
        """Greedy decoding of ``steps`` tokens after ``first``; returns all of them."""
        toks = [first]
        for _ in range(steps):
            tok, cache = self._forward(
                self.torch.tensor([[toks[-1]]], dtype=self.torch.long), cache
            )
            toks.append(tok)
        return toks

    def export_kv(self, cache) -> tuple[list, bytes]:
        """Every layer's keys and values as one contiguous float32 byte string."""
        shapes, blobs = [], []
        for layer in cache.layers:
            for t in (layer.keys, layer.values):
                arr = t.contiguous().numpy()
                shapes.append(list(arr.shape))
                blobs.append(arr.tobytes())
        return shapes, b"".join(blobs)

    def import_kv(self, shapes: list, payload: bytes):
        cache = self.cache_cls()
        offset, tensors = 0, []
        for shape in shapes:
            n = int(np.prod(shape)) * 4
            arr = np.frombuffer(payload, dtype=np.float32, count=n // 4, offset=offset)
            tensors.append(self.torch.from_numpy(arr.reshape(shape).copy()))
            offset += n
        for i in range(0, len(tensors), 2):
            cache.update(tensors[i], tensors[i + 1], i // 2)
        return cache

    # the FIFO worker: prefill jobs from clients, decode jobs from shipped KV
    def work(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                self._run(job)
            except Exception as exc:  # report to the client rather than dying silently
                conn, lock = job[-2], job[-1]
                self.sender.send(conn, dict(ev="error", rid=job[1], error=str(exc)), lock=lock)

    def _run(self, job) -> None:
        kind = job[0]
        if kind == "prefill":
            _, rid, tokens, max_new, local, conn, lock = job
            t0, c0 = time.monotonic(), time.thread_time()
            first, cache = self.prefill(tokens)
            t1, c1 = time.monotonic(), time.thread_time()
            self.sender.send(
                conn,
                dict(ev="first", rid=rid, token=first, t_start=t0, prefill_s=t1 - t0,
                     prefill_cpu=c1 - c0),
                delay=self.client_delay,
                lock=lock,
            )
            if local:
                toks = self.decode(first, cache, max_new - 1)
                t2, c2 = time.monotonic(), time.thread_time()
                self.sender.send(
                    conn,
                    dict(ev="done", rid=rid, decode_s=t2 - t1, decode_cpu=c2 - c1, tokens=toks),
                    delay=self.client_delay,
                    lock=lock,
                )
            else:
                shapes, payload = self.export_kv(cache)
                self.kv_out.put(
                    (
                        dict(
                            op="kv",
                            rid=rid,
                            token=first,
                            max_new=max_new,
                            shapes=shapes,
                            t_sent=time.monotonic(),
                        ),
                        payload,
                    )
                )
        else:  # decode after a KV import
            _, rid, header, payload, t_arrived, conn, lock = job
            cache = self.import_kv(header["shapes"], payload)
            t1, c1 = time.monotonic(), time.thread_time()
            toks = self.decode(header["token"], cache, header["max_new"] - 1)
            t2, c2 = time.monotonic(), time.thread_time()
            self.sender.send(
                conn,
                dict(
                    ev="done",
                    rid=rid,
                    decode_s=t2 - t1,
                    decode_cpu=c2 - c1,
                    tokens=toks,
                    kv_s=t_arrived - header["t_sent"],
                    wire_s=header.get("wire_s", 0.0),
                ),
                delay=self.client_delay,
                lock=lock,
            )

    def _ship(self) -> None:
        """KV transfers go out one at a time, FIFO (the serial link of the delay model)."""
        while True:
            header, payload = self.kv_out.get()
            with self.peer_lock:
                assert self.peer is not None, "no peer connected"
                header["t_wire"] = time.monotonic()  # handed to the socket
                send_msg(self.peer, header, payload, self.pace)

    def profile(self, lengths: list[int], contexts: list[int], repeats: int) -> dict:
        """Median wall time of a prefill per prompt length and a decode step per context, and
        the median CPU time of this thread over the same steps (what the step costs with the
        core to itself)."""
        rng = np.random.default_rng(1)
        pre, dec, pre_cpu, dec_cpu = [], [], [], []
        self.prefill(list(rng.integers(0, self.spec.vocab, 32)))  # warm up
        for n in lengths:
            times, cpu = [], []
            for _ in range(repeats):
                t0, c0 = time.monotonic(), time.thread_time()
                self.prefill(list(map(int, rng.integers(0, self.spec.vocab, n))))
                times.append(time.monotonic() - t0)
                cpu.append(time.thread_time() - c0)
            pre.append(float(np.median(times)))
            pre_cpu.append(float(np.median(cpu)))
        export, load = [], []
        for ctx in contexts:
            first, cache = self.prefill(list(map(int, rng.integers(0, self.spec.vocab, ctx))))
            ex, im = [], []
            for _ in range(repeats):  # a split mode's KV hand-off: export here, import there
                t0 = time.monotonic()
                shapes, payload = self.export_kv(cache)
                t1 = time.monotonic()
                self.import_kv(shapes, payload)
                ex.append(t1 - t0)
                im.append(time.monotonic() - t1)
            export.append(float(np.median(ex)))
            load.append(float(np.median(im)))
            steps = 8
            times, cpu = [], []
            for _ in range(repeats):
                t0, c0 = time.monotonic(), time.thread_time()
                self.decode(first, cache, steps)
                times.append((time.monotonic() - t0) / steps)
                cpu.append((time.thread_time() - c0) / steps)
                cache.crop(-steps)
            dec.append(float(np.median(times)))
            dec_cpu.append(float(np.median(cpu)))
        return dict(lengths=lengths, prefill_s=pre, contexts=contexts, decode_s=dec,
                    prefill_cpu=pre_cpu, decode_cpu=dec_cpu, export_s=export, import_s=load)


def serve(
    role: str,
    port: int,
    model: TinyModel,
    threads: int,
    client_delay_s: float,
    link_delay_s: float,
    pace_bps: float | None,
    ready: Path,
    cpu: int | None = None,
    nice: int = 0,
) -> None:
    """Run one site until killed: listen on 127.0.0.1:``port``; write ``ready`` when up.
    A site dies with the process that started it (PR_SET_PDEATHSIG), so a killed client leaves
    no server behind. ``cpu``: pin the process (and the threads torch starts later) to that
    core, so the two sites never share one."""
    _die_with_parent()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if nice:
        _raise_priority(nice)
    site = Site(role, model, threads, client_delay_s, link_delay_s, pace_bps)
    threading.Thread(target=site.work, daemon=True).start()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(8)
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.replace(ready)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_handle, args=(site, conn), daemon=True).start()


def _raise_priority(nice: int) -> None:
    """Run this site at ``nice`` against every other job on the machine. With the kernel's
    autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a nice value only
    ranks threads inside one session's group, and each session's group gets an equal share of
    a core, so the site starts its own session (its own group) and sets that group's nice; the
    threads' own nice covers kernels without autogroups. Threads started later inherit it."""
    with contextlib.suppress(OSError):
        os.setsid()
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text(str(nice))
    os.setpriority(os.PRIO_PROCESS, 0, nice)


def _die_with_parent() -> None:
    """SIGTERM this process when its parent exits (Linux); a no-op elsewhere."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent was already gone before prctl took effect
        raise SystemExit(1)


def _handle(site: Site, conn: socket.socket) -> None:
    lock = threading.Lock()
    last_kv = 0.0  # when the previous KV on this connection had fully arrived
    try:
        while True:
            header, payload = recv_msg(conn)
            op = header.get("op")
            if op == "run":
                # the request itself crosses the client's link (WAN for the cloud)
                job = (
                    "prefill",
                    header["rid"],
                    header["tokens"],
                    header["max_new"],
                    header["local"],
                    conn,
                    lock,
                )
                threading.Timer(site.client_delay, site.jobs.put, args=(job,)).start()
            elif op == "expect":
                site.expect[header["rid"]] = (conn, lock)
            elif op == "kv":
                arrived = time.monotonic()
                # time on the wire alone: from when the link was free for it (the previous
                # transfer in, or its hand-off to the socket) to the last byte in; the socket
                # buffer takes a transfer before the shaped link is free, so t_wire alone
                # would count queueing behind the previous one
                header["wire_s"] = arrived - max(header.get("t_wire", header["t_sent"]), last_kv)
                last_kv = arrived
                target = site.expect.pop(header["rid"])
                job = ("decode", header["rid"], header, payload, arrived + site.link_delay, *target)
                threading.Timer(site.link_delay, site.jobs.put, args=(job,)).start()
            elif op == "connect_peer":
                peer = socket.create_connection(("127.0.0.1", header["port"]))
                peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with site.peer_lock:
                    site.peer = peer
                with lock:
                    send_msg(conn, dict(ev="ok"))
            elif op == "profile":
                try:
                    reply = dict(
                        ev="profile",
                        **site.profile(header["lengths"], header["contexts"], header["repeats"]),
                    )
                except Exception as exc:  # reported, not a dead handler
                    reply = dict(ev="error", error=f"profile: {exc}")
                with lock:
                    send_msg(conn, reply)
            else:
                with lock:
                    send_msg(conn, dict(ev="error", error=f"unknown op {op!r}"))
    except (ConnectionError, OSError):
        conn.close()


# --- the delay model of the harness -----------------------------------------------------------
@dataclass
class StepFit:
    """Fitted step times of one site: prefill(T) = a + b·T + c·T², decode(ctx) = a + b·ctx,
    and a split mode's KV hand-off, export(T) and import(T) = a + b·T (zero when the profile
    has none)."""

    prefill: tuple[float, float, float]
    decode: tuple[float, float]
    profile: dict = field(default_factory=dict)
    export: tuple[float, float] = (0.0, 0.0)
    load: tuple[float, float] = (0.0, 0.0)

    @classmethod
    def fit(cls, profile: dict) -> StepFit:
        t = np.asarray(profile["lengths"], dtype=float)
        p = np.asarray(profile["prefill_s"], dtype=float)
        a = np.vstack([np.ones_like(t), t, t * t]).T
        coef = np.linalg.lstsq(a, p, rcond=None)[0]
        c = np.asarray(profile["contexts"], dtype=float)
        d = np.asarray(profile["decode_s"], dtype=float)
        lin = np.vstack([np.ones_like(c), c]).T
        dcoef = np.linalg.lstsq(lin, d, rcond=None)[0]

        def line(key: str) -> tuple[float, float]:
            if key not in profile:
                return (0.0, 0.0)
            a, b = np.linalg.lstsq(lin, np.asarray(profile[key], dtype=float), rcond=None)[0]
            return (float(a), max(0.0, float(b)))

        return cls(
            (float(coef[0]), float(coef[1]), max(0.0, float(coef[2]))),
            (float(dcoef[0]), max(0.0, float(dcoef[1]))),
            profile,
            line("export_s"),
            line("import_s"),
        )

    def prefill_s(self, tokens: int) -> float:
        a, b, c = self.prefill
        return max(1e-4, a + b * tokens + c * tokens * tokens)

    def decode_s(self, tokens: int, out: int) -> float:
        a, b = self.decode
        return (out - 1) * (a + b * (tokens + out / 2.0))

    def export_s(self, tokens: int) -> float:
        """Copying a prompt's KV cache out of the model (the prefill site's worker)."""
        return max(0.0, self.export[0] + self.export[1] * tokens)

    def import_s(self, tokens: int) -> float:
        """Rebuilding a shipped KV cache before decoding (the decode site's worker)."""
        return max(0.0, self.load[0] + self.load[1] * tokens)


@dataclass(frozen=True)
class Prediction:
    ttft: float
    e2e: float
    tpot: float
    prefill_end: float
    decode_start: float
    decode_end: float
    link_end: float
    prefill_start_len: float = 0.0  # the prefill's own predicted duration
    handoff: float = 0.0  # the prefill site's KV export after the prefill (split modes)
    rebuild: float = 0.0  # the decode site's KV import before the decode (split modes)


class HarnessDelayModel:
    """Predicts every mode's TTFT/TPOT/E2E from the fitted steps, the link and the queues."""

    def __init__(self, fits: dict[str, StepFit], model: TinyModel, link: LinkSpec) -> None:
        self.fits, self.model, self.link = fits, model, link
        self.free = {"cloud": 0.0, "edge": 0.0}
        self.link_free = 0.0
        self.queue: dict[str, dict[int, float]] = {"cloud": {}, "edge": {}}
        # online correction of the profiled fits: EWMA of measured / fitted step time per
        # (site, phase), updated from every finished request (causal: a prediction only uses
        # requests that completed before it was made)
        self.scale = {(s, ph): 1.0 for s in ("cloud", "edge") for ph in ("prefill", "decode")}
        # and of the link: measured wire time of a KV transfer / bytes at the nominal rate (a
        # shaped TCP link delivers less than its rate: headers, acks, the token bucket)
        self.link_scale = 1.0
        self.adapt = 0.2

    def observe(self, site: str, phase: str, measured: float, tokens: int, out: int) -> None:
        fit = self.fits[site]
        base = fit.prefill_s(tokens) if phase == "prefill" else fit.decode_s(tokens, out)
        if base > 0 and measured > 0:
            key = (site, phase)
            self.scale[key] = (1 - self.adapt) * self.scale[key] + self.adapt * measured / base

    def observe_link(self, wire_s: float, tokens: int) -> None:
        base = self.kv_s(tokens) / self.link_scale
        if base > 0 and wire_s > 0:
            self.link_scale = (1 - self.adapt) * self.link_scale + self.adapt * wire_s / base

    def delay(self, site: str) -> float:
        return self.link.wan_ms / 1e3 if site == "cloud" else 0.0

    def kv_s(self, tokens: int) -> float:
        nbytes = self.model.kv_bytes_per_token * tokens
        return nbytes * 8.0 / (self.link.backhaul_mbps * 1e6) * self.link_scale

    def predict(self, mode: str, tokens: int, out: int, now: float) -> Prediction:
        p, d = MODES[mode]
        start = max(now + self.delay(p), self.free[p])
        end = start + self.fits[p].prefill_s(tokens) * self.scale[(p, "prefill")]
        ttft = end + self.delay(p) - now
        link_end = self.link_free
        handoff = rebuild = 0.0
        if p == d:
            dstart = end
        else:  # the KV is copied out (p's worker), shipped, and rebuilt (d's worker)
            handoff = self.fits[p].export_s(tokens)
            rebuild = self.fits[d].import_s(tokens)
            link_end = max(end + handoff, self.link_free) + self.kv_s(tokens)
            dstart = max(link_end + self.link.backhaul_ms / 1e3, self.free[d]) + rebuild
        dend = dstart + self.fits[d].decode_s(tokens, out) * self.scale[(d, "decode")]
        e2e = dend + self.delay(d) - now
        return Prediction(
            ttft, e2e, (dend - dstart) / max(1, out - 1), end, dstart, dend, link_end,
            end - start, handoff, rebuild,
        )

    def book(self, mode: str, pred: Prediction, rid: int = -1) -> None:
        """Reserve the predicted work on the sites and the link (the client's queue state)."""
        p, d = MODES[mode]
        if p == d:
            self.free[p] = pred.decode_end
            self.queue[p][rid] = pred.decode_end - pred.prefill_end + self.prefill_part(pred)
        else:
            self.free[p] = pred.prefill_end + pred.handoff
            self.link_free = pred.link_end
            self.free[d] = pred.decode_end
            self.queue[p][rid] = self.prefill_part(pred) + pred.handoff
            self.queue[d][rid] = pred.decode_end - pred.decode_start + pred.rebuild

    @staticmethod
    def prefill_part(pred: Prediction) -> float:
        return pred.prefill_start_len

    def finished(self, site: str, rid: int, now: float, left: float = 0.0) -> None:
        """Live queue state: when a site reports a job done, its booked future is the
        predicted work of the jobs still outstanding there, from now (``left``: what the
        reported job still owes the site, a split prefill's KV export)."""
        if left > 0:
            self.queue[site][rid] = left
        else:
            self.queue[site].pop(rid, None)
        self.free[site] = now + sum(self.queue[site].values())


class HarnessRouter:
    """Per request, the mode with the lowest predicted E2E given the live queues."""

    def __init__(self, modes=tuple(MODES), name: str = "online") -> None:
        self.modes, self.name = modes, name

    def choose(self, model: HarnessDelayModel, tokens: int, out: int, now: float):
        preds = {m: model.predict(m, tokens, out, now) for m in self.modes}
        mode = min(preds, key=lambda m: preds[m].e2e)
        return mode, preds[mode]


# --- the client / orchestrator ----------------------------------------------------------------
def _netns_ok() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


def pin_plan(threads: dict[str, int]) -> dict[str, int]:
    """One core of this process's CPU set per site (cloud the first, edge the second): the two
    sites never run on the same core. Each site must run one thread (a site pinned to one core
    with more threads would contend with itself). Too few cores is a one-line error."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise ConfigError(
            f"pinning needs 2 CPUs, this process may use {len(cores)} (--no-pin: unpinned)",
            field="pin",
        )
    for role, n in threads.items():
        if n != 1:
            raise ConfigError(f"a pinned site runs 1 thread, {role} asks for {n}", field="pin")
    return {"cloud": cores[0], "edge": cores[1]}


class Harness:
    """Starts the two site processes (inside a shaped network namespace when possible),
    profiles them, and replays requests through a router, measuring TTFT/TPOT/E2E."""

    def __init__(
        self,
        model: TinyModel | None = None,
        link: LinkSpec | None = None,
        threads: dict[str, int] | None = None,
        workdir: Path | None = None,
        pin: bool = False,
        nice: int = 0,
    ) -> None:
        self.model = (model or TinyModel()).validate()
        self.link = (link or LinkSpec()).validate()
        self.threads = threads or {"cloud": 1, "edge": 1}
        self.cpus = pin_plan(self.threads) if pin else {}
        if not -20 <= nice <= 19:
            raise ConfigError(f"must be in [-20, 19], got {nice}", field="nice")
        if nice < 0 and os.geteuid() != 0:
            raise ConfigError(f"a raised priority ({nice}) needs root", field="nice")
        # the sites and this client run at ``nice``: a negative value lets them take their
        # cores from other tenants' jobs (the simulator's sites never share a core)
        self.nice = nice
        self._client_nice: int | None = None
        self._own_workdir = workdir is None  # a temporary one is removed on close
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="edge_llm_harness_"))
        self.ns: str | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.conns: dict[str, socket.socket] = {}
        self.shaping = "paced"
        self.fits: dict[str, StepFit] = {}
        self.cpu_fits: dict[str, StepFit] = {}

    # lifecycle
    def __enter__(self) -> Harness:
        _require_hf()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.nice:
            self._client_nice = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, 0, self.nice)
        want = self.link.shaping
        if want in ("auto", "tc") and _netns_ok():
            try:
                self._make_netns()
                self.shaping = "tc"
            except (subprocess.CalledProcessError, OSError) as exc:
                self._drop_netns()
                if want == "tc":
                    raise ConfigError(f"tc shaping unavailable: {exc}", field="shaping") from exc
        elif want == "tc":
            raise ConfigError("tc shaping needs root, ip and tc", field="shaping")
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make_netns(self) -> None:
        self.ns = f"schedlab-{uuid.uuid4().hex[:8]}"
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
        run("ip", "netns", "add", self.ns)
        run("ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "mtu", "1500")
        run("ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "up")
        rate = f"{self.link.backhaul_mbps:g}mbit"
        burst = max(3000, int(self.link.backhaul_mbps * 1e6 / 8 / 1000))  # ~1 ms of bytes
        run(
            "ip",
            "netns",
            "exec",
            self.ns,
            "tc",
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            str(burst),
            "limit",
            str(8 << 20),
        )

    def _drop_netns(self) -> None:
        if self.ns:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
            self.ns = None

    def _start(self) -> None:
        ports = {"cloud": _free_port(), "edge": _free_port()}
        pace = None if self.shaping == "tc" else self.link.backhaul_mbps * 1e6
        for role in ("cloud", "edge"):
            ready = self.workdir / f"{role}.ready"
            cmd = [
                sys.executable,
                "-m",
                "schedlab.edge_llm.harness",
                "serve",
                role,
                str(ports[role]),
                json.dumps(asdict(self.model)),
                str(self.threads[role]),
                str(self.link.wan_ms / 1e3 if role == "cloud" else 0.0),
                str(self.link.backhaul_ms / 1e3),
                str(pace or 0),
                str(ready),
                str(self.cpus.get(role, -1)),
                str(self.nice),
            ]
            if self.ns:
                cmd = ["ip", "netns", "exec", self.ns, *cmd]
            log = open(self.workdir / f"{role}.log", "w")  # noqa: SIM115
            self.procs[role] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        for role, proc in self.procs.items():
            ready = self.workdir / f"{role}.ready"
            while not ready.exists():
                if proc.poll() is not None:
                    log = (self.workdir / f"{role}.log").read_text()[-800:]
                    raise ConfigError(
                        f"{role} site exited ({proc.returncode}): {log}", field="harness"
                    )
                if time.monotonic() > deadline:
                    raise ConfigError(f"{role} site did not start in 120 s", field="harness")
                time.sleep(0.05)
        for role in ("cloud", "edge"):
            self.conns[role] = self._connect(ports[role])
        for role, peer in (("cloud", "edge"), ("edge", "cloud")):
            send_msg(self.conns[role], dict(op="connect_peer", port=ports[peer]))
            recv_msg(self.conns[role])
        if self.ns:
            # every connection is made: drop the namespace's name now, so the namespace
            # (and its qdisc) lives exactly as long as the site processes in it, and a killed
            # client leaves no /run/netns entry behind (its sites die with it)
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def _connect(self, port: int) -> socket.socket:
        if self.ns is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        else:
            # the client enters the namespace through a socket made inside it
            sock = _socket_in_netns(self.ns, port)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(300)
        return sock

    def close(self) -> None:
        for sock in self.conns.values():
            with contextlib.suppress(OSError):
                sock.close()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self._drop_netns()
        if self._client_nice is not None:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, 0, self._client_nice)
            self._client_nice = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # measurement
    def profile(
        self, lengths=(16, 64, 128, 256, 384, 512), contexts=(16, 128, 256, 512), repeats: int = 3
    ) -> dict[str, StepFit]:
        if getattr(self, "_queue", None) is not None:
            raise ConfigError("profile before the first replay", field="harness")
        for role, sock in self.conns.items():  # one site at a time: no mutual contention
            send_msg(
                sock,
                dict(op="profile", lengths=list(lengths), contexts=list(contexts), repeats=repeats),
            )
            header, _ = recv_msg(sock)
            if header.get("ev") != "profile":
                raise ConfigError(f"{role} profile failed: {header}", field="harness")
            self.fits[role] = StepFit.fit(header)
            if "prefill_cpu" in header:  # the same steps in CPU seconds (contention-free)
                self.cpu_fits[role] = StepFit.fit(
                    dict(header, prefill_s=header["prefill_cpu"], decode_s=header["decode_cpu"]))
        return self.fits

    def replay(
        self, requests: list[tuple[float, int, int]], router: HarnessRouter | str, seed: int = 0
    ) -> list[dict]:
        """Send (arrival offset s, prompt tokens, output tokens) requests at their times;
        ``router`` is a mode name (fixed) or a :class:`HarnessRouter`. Returns one row per
        request with the chosen mode, measured and predicted TTFT/TPOT/E2E."""
        if not self.fits:
            self.profile()
        for k, (arr, tokens, out) in enumerate(requests):
            if not (math.isfinite(arr) and arr >= 0 and tokens >= 1 and out >= 2):
                raise BadInputError(
                    f"request {k}: needs arrival >= 0, prompt >= 1 and "
                    f"output >= 2 tokens, got {(arr, tokens, out)}",
                    field="requests",
                )
        if isinstance(router, str):
            if router not in MODES:
                raise BadInputError(
                    f"unknown mode {router!r}; valid: {', '.join(MODES)}", field="mode"
                )
            router = HarnessRouter((router,), router)
        model = HarnessDelayModel(self.fits, self.model, self.link)
        rng = np.random.default_rng(seed)
        rows: dict[int, dict] = {}
        events = self._events()
        t0 = time.monotonic() + 0.05
        pending = 0
        for rid, (arr, tokens, out) in enumerate(sorted(requests)):
            while True:  # consume events until it is time to send the next request
                wait = t0 + arr - time.monotonic()
                if wait <= 0:
                    break
                pending -= self._drain(events, rows, model, wait)
            now = time.monotonic()
            mode, pred = router.choose(model, tokens, out, now)
            model.book(mode, pred, rid)
            p, d = MODES[mode]
            if p != d:
                self._send(d, dict(op="expect", rid=rid))
            ids = list(map(int, rng.integers(0, self.model.vocab, tokens)))
            rows[rid] = dict(
                rid=rid,
                mode=mode,
                input_len=tokens,
                output_len=out,
                sent=now,
                pred_ttft=pred.ttft,
                pred_e2e=pred.e2e,
                pred_tpot=pred.tpot,
                handoff=pred.handoff,
                sites=(p, d),
                kv_bytes=self.model.kv_bytes_per_token * tokens if p != d else 0,
            )
            self._send(p, dict(op="run", rid=rid, tokens=ids, max_new=out, local=p == d))
            pending += 1
        while pending > 0:
            pending -= self._drain(events, rows, model, STALL_S, final=True)
        return [self._row(r) for r in sorted(rows.values(), key=lambda r: r["rid"])]

    def _events(self) -> Queue:
        """One reader thread per site connection for the harness's life (after profiling)."""
        if getattr(self, "_queue", None) is None:
            self._queue: Queue = Queue()
            for role, sock in self.conns.items():
                threading.Thread(
                    target=_reader, args=(role, sock, self._queue), daemon=True
                ).start()
        return self._queue

    def _drain(
        self, events: Queue, rows: dict, model: HarnessDelayModel, wait: float, final: bool = False
    ) -> int:
        from queue import Empty

        done = 0
        deadline = time.monotonic() + max(wait, 0.0)
        while True:  # short polls, so a site that died is noticed within a second
            try:
                left = deadline - time.monotonic()
                role, header, t = events.get(timeout=max(0.0, min(1.0, left)))
                break
            except Empty:
                self._check_sites()
                if time.monotonic() >= deadline:
                    if final:  # nothing came back for STALL_S: fail rather than hang
                        raise ConfigError(
                            f"no reply from the sites in {wait:.0f} s", field="harness"
                        ) from None
                    return 0
        if header.get("ev") == "error":
            raise ConfigError(f"{role} site failed: {header.get('error')}", field="harness")
        row = rows[header["rid"]]
        p, d = row["sites"]
        if header["ev"] == "first":
            row["first"] = t
            row["prefill_s"] = header["prefill_s"]
            row["prefill_cpu"] = header.get("prefill_cpu", header["prefill_s"])
            model.observe(p, "prefill", header["prefill_s"], row["input_len"], row["output_len"])
            if p != d:
                model.finished(p, header["rid"], t, left=row["handoff"])
        elif header["ev"] == "done":
            row["done"] = t
            row["kv_s"] = header.get("kv_s", 0.0)
            row["decode_s"] = header["decode_s"]
            row["decode_cpu"] = header.get("decode_cpu", header["decode_s"])
            row["tokens"] = header.get("tokens", [])
            model.observe(d, "decode", header["decode_s"], row["input_len"], row["output_len"])
            if header.get("wire_s", 0.0) > 0:
                model.observe_link(header["wire_s"], row["input_len"])
            row["wire_s"] = header.get("wire_s", 0.0)
            model.finished(d, header["rid"], t)
            if p != d:  # its KV export on p is long over (the KV reached d)
                model.queue[p].pop(header["rid"], None)
            done = 1
        return done

    def _check_sites(self) -> None:
        for role, proc in self.procs.items():
            if proc.poll() is not None:
                raise ConfigError(
                    f"{role} site exited ({proc.returncode}) mid-replay", field="harness"
                )

    def _send(self, role: str, header: dict) -> None:
        try:
            send_msg(self.conns[role], header)
        except OSError as exc:
            raise ConfigError(f"{role} site connection lost: {exc}", field="harness") from None

    @staticmethod
    def _row(r: dict) -> dict:
        ttft = r["first"] - r["sent"]
        e2e = r["done"] - r["sent"]
        # time per output token at the decoding site (in split modes the first token and the
        # rest come from different sites, so (e2e - ttft) / (out - 1) is not a decode rate)
        tpot = r["decode_s"] / max(1, r["output_len"] - 1)
        return dict(
            rid=r["rid"],
            mode=r["mode"],
            input_len=r["input_len"],
            output_len=r["output_len"],
            ttft=ttft,
            tpot=tpot,
            e2e=e2e,
            pred_ttft=r["pred_ttft"],
            pred_tpot=r["pred_tpot"],
            pred_e2e=r["pred_e2e"],
            prefill_s=r["prefill_s"],
            decode_s=r["decode_s"],
            # CPU seconds the site's thread got while the step ran: wall / CPU > 1 is time the
            # core spent on something else (the other site, the client, other tenants)
            prefill_cpu=r["prefill_cpu"],
            decode_cpu=r["decode_cpu"],
            kv_s=r.get("kv_s", 0.0),
            wire_s=r.get("wire_s", 0.0),
            kv_bytes=r["kv_bytes"],
            tokens=r.get("tokens", []),
        )


def _reader(role: str, sock: socket.socket, events: Queue) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while True:
            header, _ = recv_msg(sock)
            events.put((role, header, time.monotonic()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _setns(fd: int) -> None:
    """setns(fd, CLONE_NEWNET) for the calling thread (os.setns is Python >= 3.12)."""
    if hasattr(os, "setns"):
        os.setns(fd, os.CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _socket_in_netns(ns: str, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:port inside namespace ``ns``, made by a thread that
    enters the namespace (setns affects only the calling thread) and hands the socket back."""
    result: dict = {}

    def enter() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            deadline = time.monotonic() + 30
            while True:
                try:
                    result["sock"] = socket.create_connection(("127.0.0.1", port), timeout=60)
                    return
                except ConnectionRefusedError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        except BaseException as exc:  # handed to the caller
            result["error"] = exc

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    if "error" in result:
        raise ConfigError(f"cannot connect into netns {ns}: {result['error']}", field="harness")
    return result["sock"]


def main(argv: list[str]) -> None:
    if len(argv) not in (9, 11) or argv[0] != "serve":
        raise SystemExit(
            "usage: python -m schedlab.edge_llm.harness serve ROLE PORT MODEL_JSON "
            "THREADS CLIENT_DELAY_S LINK_DELAY_S PACE_BPS READY_FILE [CPU NICE]"
        )
    _, role, port, model, threads, cdelay, ldelay, pace, ready = argv[:9]
    cpu = int(argv[9]) if len(argv) == 11 and int(argv[9]) >= 0 else None
    nice = int(argv[10]) if len(argv) == 11 else 0
    serve(
        role,
        int(port),
        TinyModel(**json.loads(model)),
        int(threads),
        float(cdelay),
        float(ldelay),
        float(pace) or None,
        Path(ready),
        cpu,
        nice,
    )


if __name__ == "__main__":
    main(sys.argv[1:])


# --- the headline experiment on the harness ---------------------------------------------------
def stream(
    n: int, rate: float, seed: int, prompt=(32, 480), output=(8, 40)
) -> list[tuple[float, int, int]]:
    """Poisson arrivals with uniform prompt/output lengths (seeded)."""
    if n < 1 or not (math.isfinite(rate) and rate > 0):
        raise BadInputError(
            f"needs n >= 1 and a positive rate, got n={n}, rate={rate}", field="requests"
        )
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n)) - 1.0 / rate
    return [
        (float(max(0.0, a)), int(rng.integers(*prompt)), int(rng.integers(*output)))
        for a in arrivals
    ]


def error_table(rows: list[dict]) -> dict[str, float]:
    """Mean absolute relative error (%) of predicted vs measured TTFT, TPOT and E2E, and the
    error of the mean E2E (what a router comparing modes relies on)."""
    out = {}
    for key in ("ttft", "tpot", "e2e"):
        m = np.array([r[key] for r in rows])
        p = np.array([r[f"pred_{key}"] for r in rows])
        out[f"{key}_mape"] = float(100.0 * np.mean(np.abs(p - m) / m))
    m = np.array([r["e2e"] for r in rows])
    p = np.array([r["pred_e2e"] for r in rows])
    out["mean_e2e_err"] = float(100.0 * (p.mean() - m.mean()) / m.mean())
    return out


def step_cpu_error(rows: list[dict], cpu_fits: dict[str, StepFit]) -> dict[str, float]:
    """The profile's step fits against the replay's steps, both in the site thread's CPU
    seconds (MAPE, %): the fits' error with time-sharing of the core taken out. What is left is
    how differently a step runs in the replay (cold caches after idle gaps, a busy hyperthread
    sibling) than in the back-to-back profile; the delay model's EWMA correction absorbs it."""
    if set(cpu_fits) != {"cloud", "edge"}:
        return {}
    pre, dec = [], []
    for r in rows:
        p, d = MODES[r["mode"]]
        if r["prefill_cpu"] > 0:
            pre.append(abs(cpu_fits[p].prefill_s(r["input_len"]) - r["prefill_cpu"])
                       / r["prefill_cpu"])
        if r["decode_cpu"] > 0:
            fit = cpu_fits[d].decode_s(r["input_len"], r["output_len"])
            dec.append(abs(fit - r["decode_cpu"]) / r["decode_cpu"])
    return dict(prefill_cpu_mape=100.0 * float(np.mean(pre)) if pre else float("nan"),
                decode_cpu_mape=100.0 * float(np.mean(dec)) if dec else float("nan"))


def cpu_share(rows: list[dict]) -> float:
    """CPU seconds the sites' compute threads got / wall seconds their steps took (1.0: each
    step had its core to itself; 0.5: half of its wall time went to other work)."""
    cpu = sum(r["prefill_cpu"] + r["decode_cpu"] for r in rows)
    wall = sum(r["prefill_s"] + r["decode_s"] for r in rows)
    return float(cpu / wall) if wall > 0 else 1.0


def headline(
    n: int = 24,
    rate: float = 12.0,
    seed: int = 0,
    link: LinkSpec | None = None,
    model: TinyModel | None = None,
    policies=("cloud", "split", "mix", "disagg", "online"),
    harness: Harness | None = None,
) -> list[dict]:
    """Every fixed mode and the online router on the same request stream, measured on the
    real two-process harness. One summary row per policy (measured means and the delay
    model's prediction errors); the per-request rows are under ``rows``."""
    reqs = stream(n, rate, seed)
    own = harness is None
    h = harness or Harness(model, link)
    if own:
        h.__enter__()
    try:
        if not h.fits:
            h.profile()
        out = []
        for policy in policies:
            router = HarnessRouter(name="online") if policy == "online" else policy
            rows = h.replay(reqs, router, seed)
            e2e = np.array([r["e2e"] for r in rows])
            counts = {m: sum(r["mode"] == m for r in rows) for m in MODES}
            out.append(
                dict(
                    policy=policy,
                    requests=len(rows),
                    shaping=h.shaping,
                    mean_e2e=float(e2e.mean()),
                    p95_e2e=float(np.percentile(e2e, 95)),
                    mean_ttft=float(np.mean([r["ttft"] for r in rows])),
                    mean_tpot=float(np.mean([r["tpot"] for r in rows])),
                    mean_kv_s=float(np.mean([r["kv_s"] for r in rows])),
                    cpu_share=cpu_share(rows),
                    **step_cpu_error(rows, h.cpu_fits),
                    **{f"n_{m}": c for m, c in counts.items()},
                    **error_table(rows),
                    rows=rows,
                )
            )
        return out
    finally:
        if own:
            h.close()


def _ci95(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t interval (0 for a single value)."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return float(arr.mean()), 0.0
    from scipy import stats

    half = stats.t.ppf(0.975, arr.size - 1) * arr.std(ddof=1) / math.sqrt(arr.size)
    return float(arr.mean()), float(half)


def repeated(
    repeats: int = 3,
    n: int = 30,
    rate: float = 4.0,
    link: LinkSpec | None = None,
    model: TinyModel | None = None,
    policies=("cloud", "split", "mix", "disagg", "online"),
    pin: bool = True,
    harness: Harness | None = None,
    nice: int = 0,
) -> dict:
    """The harness headline ``repeats`` times (seeds 0..repeats-1, each its own stream; the
    policy order rotates every repeat so a drift in machine load does not always hit the same
    policy), on one pair of site processes pinned to their own cores (``pin``).

    Returns ``runs`` (one summary row per repeat and policy, with the load average around it)
    and ``per_mode``: per policy the mean and 95% CI over repeats of the measured mean E2E, the
    error of the predicted mean E2E and the per-request E2E/TTFT/TPOT MAPE; and ``online``: its
    reduction of mean E2E vs the best fixed mode of the same repeat."""
    if repeats < 1:
        raise BadInputError(f"needs repeats >= 1, got {repeats}", field="repeats")
    own = harness is None
    h = harness or Harness(model, link, pin=pin, nice=nice)
    if own:
        h.__enter__()
    runs: list[dict] = []
    try:
        if not h.fits:
            h.profile()
        for k in range(repeats):
            order = tuple(policies[(k + j) % len(policies)] for j in range(len(policies)))
            load = os.getloadavg()[0]
            for row in headline(n, rate, seed=k, policies=order, harness=h):
                row = {key: v for key, v in row.items() if key != "rows"}
                runs.append(dict(repeat=k, seed=k, load_before=load, **row))
    finally:
        if own:
            h.close()
    per_mode = {}
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        per_mode[policy] = {
            key: _ci95([r[key] for r in mine])
            for key in ("mean_e2e", "mean_e2e_err", "e2e_mape", "ttft_mape", "tpot_mape",
                        "cpu_share", "prefill_cpu_mape", "decode_cpu_mape")
            if all(key in r for r in mine)
        }
    out = dict(repeats=repeats, n=n, rate=rate, pinned=dict(h.cpus), nice=h.nice,
               shaping=h.shaping,
               cpus=len(os.sched_getaffinity(0)), runs=runs, per_mode=per_mode)
    fixed = [p for p in policies if p in MODES]
    if "online" in policies and fixed:
        gains = []
        for k in range(repeats):
            mean = {r["policy"]: r["mean_e2e"] for r in runs if r["repeat"] == k}
            best = min(mean[p] for p in fixed)
            gains.append(100.0 * (best - mean["online"]) / best)
        out["online"] = dict(gain_vs_best_fixed=gains, mean_ci=_ci95(gains),
                             wins=sum(g >= 0 for g in gains))
    return out
