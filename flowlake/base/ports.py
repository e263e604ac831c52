"""Free loopback ports and the environment of a private stack (tests, fault harness,
benchmarks): its own FLOWLAKE_HOME and ports, so it never touches another stack."""
from __future__ import annotations

import socket
from pathlib import Path


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_env(home: Path | str) -> dict[str, str]:
    """FLOWLAKE_* settings for a small, fast private stack under `home`."""
    return {
        "FLOWLAKE_HOME": str(home),
        "FLOWLAKE_KAFKA_PORT": str(free_port()),
        "FLOWLAKE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "FLOWLAKE_COLLECTOR_PORT": str(free_port(socket.SOCK_DGRAM)),
        "FLOWLAKE_COLLECTOR_SFLOW_PORT": str(free_port(socket.SOCK_DGRAM)),
        "FLOWLAKE_SUPERSET_PORT": str(free_port()),
        "FLOWLAKE_METRICS_PORT": str(free_port()),
        "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": "2",
        "FLOWLAKE_SPARK_TRIGGER_SECONDS": "2",
        "FLOWLAKE_KAFKA_HEAP": "512m",
        "FLOWLAKE_SPARK_DRIVER_MEMORY": "1g",
        # test traffic carries fixed past dates (pcapgen: 2025-11-20): keep it whatever its age
        "FLOWLAKE_RETENTION_FLOWS_DAYS": "0",
        "FLOWLAKE_RETENTION_QUARANTINE_DAYS": "0",
        # reverse DNS stays on loopback: a port nothing answers on, and a short budget
        # (tests that need names start dnsmasq: tests/services/dnsmasq.py)
        "FLOWLAKE_RDNS_SERVER": "127.0.0.1",
        "FLOWLAKE_RDNS_PORT": str(free_port(socket.SOCK_DGRAM)),
        "FLOWLAKE_RDNS_TIMEOUT_SECONDS": "0.5",
        "FLOWLAKE_RDNS_BUDGET_SECONDS": "2",
    }
