package hubapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayLight holds the reason this package exists: a client of
// the query API (hubd query) gets the JSON types without the hub's store,
// its broker or the hub itself.
func TestImportsStayLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/dgraph-io/badger", "github.com/mochi-mqtt", "github.com/eclipse/paho", "edgeflow/hub/hublog", "edgeflow/hub/broker"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("hubapi depends on %s", dep)
			}
		}
		if dep == "edgeflow/hub" {
			t.Error("hubapi depends on the hub package")
		}
	}
}
