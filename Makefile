# Build targets. `make demo` runs a hub with a simulated fleet (dashboard on
# http://localhost:8080/); `make cross` builds the static release binaries
# (see scripts/cross.sh); `make qemu-smoke` runs the ARM agents under qemu-user.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build test bench demo browser-test cross qemu-smoke footprint vet-arm clean

build:
	CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

test:
	go test ./...

# Benchmarks: by default one iteration of every benchmark, a quick check
# that they all run; for figures narrow and lengthen them, e.g.
# `make bench PKG=./hub BENCH=Ingest BENCHTIME=3000x` (the docs name the
# command behind each figure).
PKG ?= ./...
BENCH ?= .
BENCHTIME ?= 1x
bench:
	go test $(PKG) -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME)

# The hub plus 20 simulated devices; the embedded broker on :1884 because
# many machines already run a Mosquitto on 1883. Ctrl-C stops it.
demo:
	go run ./cmd/hubd --demo --mqtt-listen :1884

# The dashboard in headless Chromium (installs Debian's chromium if missing).
browser-test:
	scripts/browser-test.sh

# Static binaries for linux/arm (ARMv7), linux/arm64 and linux/amd64 in dist/.
cross:
	VERSION=$(VERSION) scripts/cross.sh

# ARMv7 and arm64 agent binaries under qemu-user against a hub on loopback.
qemu-smoke:
	scripts/qemu-smoke.sh

# RSS of an agent holding 1,000,000 buffered events (docs/AGENT.md, "Footprint").
footprint:
	scripts/footprint.sh

# 32-bit ARM: vet catches constants that overflow int and misaligned atomics.
vet-arm:
	GOARCH=arm GOARM=7 go vet ./...

clean:
	rm -rf bin dist
