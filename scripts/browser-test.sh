#!/usr/bin/env bash
# Browser tests of hubd's dashboard (also with a read token): installs Debian's chromium if it is
# missing, then runs TestDashboardInBrowser (a hub fed by a small simulated
# fleet, loaded in headless Chromium; the table, the chart and the firing
# alerts are checked against the API, and a buffer alert is followed through
# the stream). Screenshots go to $EDGEFLOW_SCREENSHOT_DIR (default
# dist/screenshots). EDGEFLOW_UPDATE_DOCS_SCREENSHOT=1 also rewrites
# docs/dashboard.png from a longer run (about 3 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

if [ -z "${EDGEFLOW_CHROMIUM:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium
fi

export EDGEFLOW_SCREENSHOT_DIR="${EDGEFLOW_SCREENSHOT_DIR:-$PWD/dist/screenshots}"
mkdir -p "$EDGEFLOW_SCREENSHOT_DIR"
# -count=1: a cached pass would not take new screenshots.
go test ./dashboard -run 'TestDashboardInBrowser|TestDashboardWithReadToken' -count=1 -v -timeout 10m
echo "screenshots: $EDGEFLOW_SCREENSHOT_DIR"
