"""Regenerate the Python protobuf modules in lance_sql/format/pb from protos/, with their
type stubs (``.pyi``, read by the type checker).

protoc writes top-level imports (``import file_pb2``); we rewrite them to
package-relative ones so the modules live inside our package. The test suite
calls :func:`generate` into a temporary directory and compares, so the checked-in
modules can never drift from the .proto sources.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "lance_sql" / "format" / "pb"

_TOP_LEVEL_IMPORT = re.compile(r"^import (\w+_pb2) as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Compile every .proto under protos/ into ``out_dir``; return the written files."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={tmp}",
                f"--pyi_out={tmp}", *protos]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed")
        written = []
        out_dir.mkdir(parents=True, exist_ok=True)
        for generated in sorted(Path(tmp).glob("*_pb2.py*")):
            text = _TOP_LEVEL_IMPORT.sub(r"from . import \1 as \2", generated.read_text())
            target = out_dir / generated.name
            target.write_text(text)
            written.append(target)
    return written


if __name__ == "__main__":
    for path in generate(OUT_DIR):
        print(path.relative_to(ROOT), file=sys.stderr)
