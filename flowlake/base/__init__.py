"""The base every stage may import: configuration, logging, paths, process supervision,
the component contract, the Spark session factory. It imports no stage (import-linter)."""
