"""The generated ``numamem.v1`` code: how it is made, and the check that the committed copy is current.

``src/numamem/v1/*_pb2*.py`` and their ``.pyi`` stubs are generated from
``proto/numamem/v1/*.proto`` by grpcio-tools and mypy-protobuf (pinned in the
dev extra: the code is stamped with the grpcio-tools version) and committed,
so that installing numamem needs neither protoc nor grpcio-tools.
``make protos`` (``python -m tests.genproto --write``) regenerates them after a
.proto change; ``tests/unit/test_generated_code.py`` fails until it is run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
PACKAGE = Path("numamem") / "v1"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def protos() -> list[Path]:
    return sorted((PROTO_ROOT / PACKAGE).glob("*.proto"))


def generate(out: Path) -> list[Path]:
    """Run protoc with the Python, gRPC and mypy generators into ``out``; the files written."""
    bin_dir = str(Path(sys.executable).parent)  # protoc-gen-mypy lives beside the interpreter
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            *(str(p) for p in protos()),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    return sorted(p for p in (out / PACKAGE).iterdir() if p.name.endswith(SUFFIXES))


def committed() -> list[Path]:
    return sorted(p for p in (REPO / "src" / PACKAGE).iterdir() if p.name.endswith(SUFFIXES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="regenerate src/numamem/v1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        target = REPO / "src" / PACKAGE
        if args.write:
            for old in committed():
                old.unlink()
            for path in fresh:
                shutil.copyfile(path, target / path.name)
            print(f"wrote {len(fresh)} files to {target.relative_to(REPO)}")
            return 0
        stale = [p.name for p in fresh if not (target / p.name).exists()]
        stale += [
            p.name
            for p in fresh
            if (target / p.name).exists() and (target / p.name).read_bytes() != p.read_bytes()
        ]
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
