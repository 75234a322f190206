// Package ranges holds RangeSet, the compact set of sequence numbers the
// hub keeps per stream: the ranges it has applied (its dedup state) and the
// gaps an agent reported. It is a data structure with its own encoding and
// nothing else, so the log, the registry and the API types can all use it
// without importing the hub.
package ranges
