"""Regenerate the protobuf and gRPC Python code from ``proto/*.proto`` and the Kafka protocol codec.

Run it as ``./dev proto`` (or ``python -m proto.generate``). The generated modules sit beside the
``.proto`` files and are imported as ``from proto import admin_pb2``. They are committed behind a
"generated, do not edit" banner; ``tests/unit/proto/test_generated_fresh.py`` regenerates into a
temporary directory and fails when the committed files differ. It then runs
``proto.kafka.generate`` (``proto/kafka/messages.py`` from ``proto/kafka/schemas/*.json``), which has
its own staleness test in ``tests/unit/proto/kafka/``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

from proto.kafka import generate as kafka_generate

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent
BANNER = "# Generated from proto/{name} by `./dev proto`. DO NOT EDIT.\n"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


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
        *[str(p.relative_to(ROOT)) for p in proto_files()],
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    generated = []
    for path in sorted((out_dir / "proto").iterdir()):
        if path.name.endswith(GENERATED_SUFFIXES):
            source = path.name.split("_pb2")[0] + ".proto"
            path.write_text(BANNER.format(name=source) + path.read_text())
            generated.append(path)
    return generated


def committed_generated() -> list[Path]:
    return sorted(p for p in PROTO_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES))


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
