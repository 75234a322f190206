// Package testproc runs the project's binaries as real processes in
// tests: one place for how a test builds a command and runs it until it
// exits, so the three cmd packages' start-up tests read the same way.
package testproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Build builds the package pkg (an import path or a directory) into a
// directory of the test's and returns the binary's path.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	return bin
}

// RunToExit runs bin with args and env (added to the test's environment)
// until it exits, and returns its exit code and combined output. A
// process still running after within (one that started where it should
// have refused) is killed and fails the test.
func RunToExit(t testing.TB, bin string, args, env []string, within time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %q still running after %v (it started instead of refusing); output:\n%s", filepath.Base(bin), args, within, out.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// Kill crashes a process a test started (SIGKILL, not a shutdown) and
// waits up to within for exited, which the test closes once cmd.Wait has
// returned, so the crash is complete before the test goes on.
func Kill(cmd *exec.Cmd, exited <-chan struct{}, within time.Duration) error {
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(within):
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", cmd.Process.Pid, within)
	}
}
