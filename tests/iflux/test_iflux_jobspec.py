"""Flux jobspec and Slurm script readers, including fuzzing with malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.iflux.jobspec import (
    intents_from_comment,
    intents_from_jobspec,
    intents_from_slurm_script,
    read_intents,
)

SPEC = {
    "version": 1,
    "resources": [{"type": "node", "count": 1}],
    "tasks": [{"command": ["app", "-x"], "slot": "task", "count": {"per_slot": 1}}],
    "attributes": {"system": {"duration": 60, "intents": [
        {"path": "/pfs/in", "usage": "input", "mode": "read-only", "pattern": "small-random",
         "size": "1GiB"},
        {"path": "/pfs/out", "usage": "output", "pattern": "checkpoint", "size": 1 << 30},
    ]}},
}


def test_flux_jobspec_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "j.json").write_text(json.dumps(SPEC))
    (tmp_path / "j.yaml").write_text(yaml.safe_dump(SPEC))
    a, b = read_intents(tmp_path / "j.json"), read_intents(tmp_path / "j.yaml")
    assert a.intents == b.intents and len(a.intents) == 2
    assert a.intents[0].size == 1 << 30 and a.command == ["app", "-x"]


def test_yaml_error_names_the_intent_line(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(SPEC))
    bad["attributes"]["system"]["intents"][1]["usage"] = "outptu"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    with pytest.raises(BadInputError) as err:
        read_intents(path)
    line = path.read_text().splitlines()[err.value.line - 1]
    assert err.value.field == "attributes.system.intents[1].usage"
    assert "/pfs/out" in line  # the item starts with its first key, path


def test_jobspec_shape_errors() -> None:
    with pytest.raises(BadInputError, match="version"):
        intents_from_jobspec({**SPEC, "version": 2})
    with pytest.raises(BadInputError) as err:
        intents_from_jobspec({"version": 1, "attributes": {"system": {"intents": {"a": 1}}}})
    assert err.value.field == "attributes.system.intents"
    assert intents_from_jobspec({"version": 1}).intents == []


def test_slurm_script_directives_and_comment(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N 1\n"
        "#IFLUX path=/pfs/in usage=input mode=read-only pattern='small-random' size=2GiB\n"
        '#SBATCH --comment="iflux: path=/pfs/o usage=output; path=/pfs/t usage=temporary"\n'
        "srun app\n")
    intents = intents_from_slurm_script(script).intents
    assert [i.path for i in intents] == ["/pfs/in", "/pfs/o", "/pfs/t"]
    assert intents_from_comment("just a note") == []


@pytest.mark.parametrize("line, field", [
    ("#IFLUX path=/a usage=input colour=red", "colour"),
    ("#IFLUX path=/a usage=input usage=output", "usage"),
    ("#IFLUX path=/a usage", None),
    ("#IFLUX path=/a usage=input size=lots", "size"),
])
def test_bad_directive_names_file_line_field(tmp_path: Path, line: str, field: str) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{line}\necho hi\n")
    with pytest.raises(BadInputError) as err:
        intents_from_slurm_script(script)
    assert err.value.path == script and err.value.line == 2 and err.value.field == field


def test_directive_after_first_command_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho hi\n#IFLUX path=/a usage=input\n")
    with pytest.raises(BadInputError, match="precede") as err:
        intents_from_slurm_script(script)
    assert err.value.line == 3


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such file"):
        read_intents(tmp_path / "nope.yaml")
    (tmp_path / "b.sh").write_bytes(b"\xff\xfe#IFLUX\n")
    with pytest.raises(BadInputError, match="UTF-8"):
        read_intents(tmp_path / "b.sh")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_fuzz_yaml_reader_only_raises_badinput(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        read_intents(path)
    except BadInputError as exc:
        assert exc.path == path


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(alphabet="#IFLUXpath=/ausgeinptr-o'\" \t", max_size=60), max_size=6))
def test_fuzz_slurm_reader_only_raises_badinput(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "fuzz.sh"
    path.write_text("\n".join(lines), encoding="utf-8")
    try:
        read_intents(path)
    except BadInputError as exc:
        assert exc.path == path


intent_values = st.dictionaries(
    st.sampled_from(["path", "usage", "mode", "pattern", "size", "level", "bogus", "files"]),
    st.one_of(st.text(max_size=8), st.integers(-5, 10**12), st.none(), st.booleans(),
              st.lists(st.integers(), max_size=2), st.sampled_from(["/p/x", "input", "1GiB"])))


@given(st.lists(intent_values, max_size=4))
def test_fuzz_jobspec_dicts_only_raise_badinput(intents: list[dict]) -> None:
    try:
        intents_from_jobspec({"version": 1, "attributes": {"system": {"intents": intents}}})
    except BadInputError as exc:
        assert exc.field is None or exc.field.startswith("attributes.system.intents") \
            or exc.field == "path"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet='{}[]",:0123456789abc \n', max_size=200))
def test_fuzz_json_reader_only_raises_badinput(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.json"
    path.write_text(text, encoding="utf-8")
    try:
        read_intents(path)
    except BadInputError as exc:
        assert exc.path == path


def test_deeply_nested_json_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInputError, match="nested too deeply"):
        read_intents(path)
