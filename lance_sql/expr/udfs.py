"""Our pyarrow scalar functions: kernels Arrow lacks, registered once under their names
so filter and projection expressions (run by Acero) can call them."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.numpy_arrow import array_from_python

__all__ = ["scalar_function"]

_registered: set[str] = set()
_register_lock = threading.Lock()


def scalar_function(name: str, kernel: Callable[..., pa.Array],
                    inputs: dict[str, pa.DataType], out: pa.DataType, summary: str) -> str:
    """Register ``kernel`` (arrays in, an array out) as ``name``, once; ``name``. A
    literal first argument reaches it as a one-row array (and leaves as a scalar); the
    others as Arrow gives them (an array, or a scalar for a literal)."""
    with _register_lock:
        if name in _registered:
            return name

        def run(ctx: pc.UdfContext, first: pa.Array | pa.Scalar,
                *rest: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
            if isinstance(first, pa.Scalar):
                return kernel(array_from_python([first.as_py()], first.type), *rest)[0]
            return kernel(first, *rest)

        pc.register_scalar_function(run, name, {"summary": summary, "description": summary},
                                    inputs, out)
        _registered.add(name)
    return name
