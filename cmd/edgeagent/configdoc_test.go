package main

import (
	"testing"

	"edgeflow/internal/configdoc"
)

// TestConfigDoc checks docs/CONFIG.md against every flag edgeagent
// registers, so the reference cannot drift from the code.
func TestConfigDoc(t *testing.T) {
	doc, err := configdoc.Read("../../docs/CONFIG.md", "edgeagent")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range configdoc.Check(doc, newFlags(), nil) {
		t.Error(p)
	}
}
