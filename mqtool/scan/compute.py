"""Arrow's compute functions by name through ``call_function`` (``private_api.arrow_compute``), no ``pyarrow.compute``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..private_api import arrow_compute

_arrow = arrow_compute()
call_function = _arrow.call_function


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name.endswith("Options"):
        return getattr(_arrow, name)
    function_name = name.rstrip("_")

    def function(*args, options=None):
        return call_function(function_name, list(args), options)

    function.__name__ = function.__qualname__ = name
    globals()[name] = function  # made once
    return function


def cast(values, target_type):
    """``values`` as ``target_type``, checked (``pyarrow.compute.cast``)."""
    return call_function("cast", [values], _arrow.CastOptions.safe(target_type))


def is_in(values, value_set):
    """Per value: among ``value_set`` (null: false)."""
    return call_function("is_in", [values], _arrow.SetLookupOptions(value_set))


def index_in(values, value_set):
    """Per value: its index in ``value_set``, null when absent."""
    return call_function("index_in", [values], _arrow.SetLookupOptions(value_set))


def take(data, indices):
    """The rows of ``data`` (an array or a batch) at ``indices`` (Arrow or numpy integers)."""
    if isinstance(indices, np.ndarray):
        indices = numbers(indices, pa.int64())
    return call_function("take", [data, indices])


def fill_null(values, fill_value):
    """``values`` with nulls replaced by ``fill_value``, of their type (Arrow's ``coalesce``)."""
    return call_function("coalesce", [values, pa.scalar(fill_value, type=values.type)])


def numbers(values: np.ndarray, type: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """A fixed-width or boolean Arrow array of ``values`` (``valid``: mask), without ``pa.array``'s ``numpy.ma``."""
    boolean = pa.types.is_boolean(type)
    data = np.packbits(values, bitorder="little") if boolean else np.ascontiguousarray(values, dtype=np.dtype(f"<i{type.bit_width // 8}"))
    bitmap, nulls = validity(valid)
    return pa.Array.from_buffers(type, len(values), [bitmap, pa.py_buffer(data)], null_count=nulls)


def validity(valid: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    """An Arrow validity bitmap of a bool mask, and the null count (None, 0: no nulls)."""
    return (None, 0) if valid is None or valid.all() else (pa.py_buffer(np.packbits(valid, bitorder="little")), int(len(valid) - valid.sum()))
