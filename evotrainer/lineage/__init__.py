"""The lineage: projections of the log, SQL over them, the in-memory branch graph."""
