package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// qemuEnv enables TestQEMUSmoke; scripts/qemu-smoke.sh sets it.
const qemuEnv = "EDGEFLOW_QEMU"

// TestQEMUSmoke runs the smoke scenario with the ARMv7 and arm64 agent
// binaries under qemu-user (Debian's qemu-user-static) against a native
// hubd on loopback. It runs only with EDGEFLOW_QEMU=1.
func TestQEMUSmoke(t *testing.T) {
	if os.Getenv(qemuEnv) == "" {
		t.Skip("set " + qemuEnv + "=1 (scripts/qemu-smoke.sh) to run the ARM binaries under qemu-user")
	}
	for _, c := range []struct{ goarch, qemu string }{{"arm", "qemu-arm-static"}, {"arm64", "qemu-aarch64-static"}} {
		t.Run(c.goarch, func(t *testing.T) {
			q, err := exec.LookPath(c.qemu)
			if err != nil {
				t.Fatalf("%s not found (apt-get install qemu-user-static): %v", c.qemu, err)
			}
			bin := buildBinary(t, "edgeflow/cmd/edgeagent", c.goarch)
			if out, err := exec.Command(q, bin, "--version").CombinedOutput(); err != nil {
				t.Fatalf("%s %s --version: %v: %s", c.qemu, bin, err, out)
			} else {
				t.Logf("%s", out)
			}
			smokeScenario(t, []string{q}, bin, 3*time.Minute)
		})
	}
}
