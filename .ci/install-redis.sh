#!/usr/bin/env bash
# Installs redis-server for the asynq import tests (internal/importer):
# each test starts a private server of its own on a free loopback port, so
# nothing needs to run after this. Without the binary those tests skip.
set -euo pipefail
if ! command -v redis-server >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
fi
redis-server --version
