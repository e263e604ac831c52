"""What spark-submit runs on a Spark cluster: the `flowlake` command line it was given,
inside the driver spark-submit started (flowlake/base/spark.py, submit_if_cluster)."""
from flowlake.cli import run

if __name__ == "__main__":
    run()
