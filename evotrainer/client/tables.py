"""Tabular results: rows with named columns, and DataFrames on request.

pandas and polars are optional extras (`pip install 'evotrainer[pandas]'`, `[polars]`),
imported only by `to_pandas()` / `to_polars()`, so that `import evotrainer` and the CLI
stay cheap; a missing one is a MissingExtraError that names the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar

import orjson

from evotrainer.errors import EvotrainerError

Row = TypeVar("Row", bound=tuple[Any, ...])


class MissingExtraError(EvotrainerError):
    """An optional dependency is not installed; the message says which extra brings it."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(f"{module} is not installed: pip install 'evotrainer[{extra}]'")
        self.module = module
        self.extra = extra


def optional_module(module: str, extra: str) -> ModuleType:
    """Import an optional dependency, or raise MissingExtraError naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module, extra) from None


@dataclass(frozen=True)
class Table(Generic[Row]):
    """Rows (tuples, often named tuples) under column names; iterate it, index it, or turn
    it into a DataFrame."""

    columns: tuple[str, ...]
    rows: Sequence[Row]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __getitem__(self, index: int) -> Row:
        return self.rows[index]

    def records(self) -> list[dict[str, Any]]:
        """One dict per row, keyed by column."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def column(self, name: str) -> list[Any]:
        """The values of one column, in row order."""
        at = self.columns.index(name)
        return [row[at] for row in self.rows]

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the rows (the `pandas` extra)."""
        pandas = optional_module("pandas", "pandas")
        return pandas.DataFrame.from_records(self.rows, columns=list(self.columns))

    def to_polars(self) -> Any:
        """A polars DataFrame of the rows (the `polars` extra). Nested values (payloads,
        lists) become JSON text: polars' structs need one shape per column, and event
        payloads of different types have different shapes."""
        polars = optional_module("polars", "polars")
        nested = [i for i, name in enumerate(self.columns) if _is_nested(self.column(name))]
        rows = self.rows if not nested else [_json_cells(row, nested) for row in self.rows]
        return polars.DataFrame(rows, schema=list(self.columns), orient="row", infer_schema_length=None)


def _is_nested(values: list[Any]) -> bool:
    return any(isinstance(v, dict | list) for v in values)


def _json_cells(row: tuple[Any, ...], at: list[int]) -> list[Any]:
    cells = list(row)
    for i in at:
        if cells[i] is not None:
            cells[i] = orjson.dumps(cells[i], option=orjson.OPT_NON_STR_KEYS).decode()
    return cells
