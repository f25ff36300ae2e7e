"""``schedlab iflux ...``: map intents, run a command with them, Slurm hooks, benchmarks.

Paper: IFlux (../shared/papers/10-iflux.md). Every command is one library call; ``--json``
prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import BadInputError

app = typer.Typer(help="IFlux: intent-driven I/O accelerator allocation for HPC jobs.",
                  no_args_is_help=True, add_completion=False)

CAPACITY_HELP = "Free space per tier, e.g. --capacity ramdisk=2GiB (repeatable)."


def _capacity(items: list[str] | None):
    from schedlab.iflux.intents import parse_size
    from schedlab.iflux.policies import DEFAULT_CAPACITY
    from schedlab.iflux.rules import Tier

    capacity = dict(DEFAULT_CAPACITY)
    for item in items or []:
        name, sep, size = item.partition("=")
        try:
            capacity[Tier(name)] = parse_size(size)
        except ValueError as exc:
            raise BadInputError(f"expected TIER=SIZE with TIER one of "
                                f"{', '.join(t.value for t in Tier)}; got {item!r} ({exc})",
                                field="--capacity") from None
        if not sep:
            raise BadInputError(f"expected TIER=SIZE, got {item!r}", field="--capacity")
    return capacity


def _site(site: Path | None) -> Path:
    import os

    from schedlab.iflux.storage import SITE_ENV

    path = site or (Path(os.environ[SITE_ENV]) if os.environ.get(SITE_ENV) else None)
    if path is None or not path.is_file():
        raise BadInputError("no site file; create one with `schedlab iflux site DIR` and pass "
                            f"--site DIR/site.json (or set ${SITE_ENV})", field="--site")
    return path


@app.command("map")
@handle_errors
def map_command(
    jobspec: Path = typer.Argument(..., help="Flux jobspec (.json/.yaml) or Slurm script."),
    mapper: str = typer.Option("iflux", "--mapper", help="iflux|iflux-interp|pfs|manual-nvme|"
                               "manual-tmpfs"),
    capacity: list[str] = typer.Option(None, "--capacity", help=CAPACITY_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Print the allocation IFlux would make for a job's intents (nothing is deployed)."""
    from schedlab.iflux.engine import decide

    decision = decide(jobspec, mapper, _capacity(capacity))
    doc = dict(decide_s=decision.seconds, **decision.allocation.to_dict())
    if json_out:
        emit_json(doc)
        return
    table = Table("path", "tier", "software", "fallbacks", "size", title=f"{mapper}: {jobspec}")
    for p in doc["placements"]:
        table.add_row(p["path"], p["tier"], ",".join(p["software"]) or "-",
                      " > ".join(p["chain"]), f"{p['size'] / 2**20:.1f} MiB")
    out_console.print(table)
    out_console.print(f"decided in {decision.seconds * 1e3:.2f} ms")


