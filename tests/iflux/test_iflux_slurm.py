"""IFlux inside a real Slurm: slurmctld, slurmd and munged on 127.0.0.1, set up per test."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from schedlab.core.errors import BadInputError
from schedlab.core.io import write_text
from schedlab.iflux import deploy
from schedlab.iflux.localslurm import LocalSlurm, missing_binaries
from schedlab.iflux.slurm import job_dir, submit, wrap_script, write_hooks
from schedlab.iflux.storage import Site


def test_wrap_script_keeps_the_header_first() -> None:
    text = "#!/bin/bash\n#SBATCH -N 1\n#IFLUX path=/a usage=input\n\necho hi\n#later\n"
    lines = wrap_script(text, "/spool").splitlines()
    assert lines[:4] == ["#!/bin/bash", "#SBATCH -N 1", "#IFLUX path=/a usage=input", ""]
    assert "schedlab.iflux.slurm enter --spool /spool" in lines[4]
    assert lines[5:] == ["echo hi", "#later"]


def test_submit_rejects_bad_intents_before_queueing(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#IFLUX path=/a usage=input mode=write-only\necho\n")
    with pytest.raises(BadInputError, match="contradicting"):
        submit(script, [], tmp_path / "spool")
    assert not (tmp_path / "spool").exists(), "nothing was queued or written"


@pytest.mark.services
@pytest.mark.skipif(bool(missing_binaries()), reason="needs slurm-wlm and munge "
                    "(apt-get install -y slurm-wlm munge)")
@pytest.mark.skipif(os.geteuid() != 0 or not deploy.namespaces_available(),
                    reason="slurmd and the job's mount namespace need root")
def test_prolog_epilog_deploy_and_flush_inside_slurm(tmp_path: Path) -> None:
    site = Site.under(tmp_path / "site", ram_base=tmp_path / "ram")
    write_text(tmp_path / "site.json", site.to_json())
    spool = tmp_path / "spool"
    cluster = LocalSlurm(tmp_path / "slurm")
    cluster.prolog, cluster.epilog = map(str, write_hooks(tmp_path, tmp_path / "site.json",
                                                         spool, cluster.conf))
    pfs = Path(site.roots["pfs"])
    (pfs / "in").mkdir()
    (pfs / "in" / "a.txt").write_text("input\n")
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#IFLUX path={pfs}/in usage=input mode=read-only pattern=small-random size=1MiB\n"
        f"#IFLUX path={pfs}/out usage=output mode=write-only pattern=checkpoint size=8MiB\n"
        f"cat {pfs}/in/a.txt > {pfs}/out/copy.txt\n"
        f"grep -cE ' {pfs}/(in|out) ' /proc/self/mountinfo > {pfs}/out/mounts.txt\n")
    with cluster:
        job_id = submit(script, ["-o", str(tmp_path / "job.out")], spool, env=cluster.env)
        assert cluster.wait_job(job_id, timeout=90) == "COMPLETED"
    where = job_dir(spool, job_id)
    assert not (where / "error.txt").exists()
    decision = json.loads((where / "decision.json").read_text())
    assert [p["tier"] for p in decision["allocation"]["placements"]] == ["ramdisk", "nvme"]
    assert (pfs / "out" / "copy.txt").read_text() == "input\n", "flushed by the Epilog"
    assert (pfs / "out" / "mounts.txt").read_text().strip() == "2", "both paths were mounted"
    assert json.loads((where / "report.json").read_text())["ok"] is True
    assert not any(Path(site.roots["nvme"]).iterdir()), "the tier was torn down"
