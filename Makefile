# Build targets. `make cross` builds the static release binaries (see
# scripts/cross.sh); `make qemu-smoke` runs the ARM agents under qemu-user.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build test cross qemu-smoke footprint vet-arm clean

build:
	CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

test:
	go test ./...

# Static binaries for linux/arm (ARMv7), linux/arm64 and linux/amd64 in dist/.
cross:
	VERSION=$(VERSION) scripts/cross.sh

# ARMv7 and arm64 agent binaries under qemu-user against a hub on loopback.
qemu-smoke:
	scripts/qemu-smoke.sh

# RSS of an agent holding 1,000,000 buffered events (README "Edge agent").
footprint:
	scripts/footprint.sh

# 32-bit ARM: vet catches constants that overflow int and misaligned atomics.
vet-arm:
	GOARCH=arm GOARM=7 go vet ./...

clean:
	rm -rf bin dist
