"""The Python API behind `import evotrainer`: `connect()` returns a Client whose results
are frozen dataclasses and Tables (`.to_pandas()`, `.to_polars()`)."""

from evotrainer.client.client import Client, connect
from evotrainer.client.tables import MissingExtraError, Table

__all__ = ["Client", "MissingExtraError", "Table", "connect"]
