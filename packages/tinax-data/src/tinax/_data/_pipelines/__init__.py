"""Pipelines over record sources: batches, their iterator states, re-deals, planned reads, workers."""
