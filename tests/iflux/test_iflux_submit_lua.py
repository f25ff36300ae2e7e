"""The submit check of IFlux's burst_buffer.lua runs in Lua inside slurmctld (no process at
submit): it must accept and refuse exactly what the Python checker does, with the same one-line
message; and on a real Slurm, impossible requests and ``#IFLUX``-only scripts are refused at
``sbatch`` time."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.core.io import write_text
from schedlab.iflux import burst_buffer as bb
from schedlab.iflux.storage import Site

LUA = shutil.which("lua5.1")
needs_lua = pytest.mark.skipif(LUA is None, reason="needs a lua5.1 interpreter "
                               "(apt-get install -y lua5.1), the Lua Slurm embeds")
DRIVER = """slurm = {SUCCESS = 0, ERROR = -1, log_error = function() end}
dofile(arg[1])
for i = 2, #arg do
   local verdict, message = iflux_check(arg[i])
   io.write(verdict, "\\t", tostring(message), "\\n")
end
"""
COUNTS = {"ok": 0, "refuse": 0, "helper": 0}
POOLS = {"ramdisk": 64 << 20, "nvme": 1 << 30}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("lua")
    site = Site.under(base / "site", ram_base=base / "ram")
    write_text(base / "site.json", site.to_json())
    bb.install(base, base / "site.json", base / "spool", POOLS)
    (base / "drv.lua").write_text(DRIVER)
    yield base
    shutil.rmtree(base / "ram", ignore_errors=True)


def lua_verdicts(base: Path, scripts: list[Path]) -> list[tuple[str, str]]:
    out = subprocess.run([LUA, str(base / "drv.lua"), str(base / "burst_buffer.lua"),
                          *map(str, scripts)], capture_output=True, text=True, check=True)
    return [tuple(line.split("\t", 1)) for line in out.stdout.splitlines()]


def python_verdict(base: Path, script: Path) -> tuple[str, str]:
    """What the helper (``bbfast.py job_process``) answers: ok, or its one line."""
    try:
        bb.job_process(base / "spool", str(script))
    except BadInputError as exc:
        return "refuse", f"iflux job_process: {exc}"
    except Exception as exc:  # noqa: BLE001 - as burst_buffer.main reports it
        return "refuse", f"iflux job_process: {type(exc).__name__}: {exc}"
    return "ok", "nil"


def agree(base: Path, texts: list[str]) -> None:
    scripts = []
    for i, text in enumerate(texts):
        script = base / f"s{i}.sh"
        script.write_bytes(text.encode("utf-8"))
        scripts.append(script)
    for text, script, (verdict, message) in zip(texts, scripts, lua_verdicts(base, scripts),
                                                strict=True):
        py = python_verdict(base, script)
        if verdict == "helper":  # intents without a pool request: Lua hands them to Python
            assert py[0] == "ok" or "need a pool request" in py[1], (text, py)
            COUNTS["helper"] += 1
            continue
        assert (verdict, message) == py, text
        COUNTS[verdict] += 1


FIXED = [
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1T\n#IFLUX path=/p/in usage=input size=1MiB\ntrue\n",
    "#!/bin/bash\n#BB_LUA pool=ramdisk capacity=64M\ntrue\n",
    "#!/bin/bash\n#BB_LUA pool=ramdisk capacity=65M\ntrue\n",
    "#!/bin/bash\n#BB_LUA pool=ramdisk capacity=64MiB\n#IFLUX path=/a usage=output\n",
    "#!/bin/bash\n#BB_LUA pool=tape capacity=1G\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=lots\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1e400M\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=" + "9" * 400 + "\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G path=/x usage=input\n"
    "#IFLUX path=/x/y usage=output\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#IFLUX path=/x usage=input size=1.5GiB\n"
    "#IFLUX path=//x/./ usage=input size=1.5GiB files=+3\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#IFLUX path=/x usage=input size=" + "9" * 400
    + "\n",
    '#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#SBATCH --comment="iflux: path=/a usage=input;'
    ' path=/b usage=nope"\n',
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#IFLUX path=/a usage=input name='x y\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\r\n#IFLUX path=/a usage=input mode=\"a\\\"b\"\r\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#IFLUX path=/a usage=input\\\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\n#IFLUX path=/a usage=input\n"
    "#IFLUX path=/a usage=input size=2\n",
    "#!/bin/bash\n#BB_LUA pool=nvme capacity=1G\necho hi\n#IFLUX path=/a usage=sideways\n",
]


@needs_lua
def test_lua_check_agrees_on_known_cases(installed: Path) -> None:
    agree(installed, FIXED)
    verdicts = lua_verdicts(installed, [installed / "s0.sh", installed / "s1.sh",
                                        installed / "s2.sh"])
    assert verdicts[0][0] == "refuse" and "pool nvme holds in total (1024 MiB)" in verdicts[0][1]
    assert verdicts[1] == ("ok", "nil") and verdicts[2][0] == "refuse"
    compiled = installed / "spool" / "iflux_check.luac"
    if compiled.exists():  # bytecode from luac5.1: the source it falls back to agrees as well
        saved = compiled.read_bytes()
        compiled.unlink()
        try:
            agree(installed, FIXED)
        finally:
            compiled.write_bytes(saved)


WORDS = st.sampled_from([
    "path=/p/a", "path=/p/a/b", "path=/p/b/", "path=//p/a", "path=rel", "path=", "usage=input",
    "usage=output", "usage=temporary", "usage=sideways", "mode=read-only", "mode=write-only",
    "pattern=checkpoint", "sharing=shared", "level=workflow", "data=sample", "size=1MiB",
    "size=12parsecs", "size=1.5 GB", "size=-5", "size=7", "files=0", "files=+3", "files=x",
    "source=/d", "source=d", "name='a b'", 'name="q\\"x"', "colour=blue", "pool=nvme",
    "capacity=2G", "'unclosed", "noequals", "=v", "usage=input\\", "path=/p/./c",
])
TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12)


@st.composite
def scripts(draw) -> str:
    lines = ["#!/bin/bash"]
    pool = draw(st.sampled_from(["nvme", "ramdisk", "tape", None]))
    if pool:
        cap = draw(st.sampled_from(["64M", "65M", "1G", "1T", "2GiB", "lots", "0.5G", "64mb"]))
        lines.append(f"#BB_LUA pool={pool} capacity={cap}")
    for _ in range(draw(st.integers(0, 4))):
        words = draw(st.lists(st.one_of(WORDS, TEXT), max_size=5))
        prefix = draw(st.sampled_from(["#IFLUX ", "#BB_LUA ", "  #IFLUX\t", "#IFLUX"]))
        body = " ".join(words)
        if draw(st.booleans()) and prefix == "#IFLUX ":
            lines.append(f'#SBATCH --comment="iflux: {body.replace(chr(34), "")}; '
                         'path=/q usage=input"')
        else:
            lines.append(prefix + body)
    if draw(st.booleans()):
        lines.insert(draw(st.integers(1, len(lines))), "echo start")
    return "\n".join(lines) + "\n"


@needs_lua
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(scripts(), min_size=1, max_size=8))
def test_lua_check_agrees_with_python_on_generated_scripts(installed: Path,
                                                           batch: list[str]) -> None:
    agree(installed, batch)


@needs_lua
def test_generated_scripts_reach_both_verdicts_in_lua() -> None:
    """The generator is not vacuous: the Lua itself accepted and refused some of them."""
    if COUNTS["ok"] + COUNTS["refuse"] == 0:
        pytest.skip("run with the generated-scripts test")
    assert COUNTS["ok"] > 0 and COUNTS["refuse"] > 0, COUNTS


NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _slurm_ready() -> str | None:
    from schedlab.iflux.localslurm import missing_binaries

    if missing_binaries():
        return "needs slurm-wlm and munge"
    if not list(Path("/usr/lib").glob("**/slurm-wlm/job_submit_lua.so")):
        return "Slurm was built without job_submit/lua"
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "slurmd and setpriv to another user need root"
    return None


@pytest.mark.services
@pytest.mark.skipif(_slurm_ready() is not None, reason=str(_slurm_ready()))
def test_real_slurm_refuses_impossible_and_unseen_requests_at_submit() -> None:
    from schedlab.iflux.localslurm import LocalSlurm

    base = Path(tempfile.mkdtemp(prefix="iflux-submit-"))
    base.chmod(0o755)
    site = Site.under(base / "site", ram_base=base / "ram")
    write_text(base / "site.json", site.to_json())
    slurm = LocalSlurm(base / "slurm", burst_buffer=(base / "site.json", base / "spool",
                                                     {"ramdisk": 64 << 20}))
    try:
        slurm.start()

        def sbatch(text: str) -> subprocess.CompletedProcess:
            return subprocess.run([*AS_NOBODY, "sbatch", "--parsable", "-o", "/dev/null",
                                   "--hold"], input=text, env=slurm.env, capture_output=True,
                                  text=True, timeout=60)

        huge = sbatch("#!/bin/bash\n#BB_LUA pool=ramdisk capacity=1T\ntrue\n")
        assert huge.returncode != 0, huge.stdout
        assert "pool ramdisk holds in total (64 MiB)" in huge.stderr, huge.stderr
        fits = sbatch("#!/bin/bash\n#BB_LUA pool=ramdisk capacity=64M\n"
                      "#IFLUX path=/p/a usage=output size=1MiB\ntrue\n")
        assert fits.returncode == 0, fits.stderr
        bad = sbatch("#!/bin/bash\n#BB_LUA pool=ramdisk capacity=8M\n"
                     "#IFLUX path=/p/a usage=sideways\ntrue\n")
        assert bad.returncode != 0 and "field 'usage'" in bad.stderr, bad.stderr
        unseen = sbatch("#!/bin/bash\n#IFLUX path=/p/a usage=output size=1MiB\ntrue\n")
        assert unseen.returncode != 0, unseen.stdout
        assert "requests no burst buffer" in unseen.stderr
        assert "schedlab iflux sbatch --bb" in unseen.stderr
        comment = sbatch('#!/bin/bash\n#SBATCH --comment="iflux: path=/p/a usage=input"\ntrue\n')
        assert comment.returncode != 0 and "requests no burst buffer" in comment.stderr
        plain = sbatch("#!/bin/bash\n# an ordinary job\ntrue\n")
        assert plain.returncode == 0, plain.stderr
        subprocess.run(["scancel", fits.stdout.strip(), plain.stdout.strip()], env=slurm.env)
    finally:
        slurm.stop()
        shutil.rmtree(base, ignore_errors=True)
