"""Regenerate the protobuf and gRPC Python code from ``proto/*.proto`` and the Kafka protocol codec.

Run it as ``./dev proto`` (or ``python -m proto.generate``). The generated modules sit beside the
``.proto`` files and are imported as ``from proto import admin_pb2``. They are committed behind a
"generated, do not edit" banner; ``tests/unit/proto/test_generated_fresh.py`` regenerates into a
temporary directory and fails when the committed files differ. It then runs
``proto.kafka.generate`` (``proto/kafka/messages.py`` from ``proto/kafka/schemas/*.json``), which has
its own staleness test in ``tests/unit/proto/kafka/``.

Beside protoc's output it writes ``proto/error_codes.py``: common.proto's ``ErrorCode`` as a Python
``IntEnum`` spelled out member by member (same names, numbers and order), so that a type checker sees
every code (``proto.errors`` re-exports it). protoc's ``.pyi`` stubs type an enum field's constructor
argument as the enum or its name; protobuf also takes the number (Kafka's codes travel as ints and as
``ErrorCode`` members), so the stubs are widened to accept ``int`` there too.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from proto.kafka import generate as kafka_generate

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent
BANNER = "# Generated from proto/{name} by `./dev proto`. DO NOT EDIT.\n"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
ERROR_CODES = "error_codes.py"
ERROR_CODES_HEAD = '''"""Kafka's error codes: common.proto's ``ErrorCode`` as a Python ``IntEnum``.

The same names, numbers and order as the protobuf enum, spelled out so that a type checker knows every
member. Import it from ``proto.errors``, which adds the retriable set and one exception class per code.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
'''
# an enum-typed argument in protoc's .pyi: "_Union[EnumType, str]" (the member or its name)
_PYI_ENUM_ARG = re.compile(r"_Union\[([A-Za-z0-9_.]+), str\]")


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate_into(out_dir: Path) -> list[Path]:
    """Generate every module into ``out_dir/proto/`` and return the generated paths."""
    (out_dir / "proto").mkdir(parents=True, exist_ok=True)
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--descriptor_set_out={out_dir / 'descriptors.pb'}",
        *[str(p.relative_to(ROOT)) for p in proto_files()],
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    descriptors = descriptor_pb2.FileDescriptorSet.FromString((out_dir / "descriptors.pb").read_bytes())
    (out_dir / "proto" / ERROR_CODES).write_text(_error_codes_module(descriptors))
    for path in sorted((out_dir / "proto").iterdir()):
        if path.name.endswith("_pb2.pyi"):
            path.write_text(_PYI_ENUM_ARG.sub(r"_Union[\1, str, int]", path.read_text()))
        if path.name.endswith(GENERATED_SUFFIXES):
            source = path.name.split("_pb2")[0] + ".proto"
            path.write_text(BANNER.format(name=source) + path.read_text())
    return sorted(p for p in (out_dir / "proto").iterdir() if _is_generated(p))


def _error_codes_module(descriptors: descriptor_pb2.FileDescriptorSet) -> str:
    (common,) = (f for f in descriptors.file if f.name == "proto/common.proto")
    (enum_type,) = (e for e in common.enum_type if e.name == "ErrorCode")
    members = "".join(f"    {v.name} = {v.number}\n" for v in enum_type.value)
    return BANNER.format(name="common.proto") + ERROR_CODES_HEAD + members


def _is_generated(path: Path) -> bool:
    return path.name.endswith(GENERATED_SUFFIXES) or path.name == ERROR_CODES


def committed_generated() -> list[Path]:
    return sorted(p for p in PROTO_DIR.iterdir() if _is_generated(p))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args(argv)
    for stale in committed_generated():
        stale.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate_into(Path(tmp)):
            shutil.copyfile(path, PROTO_DIR / path.name)
            print(f"wrote proto/{path.name}")
    return kafka_generate.main([])


if __name__ == "__main__":
    sys.exit(main())
