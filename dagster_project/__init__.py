"""The omne Dagster code location: thin assets over the `pipelines` library."""
