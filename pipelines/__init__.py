"""Streaming ingest: Kafka topics into the Parquet lake, with quarantine of bad messages."""
