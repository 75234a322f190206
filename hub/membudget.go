package hub

import (
	"edgeflow/hub/hublog"
	"edgeflow/hub/membudget"
)

// applyMemory fills the zero fields that Options.Memory sizes; a field set
// explicitly keeps its value.
func (o *Options) applyMemory() {
	m := o.Memory
	setDefault(&o.QueueLen, m.QueueLen)
	setDefault(&o.MaxGroupBytes, m.MaxGroupBytes)
	setDefault(&o.MaxGroupBatches, m.MaxGroupBatches)
	setDefault(&o.MQTTClientQueue, m.ClientQueue)
	if o.Aggregate == nil {
		return
	}
	a := *o.Aggregate // the caller's options stay as they were
	setDefault(&a.MaxLivePartials, m.MaxLivePartials)
	setDefault(&a.QueryCachePartials, m.QueryCachePartials)
	setDefault(&a.MaxPending, m.MaxPending)
	setDefault(&a.StreamBuffer, m.StreamBuffer)
	setDefault(&a.EvictAfter, m.EvictAfter)
	o.Aggregate = &a
}

// badgerSizes are the store's sizes from the memory budget.
func badgerSizes(m membudget.Sizes) hublog.Sizes {
	return hublog.Sizes{MemTable: m.BadgerMemTable, MemTables: m.BadgerMemTables, BlockCache: m.BadgerBlockCache,
		IndexCache: m.BadgerIndexCache, ValueLogFile: m.BadgerValueLogFile}
}
