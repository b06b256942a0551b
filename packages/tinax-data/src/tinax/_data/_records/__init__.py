"""Record files: the tinax record format, the Parquet and ArrayRecord readers and writers, file sets."""
