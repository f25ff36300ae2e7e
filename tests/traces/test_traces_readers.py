"""The shared trace readers (``schedlab.traces``): rows read right, bad rows named by line/field."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedlab.core.errors import BadInputError
from schedlab.core.io import csv_rows
from schedlab.traces.alibaba_genai import read_requests
from schedlab.traces.alibaba_gpu2023 import read_node_list, read_pod_list

GENAI = ("gmt_create,groupId,checkpoint_model_version_id,num_lora,exec_time_seconds\n"
         "2024-11-15 16:57:50,G1,M1,0,3.5\n"
         "2024-11-15 16:58:02,G2,M1,1,4\n")


def test_genai_rows_get_a_parsed_time_column(tmp_path: Path) -> None:
    path = tmp_path / "genai.csv"
    path.write_text(GENAI)
    frame = read_requests(path, ("groupId",), numeric=("num_lora",))
    assert frame.height == 2 and frame["num_lora"].to_list() == [0.0, 1.0]
    seconds = frame["time"].dt.epoch("s").to_list()
    assert seconds[1] - seconds[0] == 12


@pytest.mark.parametrize(("text", "field", "line"), [
    (GENAI.replace("2024-11-15 16:58:02", "yesterday"), "gmt_create", 3),
    (GENAI.replace(",1,4", ",one,4"), "num_lora", 3),
    (GENAI.replace("groupId", "group"), "groupId", None),
])
def test_genai_bad_input_names_line_and_field(tmp_path: Path, text: str, field: str,
                                              line: int | None) -> None:
    path = tmp_path / "genai.csv"
    path.write_text(text)
    with pytest.raises(BadInputError) as caught:
        read_requests(path, ("groupId",), numeric=("num_lora",))
    assert caught.value.field == field and caught.value.line == line


def test_csv_rows_keep_the_file_line_of_each_row(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a, b\n1,2\n\n 3 ,4\n")
    assert list(csv_rows(path, ("a", "b"))) == [(2, {"a": "1", "b": "2"}),
                                                 (4, {"a": "3", "b": "4"})]
    path.write_text("a,b\n1,2\n1,2,3\n")
    with pytest.raises(BadInputError, match="3 fields, header has 2") as caught:
        list(csv_rows(path, ("a",)))
    assert caught.value.line == 3
    with pytest.raises(BadInputError) as caught:
        list(csv_rows(path, ("a", "c")))
    assert caught.value.field == "c" and caught.value.line == 1


def test_gpu2023_node_and_pod_lists_read_back(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G2\nn2,32000,1,0,\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,"
                    "deletion_time,scheduled_time\np1,4000,8192,1,500,V100M16|T4,0,10,2\n")
    assert [(n.name, n.gpus, n.model) for n in read_node_list(nodes)] == [("n1", 8, "G2"),
                                                                          ("n2", 0, "")]
    (pod,) = read_pod_list(pods)
    assert (pod.gpu_demand, pod.gpu_spec, pod.scheduled_time) == (500, ("T4", "V100M16"), 2.0)
    pods.write_text(pods.read_text().replace(",0,10,2", ",5,1,"))
    with pytest.raises(BadInputError) as caught:
        read_pod_list(pods)
    assert caught.value.field == "deletion_time" and caught.value.line == 2
