"""Supervision of the local stack's processes: pid files under $FLOWLAKE_HOME/run,
logs under $FLOWLAKE_HOME/log, health checks, clean stop."""
