"""The generated protobuf code: how it is made, and the check that the committed copy is current.

Two packages are generated from ``proto/`` and committed, so that installing
numamem needs neither protoc nor grpcio-tools:

* ``src/numamem/v1/*_pb2*.py`` and their ``.pyi`` stubs, from
  ``proto/numamem/v1/*.proto``: the daemon's gRPC API (messages and gRPC stubs);
* ``src/numamem/nriapi/*_pb2.py`` and ``.pyi``, from ``proto/numamem/nriapi/*.proto``:
  the NRI and ttrpc messages the NRI plugin speaks (messages only: ttrpc is not
  gRPC, ``numamem.nri`` frames and dispatches them itself).

Both are made by grpcio-tools and mypy-protobuf (pinned in the dev extra: the
code is stamped with the grpcio-tools version). ``make protos`` (``python -m
tests.genproto --write``) regenerates them after a .proto change;
``tests/unit/test_generated_code.py`` fails until it is run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"


@dataclass(frozen=True)
class Package:
    """One generated package: ``proto/<path>/*.proto`` makes ``src/<path>/*<suffixes>``."""

    path: Path
    grpc: bool

    @property
    def suffixes(self) -> tuple[str, ...]:
        plain = ("_pb2.py", "_pb2.pyi")
        return (*plain, "_pb2_grpc.py", "_pb2_grpc.pyi") if self.grpc else plain

    def protos(self) -> list[Path]:
        return sorted((PROTO_ROOT / self.path).glob("*.proto"))

    def files(self, root: Path) -> list[Path]:
        return sorted(p for p in (root / self.path).iterdir() if p.name.endswith(self.suffixes))


PACKAGES = (
    Package(Path("numamem") / "v1", grpc=True),
    Package(Path("numamem") / "nriapi", grpc=False),
)


def protos() -> list[Path]:
    return [p for package in PACKAGES for p in package.protos()]


def expected_count() -> int:
    """How many files the generators make: one per suffix of each package's .proto files."""
    return sum(len(package.suffixes) * len(package.protos()) for package in PACKAGES)


def generate(out: Path) -> list[Path]:
    """Run protoc with the Python (and for gRPC packages the gRPC) and mypy generators
    into ``out``; the files written."""
    bin_dir = str(Path(sys.executable).parent)  # protoc-gen-mypy lives beside the interpreter
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    for package in PACKAGES:
        grpc_out = [f"--grpc_python_out={out}", f"--mypy_grpc_out={out}"] if package.grpc else []
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"--proto_path={PROTO_ROOT}",
                f"--python_out={out}",
                f"--mypy_out={out}",
                *grpc_out,
                *(str(p) for p in package.protos()),
            ],
            check=True,
            env=env,
            capture_output=True,
        )
    return [p for package in PACKAGES for p in package.files(out)]


def committed() -> list[Path]:
    return [p for package in PACKAGES for p in package.files(REPO / "src")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="regenerate the generated packages")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        if args.write:
            for old in committed():
                old.unlink()
            for path in fresh:
                target = REPO / "src" / path.relative_to(tmp)
                shutil.copyfile(path, target)
            print(f"wrote {len(fresh)} files to {', '.join(str(p.path) for p in PACKAGES)}")
            return 0
        stale = []
        for path in fresh:
            target = REPO / "src" / path.relative_to(tmp)
            if not target.exists() or target.read_bytes() != path.read_bytes():
                stale.append(str(path.relative_to(tmp)))
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
