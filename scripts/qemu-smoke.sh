#!/bin/sh
# Runs the ARMv7 and arm64 edgeagent binaries under qemu-user against a
# native hubd on loopback (cmd/edgeagent TestQEMUSmoke): ingest over HTTP
# while the hub is down, SIGTERM and restart, upload when the hub is up,
# every event checked on the hub's /v1/devices/{id}. Installs Debian's
# qemu-user-static if it is missing. Takes a few minutes, most of it the
# two cross builds; bounded by -timeout.
set -eu
cd "$(dirname "$0")/.."
if ! command -v qemu-arm-static >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq qemu-user-static
fi
EDGEFLOW_QEMU=1 go test -count=1 -timeout 10m -run 'TestQEMUSmoke' -v ./cmd/edgeagent/
