#!/bin/sh
# nfcapd + flowlake-shipper in one container (collectors/Dockerfile). Settings are the
# same FLOWLAKE_* variables as flowlake.toml; the FLOW schema and its fingerprint were
# generated from schemas/flow.py at image build time.
set -eu
: "${FLOWLAKE_HOME:=/var/lib/flowlake}"
: "${FLOWLAKE_KAFKA_BOOTSTRAP:=kafka:9092}"
: "${FLOWLAKE_KAFKA_FLOWS_TOPIC:=flows.v1}"
: "${FLOWLAKE_KAFKA_LEDGER_TOPIC:=flowlake.ledger}"
: "${FLOWLAKE_KAFKA_SECURITY_PROTOCOL:=PLAINTEXT}"
: "${FLOWLAKE_KAFKA_SASL_MECHANISM:=PLAIN}"
: "${FLOWLAKE_KAFKA_SASL_USERNAME:=}"
: "${FLOWLAKE_KAFKA_SSL_CAFILE:=}"
: "${FLOWLAKE_COLLECTOR_BIND:=0.0.0.0}"
: "${FLOWLAKE_COLLECTOR_PORT:=2055}"
: "${FLOWLAKE_COLLECTOR_ROTATE_SECONDS:=10}"
: "${FLOWLAKE_COLLECTOR_SOCKET_BUFFER:=8388608}"
: "${FLOWLAKE_SHIPPER_LINGER_MS:=20}"
: "${FLOWLAKE_SHIPPER_BATCH_RECORDS:=65536}"
: "${FLOWLAKE_SHIPPER_BATCH_BYTES:=1000000}"   # fits a broker with default message.max.bytes
: "${FLOWLAKE_SHIPPER_COMPRESSION:=lz4}"
: "${FLOWLAKE_SHIPPER_TXN_TIMEOUT_SECONDS:=300}"
: "${FLOWLAKE_SHIPPER_DELETE_AFTER_SHIP:=false}"

spool="$FLOWLAKE_HOME/nfcapd"
mkdir -p "$spool" "$FLOWLAKE_HOME/state" "$FLOWLAKE_HOME/run" "$FLOWLAKE_HOME/lake/quarantine/nfcapd"

# The sampling tap first (raw socket: the image gives the binary cap_net_raw), so no
# router's sampling announcement is missed; without it rates come from the files alone.
mkdir -p "$FLOWLAKE_HOME/state/sampling"
flowlake-shipper tap --bind "$FLOWLAKE_COLLECTOR_BIND" --port "$FLOWLAKE_COLLECTOR_PORT" \
    --dir "$FLOWLAKE_HOME/state/sampling" &
tap_pid=$!

nfcapd -b "$FLOWLAKE_COLLECTOR_BIND" -p "$FLOWLAKE_COLLECTOR_PORT" -w "$spool" \
    -t "$FLOWLAKE_COLLECTOR_ROTATE_SECONDS" -B "$FLOWLAKE_COLLECTOR_SOCKET_BUFFER" -I flowlake &
nfcapd_pid=$!

set -- serve \
    --brokers "$FLOWLAKE_KAFKA_BOOTSTRAP" \
    --topic "$FLOWLAKE_KAFKA_FLOWS_TOPIC" --ledger-topic "$FLOWLAKE_KAFKA_LEDGER_TOPIC" \
    --security-protocol "$FLOWLAKE_KAFKA_SECURITY_PROTOCOL" \
    --sasl-mechanism "$FLOWLAKE_KAFKA_SASL_MECHANISM" --sasl-username "$FLOWLAKE_KAFKA_SASL_USERNAME" \
    --ssl-cafile "$FLOWLAKE_KAFKA_SSL_CAFILE" \
    --spool "$spool" --state "$FLOWLAKE_HOME/state/shipper.json" \
    --quarantine "$FLOWLAKE_HOME/lake/quarantine/nfcapd" --lock "$FLOWLAKE_HOME/run/shipper.lock" \
    --linger "${FLOWLAKE_SHIPPER_LINGER_MS}ms" --max-buffered "$FLOWLAKE_SHIPPER_BATCH_RECORDS" \
    --batch-bytes "$FLOWLAKE_SHIPPER_BATCH_BYTES" \
    --compression "$FLOWLAKE_SHIPPER_COMPRESSION" --txn-timeout "${FLOWLAKE_SHIPPER_TXN_TIMEOUT_SECONDS}s" \
    --schema /etc/flowlake/flow.avsc --fingerprint "$(cat /etc/flowlake/flow.fingerprint)" \
    --tap-dir "$FLOWLAKE_HOME/state/sampling"
case "$FLOWLAKE_SHIPPER_DELETE_AFTER_SHIP" in 1|true|yes|on) set -- "$@" --delete-after-ship ;; esac
flowlake-shipper "$@" &
shipper_pid=$!

# SIGTERM: nfcapd closes its current file, then the shipper finishes or aborts cleanly.
trap 'kill -TERM "$nfcapd_pid" 2>/dev/null; wait "$nfcapd_pid" 2>/dev/null; kill -TERM "$tap_pid" 2>/dev/null; kill -TERM "$shipper_pid" 2>/dev/null; wait "$shipper_pid"; exit 0' TERM INT
# If either process dies the container exits, so the orchestrator restarts both.
while kill -0 "$nfcapd_pid" 2>/dev/null && kill -0 "$shipper_pid" 2>/dev/null; do sleep 2; done
echo "flowlake collector: nfcapd or the shipper exited; stopping" >&2
kill -TERM "$nfcapd_pid" "$shipper_pid" 2>/dev/null || true
wait
exit 1
