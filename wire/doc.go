// Package wire holds the types that an agent and a hub exchange (events,
// batches, acks, time messages, status) and their framed, versioned binary
// encoding: a 4-byte header, a protobuf body (schema in wirepb/wire.proto)
// and zstd compression when it pays, or for batches the columnar codec
// (columns.go), which writes the same batch column by column.
//
// Every decoder in this package bounds sizes and counts before it allocates
// for them, so a hostile or corrupt payload costs at most Limits' worth of
// memory and gives an error that names what was wrong.
package wire

//go:generate protoc --go_out=. --go_opt=paths=source_relative wirepb/wire.proto
