package sinks

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The message sinks (nats, mqtt) publish two kinds of messages, each a
// JSON object with the columns of the matching table and an "id" that is
// the same every time the same update or event is published, so a
// consumer (and JetStream) can drop the duplicates that at-least-once
// delivery brings after a crash.

// updateMessage is the body and id of one window update (a row in
// windowsSchema order, names its column names). The id is
// sink|metric|window|group_key|start|final|revision, plus |log_position
// for a provisional update (one window changes many times before it is
// final).
func updateMessage(sink string, names []string, row []any) (metric string, body []byte, id string, err error) {
	m := make(map[string]any, len(row)+1)
	for i, v := range row {
		if names[i] == "group_key" {
			v = json.RawMessage(v.(string))
		}
		m[names[i]] = v
	}
	metric, window, group := row[0].(string), row[1].(string), row[2].(string)
	start := row[3].(time.Time)
	final, revision, pos := m["final"].(bool), m["revision"].(int32), m["log_position"].(int64)
	id = fmt.Sprintf("%s|%s|%s|%s|%s|%t|%d", sink, metric, window, group, start.UTC().Format(time.RFC3339Nano), final, revision)
	if !final {
		id += "|" + strconv.FormatInt(pos, 10)
	}
	m["id"] = id
	body, err = json.Marshal(m)
	return metric, body, id, err
}

// eventMessage is the body and id of one event (a row in eventsSchema
// order). The id is device/stream/seq: the hub applies each once.
func eventMessage(row []any) (body []byte, id string, err error) {
	names := eventsSchema().names()
	m := make(map[string]any, len(row)+1)
	for i, v := range row {
		m[names[i]] = v
	}
	id = fmt.Sprintf("%s/%s/%d", row[0].(string), row[1].(string), row[2].(int64))
	m["id"] = id
	body, err = json.Marshal(m)
	return body, id, err
}
