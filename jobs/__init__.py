"""Spark batch jobs. Each job module defines NAME, TABLES (schemas Records it writes),
optional DEPENDS (job names that must run first) and `run(ctx)`; the pure transforms
(DataFrame in, DataFrame out) live beside it so tests call them on small frames."""
