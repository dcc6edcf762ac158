#!/usr/bin/env bash
# Makes sure redis-server is on PATH: the demo and the integration tests start their own
# servers from it. When it is missing, it is installed with apt-get (root only), saying so.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is not installed and apt-get is not available: install redis-server (6.0 or later) and retry" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "redis-server is not installed: run 'sudo apt-get install redis-server' (or this script as root) and retry" >&2
  exit 1
fi
echo "redis-server is not installed: running apt-get update and apt-get install -y redis-server" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq redis-server >/dev/null
echo "installed: $(redis-server --version)" >&2
