package natslog_test

import (
	"fmt"

	"edgeflow/hub/natslog"
)

// A device's batches arrive on its NATS subject and are stored in the
// partition the stream's transform computes, which PartitionOf repeats.
func ExamplePartitionOf() {
	for _, device := range []string{"dev-1", "site.7.pump"} {
		p := natslog.PartitionOf(device, natslog.DefaultPartitions)
		fmt.Println(natslog.BatchSubject(device), "->", natslog.PartitionFilter(p))
	}
	// Output:
	// edge.v1.dev-1.batch -> edgeflow.log.54.*
	// edge.v1.site//7//pump.batch -> edgeflow.log.53.*
}