@app.command(context_settings={"allow_interspersed_args": False})
@handle_errors
def run(
    command: list[str] = typer.Argument(..., help="The job: everything after --."),
    intents: Path = typer.Option(..., "--intents", help="Jobspec, intent list or script."),
    site: Path = typer.Option(None, "--site", help="site.json (default: $IFLUX_SITE)."),
    mapper: str = typer.Option("iflux", "--mapper"),
    capacity: list[str] = typer.Option(None, "--capacity", help=CAPACITY_HELP),
    report: Path = typer.Option(None, "--report", help="Also write the report JSON here."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Deploy the intents' accelerators, run COMMAND transparently, flush and tear down."""
    from schedlab.iflux.deploy import write_report
    from schedlab.iflux.engine import run as run_job

    site_path = _site(site)
    err_console.print(f"iflux: running {' '.join(command)}")
    result = run_job(intents, command, site_path, mapper, _capacity(capacity))
    if report is not None:
        write_report(result, report)
    doc = result.to_dict()
    if json_out:
        emit_json(doc)
    else:
        for p in doc["placements"]:
            out_console.print(f"{p['path']} -> {p['tier']} ({','.join(p['software']) or '-'})")
        out_console.print(f"job rc={result.returncode} transparent={result.transparent} "
                          f"stage-in {result.stage_in_s:.3f}s job {result.job_s:.3f}s "
                          f"flush {result.flush_s:.3f}s kept={result.kept or 'none'}")
    if result.returncode != 0 or result.kept:
        raise typer.Exit(1)


@app.command("site")
@handle_errors
def site_command(
    directory: Path = typer.Argument(..., help="Where pfs/, nvme/, shared-bb/ are created."),
    ram: Path = typer.Option(None, "--ram", help="Where RAM-backed tiers live (default: a "
                             "directory under /dev/shm)."),
    pfs: Path = typer.Option(None, "--pfs", help="A mounted shared file system (NFS, Lustre, "
                             "sshfs...) to use as the PFS tier, measured instead of modelled."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Create a site description (tier roots and their modelled speeds) in DIRECTORY."""
    from schedlab.core.errors import BadInputError
    from schedlab.core.io import ensure_directory, write_text
    from schedlab.iflux.storage import Site

    if pfs is not None and not pfs.is_dir():
        raise BadInputError("not a directory (mount the shared file system first)",
                            path=str(pfs), field="--pfs")
    ensure_directory(directory)
    site = Site.under(directory.resolve(), ram, pfs=pfs.resolve() if pfs else None)
    path = write_text(directory / "site.json", site.to_json())
    if json_out:
        emit_json(dict(site=str(path), roots=site.roots))
    else:
        out_console.print(f"wrote {path}")


@app.command()
@handle_errors
def frob(
    jobspec: Path = typer.Argument(..., help="Flux jobspec (.json/.yaml)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Run the Flux frobnicator plugin on a jobspec and print the annotated jobspec."""
    from schedlab.iflux.flux import IFluxFrobnicator
    from schedlab.iflux.jobspec import intents_from_jobspec, load_document

    document, lines = load_document(jobspec)
    intents_from_jobspec(document, jobspec, lines)  # errors name this file and line
    frobbed = IFluxFrobnicator().frob(document)
    if json_out:
        emit_json(frobbed)
    else:
        out_console.print_json(json.dumps(frobbed))


@app.command()
@handle_errors
def hooks(
    directory: Path = typer.Argument(..., help="Where to write iflux-prolog/iflux-epilog."),
    site: Path = typer.Option(..., "--site"),
    spool: Path = typer.Option(..., "--spool", help="Plans and reports of Slurm jobs."),
    slurm_conf: Path = typer.Option(None, "--slurm-conf"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Write the Slurm Prolog/Epilog executables (set Prolog=/Epilog= to them)."""
    from schedlab.iflux.slurm import write_hooks

    prolog, epilog = write_hooks(directory, _site(site), spool, slurm_conf)
    doc = dict(prolog=str(prolog), epilog=str(epilog), slurm_conf_lines=[
        f"Prolog={prolog}", f"Epilog={epilog}", "PrologFlags=Alloc"])
    if json_out:
        emit_json(doc)
    else:
        out_console.print("\n".join(doc["slurm_conf_lines"]))


@app.command("map-batch")
@handle_errors
def map_batch_cmd(
    batch_file: Path = typer.Argument(..., help="Intents as rows: .csv, .parquet or .arrow."),
    out: Path = typer.Option(..., "--out", help=".parquet or .csv: the rows plus tier, chain, "
                             "software."),
    one_job: bool = typer.Option(False, "--one-job", help="The rows are one job's intents: "
                                 "a path declared twice with different fields is an error."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Parse, validate and map a columnar batch of intents (vectorised)."""
    import time

    from schedlab.iflux.batch import map_file

    start = time.perf_counter()
    rows = map_file(batch_file, out, paths=one_job)
    seconds = time.perf_counter() - start
    doc = dict(rows=rows, out=str(out), seconds=seconds, intents_per_s=rows / max(seconds, 1e-9))
    if json_out:
        emit_json(doc)
    else:
        out_console.print(f"mapped {rows} intents -> {out} ({doc['intents_per_s']:.3g}/s "
                          "including file I/O)")


@app.command("bb-install")
@handle_errors
def bb_install(
    conf_dir: Path = typer.Argument(..., help="The directory of slurm.conf."),
    site: Path = typer.Option(..., "--site"),
    spool: Path = typer.Option(..., "--spool", help="Plans, tables and reports of jobs."),
    pool: list[str] = typer.Option(None, "--pool", help="tier=size, e.g. nvme=1TiB "
                                   "(default: every tier of the site, gpu-direct only with "
                                   "a GPU)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Install IFlux as Slurm's burst_buffer/lua plugin (writes burst_buffer.lua)."""
    from schedlab.iflux.burst_buffer import burst_buffer_conf, install
    from schedlab.iflux.intents import parse_size

    pools = None
    if pool:
        pools = {}
        for item in pool:
            tier, sep, size = item.partition("=")
            try:
                pools[tier] = parse_size(size) if sep else -1
            except ValueError as exc:
                raise BadInputError(str(exc), field=f"--pool {item}") from None
    lua = install(conf_dir, site, spool, pools)
    doc = dict(lua=str(lua), slurm_conf_lines=["BurstBufferType=burst_buffer/lua",
                                               "JobSubmitPlugins=lua"],
               burst_buffer_conf=burst_buffer_conf())
    if json_out:
        emit_json(doc)
    else:
        out_console.print(f"wrote {lua} and job_submit.lua\nadd to slurm.conf: "
                          "BurstBufferType=burst_buffer/lua and JobSubmitPlugins=lua\n"
                          f"burst_buffer.conf (same directory):\n{doc['burst_buffer_conf']}")


@app.command()
@handle_errors
def sbatch(
    script: Path = typer.Argument(..., help="Batch script with #IFLUX lines."),
    spool: Path = typer.Option(..., "--spool"),
    args: list[str] = typer.Argument(None, help="Extra sbatch options after --."),
    bb: bool = typer.Option(False, "--bb", help="For a Slurm with IFlux's burst_buffer.lua: "
                            "add the '#BB_LUA pool= capacity=' request instead of wrapping."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Validate a script's intents and submit it to Slurm: with --bb through the burst-buffer
    plugin, otherwise wrapped to enter its namespace (Prolog/Epilog integration)."""
    if bb:
        from schedlab.iflux.burst_buffer import submit
    else:
        from schedlab.iflux.slurm import submit

    job_id = submit(script, list(args or []), spool)
    if json_out:
        emit_json(dict(job_id=job_id))
    else:
        out_console.print(f"submitted {job_id}")


@app.command()
@handle_errors
def bench(
    intents: int = typer.Option(2_000_000, "--intents", min=1),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Measure mapping throughput (compiled table, interpreter, parse+validate+map)."""
    from schedlab.iflux.experiment import mapping_throughput

    result = mapping_throughput(intents=intents, parsed=min(intents, 5_000), seed=seed)
    rows = result.frame.to_dicts()
    if json_out:
        emit_json(dict(rows=rows, claims=[c.__dict__ for c in result.claims]))
        return
    for row in rows:
        out_console.print(f"{row['path']:<36} {row['intents_per_s'] / 1e6:10.3f} M intents/s")
