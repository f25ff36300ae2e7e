"""A Python app that reads data itself and starts multiprocessing workers (issue 52 fixture).

Parent: writes 4 shards of 512 KiB (setup region), reads every shard back in 4 KiB calls (its own
'scan' region), then 2 multiprocessing workers each hashes 2 shards (epoch regions, one step per
shard), then the parent reduces the workers' outputs (read back) into summary.txt."""
import hashlib
import multiprocessing as mp
import os
import sys

from dftracer.python import dft_fn, dftracer

DATA = sys.argv[1]
LOG = sys.argv[2]


def work(i):
    log = dftracer.initialize_log(logfile=LOG, data_dir=DATA, process_id=-1)
    with dft_fn("app", "epoch"):
        h = hashlib.sha256()
        for s in range(i, 4, 2):
            with dft_fn("app", "step"):
                with open(f"{DATA}/shard{s}.bin", "rb") as f:
                    while b := f.read(65536):
                        h.update(b)
        with open(f"{DATA}/out{i}.txt", "w") as f:
            f.write(h.hexdigest())
    log.finalize()
    return i


if __name__ == "__main__":
    log = dftracer.initialize_log(logfile=LOG, data_dir=DATA, process_id=-1)
    os.makedirs(DATA, exist_ok=True)
    with dft_fn("app", "setup"):
        for s in range(4):
            with open(f"{DATA}/shard{s}.bin", "wb") as f:
                f.write(os.urandom(1 << 19))
    with dft_fn("app", "scan"):  # the parent's own reading, 4 KiB at a time
        total = 0
        for s in range(4):
            with open(f"{DATA}/shard{s}.bin", "rb") as f:
                while b := f.read(4096):
                    total += len(b)
    ctx = mp.get_context("spawn")
    workers = [ctx.Process(target=work, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    with dft_fn("app", "reduce"):
        out = [open(f"{DATA}/out{i}.txt").read() for i in range(2)]
        with open(f"{DATA}/summary.txt", "w") as f:
            f.write(f"{total}\n" + "\n".join(out))
    log.finalize()
