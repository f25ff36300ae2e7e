"""Regenerate ``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` from ``api.proto``.

Needs grpcio-tools (build-only): ``pip install grpcio-tools && python -m
schedlab.gpooling.deviceplugin_v1beta1``. The generated files are committed, so running the
plugin needs only grpcio and protobuf. Each gets a header saying how it was made.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2]  # .../src, so imports in the stubs are package-qualified
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def main() -> int:
    from grpc_tools import protoc

    proto = HERE / "api.proto"
    code = protoc.main(["grpc_tools.protoc", f"-I{SRC}", f"--python_out={SRC}",
                        f"--pyi_out={SRC}", f"--grpc_python_out={SRC}", str(proto)])
    if code != 0:
        print(f"protoc failed on {proto} (exit {code})", file=sys.stderr)
        return 1
    gencode = re.search(r"Protobuf Python Version: (\S+)", (HERE / "api_pb2.py").read_text())
    header = ("# Generated from api.proto by grpcio-tools "
              f"{version('grpcio-tools')} (protobuf gencode {gencode[1] if gencode else '?'};"
              " needs protobuf of that major version, at least that release):\n"
              "#   python -m schedlab.gpooling.deviceplugin_v1beta1\n"
              "# Do not edit; edit api.proto and regenerate.\n")
    for name in GENERATED:
        path = HERE / name
        text = path.read_text()
        if not text.startswith("# Generated from api.proto"):
            path.write_text(header + "# ruff: noqa\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
