package sinks_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/viper"

	"edgeflow/hub/sinks"
)

// issueYAML is the documented example: it must load as it is.
const issueYAML = `
sinks:
  - name: windows
    kind: postgres_windows
    dsn: postgres://postgres@127.0.0.1:5432/test?sslmode=disable
    table: edgeflow_windows
    metrics: [temp]
    windows: [tumbling:1m]
    group_by: [device]
  - name: events
    kind: postgres_events
    dsn: postgres://postgres@127.0.0.1:5432/test?sslmode=disable
    table: edgeflow_events
`

func loadYAML(t *testing.T, y string) ([]sinks.Config, error) {
	t.Helper()
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(strings.NewReader(y)); err != nil {
		t.Fatal(err)
	}
	return sinks.Parse(v.Get("sinks"))
}

func TestParseIssueYAML(t *testing.T) {
	got, err := loadYAML(t, issueYAML)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d sinks", len(got))
	}
	w, e := got[0], got[1]
	if w.Name != "windows" || w.Kind != sinks.KindPostgresWindows || w.Table != "edgeflow_windows" ||
		strings.Join(w.Metrics, ",") != "temp" || strings.Join(w.Windows, ",") != "tumbling:1m" || strings.Join(w.GroupBy, ",") != "device" {
		t.Errorf("windows sink: %+v", w)
	}
	if e.Name != "events" || e.Kind != sinks.KindPostgresEvents || e.Table != "edgeflow_events" || e.DSN == "" {
		t.Errorf("events sink: %+v", e)
	}
	if w.PositionsTable != "edgeflow_sink_positions" || w.BatchEntries != 512 {
		t.Errorf("defaults not applied: %+v", w)
	}
}

func TestParseNATSSink(t *testing.T) {
	got, err := loadYAML(t, "sinks:\n- {name: updates, kind: nats, url: nats://127.0.0.1:4222, metrics: [temp], windows: [tumbling:1m], group_by: [device]}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c := got[0]; c.Kind != sinks.KindNATS || c.Stream != "EDGEFLOW_SINKS" || c.Subject != "edgeflow.sink.updates" || c.URL == "" {
		t.Errorf("nats sink: %+v", c)
	}
}

func TestParseMQTTSink(t *testing.T) {
	got, err := loadYAML(t, "sinks:\n- {name: updates, kind: mqtt, url: tcp://127.0.0.1:1883, events: true, metrics: [temp], windows: [tumbling:1m]}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c := got[0]; c.Kind != sinks.KindMQTT || c.Topic != "edgeflow/sink/updates" || !c.Events || c.PositionsTable != "edgeflow_sink_positions" {
		t.Errorf("mqtt sink: %+v", c)
	}
}

func TestParseSessionWindowOnPostgres(t *testing.T) {
	got, err := loadYAML(t, "sinks:\n- {name: w, kind: postgres_windows, dsn: x, table: t, metrics: [temp], windows: [session:30s]}\n")
	if err != nil || len(got) != 1 || got[0].Windows[0] != "session:30s" {
		t.Fatalf("postgres_windows with a session window: %+v, %v", got, err)
	}
}

