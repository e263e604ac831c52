#!/usr/bin/env bash
# Idempotent set-up: Debian packages, the Python virtualenv, JVM jars, the Go programs,
# Superset's own virtualenv. A second run only checks stamps and takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
say() { printf '\033[1;34m==> %s\033[0m\n' "$*"; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# --- Debian packages ---------------------------------------------------------------
APT_PACKAGES="nfdump softflowd iperf3 fping iputils-ping chromium chromium-driver kcat iproute2 tcpdump maven openjdk-17-jdk-headless python3-venv docker-compose openssl snmpd snmp dnsmasq-base gobgpd pmacct nfdump-sflow openvswitch-switch ethtool"
missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# --- Python virtualenv ---------------------------------------------------------------
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
req_hash=$(cat requirements.txt setup.py pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat .venv/.flowlake-req 2>/dev/null)" != "$req_hash" ]; then
  say "installing Python dependencies (pinned, requirements.txt)"
  .venv/bin/pip install -q --upgrade pip wheel setuptools
  .venv/bin/pip install -q -r requirements.txt
  .venv/bin/pip install -q --no-deps -e .
  echo "$req_hash" > .venv/.flowlake-req
fi

# --- JVM jars (Kafka broker, Spark connectors, Delta Lake) ----------------------------------
fetch_jars() {  # $1 = pom folder, $2 = target
  local stamp="$2/.pom-hash" h
  h=$(sha256sum "jvm/$1/pom.xml" | cut -c1-16)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$h" ]; then
    say "fetching $1 jars with Maven into $2"
    rm -rf "$2"; mkdir -p "$2"
    (cd "jvm/$1" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$ROOT/$2")
    echo "$h" > "$stamp"
  fi
}
fetch_jars kafka .jars/kafka
fetch_jars spark .jars/spark
fetch_jars delta .jars/delta   # loaded only by a session that asks for Delta (flowlake/base/delta.py)

# --- Go programs: the shipper, the top-talkers kernel, the BMP collector (flowlake/base/gobuild.py) -----------------------------------
export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null; then
  echo "Go (>= $(sed -n 's/^go //p' collectors/shipper/go.mod)) is needed to build the shipper: install it from go.dev or your distribution" >&2
  exit 1
fi
.venv/bin/python -m flowlake.base.gobuild
.venv/bin/python -m flowlake.jobs.query.standalone   # the filter parser with its LALR tables built in (fast start)

# --- Superset (own virtualenv: its pins clash with Spark's) --------------------------------
if [ -x scripts/setup-superset.sh ]; then
  scripts/setup-superset.sh
fi
say "setup complete"
