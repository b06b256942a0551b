"""The implementation of :mod:`tinax.data`. Private: import from the public module.

``_records`` holds the files (the record format, the Parquet and ArrayRecord
readers and writers); ``_pipelines`` the batches built over them. The modules
beside them serve both: splits, stacking, grain's private names, 0.2's errors.
"""