func TestParseRejectsBadSinks(t *testing.T) {
	const dsn = "dsn: postgres://x@h/db\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // in the error
	}{
		{"unknown kind", "sinks:\n- name: a\n  kind: kafka\n  " + dsn + "  table: t\n", []string{`"a"`, `"kind"`, "kafka"}},
		{"unknown key", "sinks:\n- name: a\n  kind: postgres_events\n  " + dsn + "  tabel: t\n", []string{`"a"`, `"tabel"`}},
		{"missing table", "sinks:\n- name: a\n  kind: postgres_events\n  " + dsn, []string{`"a"`, `"table"`}},
		{"missing dsn", "sinks:\n- name: a\n  kind: postgres_events\n  table: t\n", []string{`"a"`, `"dsn"`}},
		{"no name", "sinks:\n- kind: postgres_events\n  " + dsn + "  table: t\n", []string{`"name"`}},
		{"duplicate name", "sinks:\n- {name: a, kind: postgres_events, dsn: x, table: t}\n- {name: a, kind: postgres_events, dsn: x, table: u}\n", []string{`"a"`, `"name"`}},
		{"no metrics", "sinks:\n- {name: w, kind: postgres_windows, dsn: x, table: t, windows: [tumbling:1m]}\n", []string{`"w"`, `"metrics"`}},
		{"bad window", "sinks:\n- {name: w, kind: postgres_windows, dsn: x, table: t, metrics: [temp], windows: [tumbling:xx]}\n", []string{`"w"`, `"windows"`}},
		{"session window on nats", "sinks:\n- {name: w, kind: nats, url: nats://h:4222, metrics: [temp], windows: [session:30s]}\n", []string{`"w"`, `"windows"`, "postgres_windows only"}},
		{"bad quantile", "sinks:\n- {name: w, kind: postgres_windows, dsn: x, table: t, metrics: [temp], windows: [tumbling:1m], quantiles: [p42]}\n", []string{`"w"`, `"quantiles"`}},
		{"windows key on events", "sinks:\n- {name: e, kind: postgres_events, dsn: x, table: t, metrics: [temp]}\n", []string{`"e"`, `"metrics"`}},
		{"bad table", "sinks:\n- {name: e, kind: postgres_events, dsn: x, table: a.b.c}\n", []string{`"e"`, `"table"`}},
		{"bad duration", "sinks:\n- {name: e, kind: postgres_events, dsn: x, table: t, poll_interval: soon}\n", []string{`"e"`, `"poll_interval"`}},
		{"not a list", "sinks: 3\n", []string{`"sinks"`}},
		{"mqtt without url", "sinks:\n- {name: m, kind: mqtt, metrics: [temp], windows: [tumbling:1m]}\n", []string{`"m"`, `"url"`}},
		{"mqtt url scheme", "sinks:\n- {name: m, kind: mqtt, url: http://h:1883, metrics: [temp], windows: [tumbling:1m]}\n", []string{`"m"`, `"url"`, "scheme"}},
		{"mqtt topic wildcard", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, metrics: [temp], windows: [tumbling:1m], topic: a/+/b}\n", []string{`"m"`, `"topic"`, "wildcards"}},
		{"mqtt topic trailing slash", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, metrics: [temp], windows: [tumbling:1m], topic: a/b/}\n", []string{`"m"`, `"topic"`, "trailing"}},
		{"mqtt topic $", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, metrics: [temp], windows: [tumbling:1m], topic: $SYS/x}\n", []string{`"m"`, `"topic"`, "$"}},
		{"mqtt metric with a slash", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, metrics: [a/b], windows: [tumbling:1m]}\n", []string{`"m"`, `"metrics"`}},
		{"mqtt metric events", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, events: true, metrics: [events], windows: [tumbling:1m]}\n", []string{`"m"`, `"metrics"`, "event stream"}},
		{"mqtt events not a bool", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, metrics: [temp], windows: [tumbling:1m], events: maybe}\n", []string{`"m"`, `"events"`}},
		{"mqtt session window", "sinks:\n- {name: m, kind: mqtt, url: tcp://h:1883, metrics: [temp], windows: [session:30s]}\n", []string{`"m"`, `"windows"`, "cannot be taken back"}},
		{"events on postgres", "sinks:\n- {name: e, kind: postgres_events, dsn: x, table: t, events: true}\n", []string{`"e"`, `"events"`}},
		{"nats without url", "sinks:\n- {name: n, kind: nats, metrics: [temp], windows: [tumbling:1m]}\n", []string{`"n"`, `"url"`}},
		{"nats metric with a wildcard", "sinks:\n- {name: n, kind: nats, url: nats://h:4222, metrics: [te*mp], windows: [tumbling:1m]}\n", []string{`"n"`, `"metrics"`}},
		{"nats table key", "sinks:\n- {name: n, kind: nats, url: nats://h:4222, table: t, metrics: [temp], windows: [tumbling:1m]}\n", []string{`"n"`, `"table"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadYAML(t, tc.yaml)
			if !errors.Is(err, sinks.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}
