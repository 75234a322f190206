#!/bin/sh
# Builds static (CGO_ENABLED=0) binaries into dist/ with the version
# stamped in: edgeagent for linux/arm (ARMv7), linux/arm64 and linux/amd64;
# hubd, a server program, for linux/arm64 and linux/amd64.
#
#   scripts/cross.sh                 # version from git describe
#   VERSION=v1.2.3 scripts/cross.sh
#   TARGETS="linux/arm" BINARIES="edgeagent" scripts/cross.sh
set -eu
cd "$(dirname "$0")/.."
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
TARGETS=${TARGETS:-"linux/arm linux/arm64 linux/amd64"}
BINARIES=${BINARIES:-"edgeagent hubd"}
HUBD_TARGETS=${HUBD_TARGETS:-"linux/arm64 linux/amd64"}
OUT=${OUT:-dist}
mkdir -p "$OUT"
for target in $TARGETS; do
	os=${target%/*}
	arch=${target#*/}
	for bin in $BINARIES; do
		if [ "$bin" = hubd ] && ! echo " $HUBD_TARGETS " | grep -q " $target "; then
			continue
		fi
		out="$OUT/$bin-$os-$arch"
		# GOARM=7: ARMv7 with hardware floating point (Raspberry Pi 2 and
		# later, BeagleBone, most i.MX boards); ignored for other arches.
		CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOARM=7 \
			go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$out" "./cmd/$bin"
		printf '%-28s %8d bytes\n' "$out" "$(wc -c <"$out")"
	done
done
