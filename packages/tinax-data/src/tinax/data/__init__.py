"""tinax.data (being built: public names are added here as they land)."""

from tinax.data._array_record import read_array_record, write_array_record
from tinax.data._parquet import read_parquet_record, write_parquet_record

__all__ = [
    "read_array_record",
    "read_parquet_record",
    "write_array_record",
    "write_parquet_record",
]
