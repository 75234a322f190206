package main

import (
	"slices"
	"testing"

	"edgeflow/internal/configdoc"
)

// TestConfigDoc checks docs/CONFIG.md against every flag and aggregate
// key hubd registers, and the "hubd query" section against the flags of
// `hubd query`, so the reference cannot drift from the code.
func TestConfigDoc(t *testing.T) {
	doc, err := configdoc.Read("../../docs/CONFIG.md", "hubd")
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{"rules", "alert_outputs"}
	for _, k := range slices.Concat(aggDurationKeys, aggIntKeys, aggOtherKeys) {
		extra = append(extra, "aggregate."+k)
	}
	for _, k := range aggWindowKeys {
		extra = append(extra, "aggregate.windows[]."+k)
	}
	for _, k := range aggDownsampleKeys {
		extra = append(extra, "aggregate.downsample[]."+k)
	}
	for _, p := range configdoc.Check(doc, newFlags(), extra) {
		t.Error(p)
	}
	doc, err = configdoc.Read("../../docs/CONFIG.md", "hubd query")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range configdoc.Check(doc, newQueryFlags(), nil) {
		t.Error("hubd query: " + p)
	}
}
