"""flowlake: passive flow analytics for network operators (nfcapd -> Kafka -> Spark -> Parquet)."""
__version__ = "0.1.0"
