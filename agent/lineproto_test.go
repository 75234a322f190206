package agent

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseLineProtocol(t *testing.T) {
	type want struct {
		metric string
		value  float64
		tags   string // k=v,k=v
	}
	cases := []struct {
		name    string
		line    string
		want    []want
		ts      time.Time
		skipped int
		err     string
	}{
		{name: "one float field", line: "cpu,host=a usage=0.5", want: []want{{"cpu.usage", 0.5, "host=a"}}},
		{name: "value field keeps the measurement", line: "temp value=21.5", want: []want{{"temp", 21.5, ""}}},
		{name: "int uint bool", line: "m a=3i,b=4u,c=t,d=FALSE", want: []want{{"m.a", 3, ""}, {"m.b", 4, ""}, {"m.c", 1, ""}, {"m.d", 0, ""}}},
		{name: "timestamp ns", line: "m v=1 1700000000000000001", want: []want{{"m.v", 1, ""}}, ts: time.Unix(0, 1700000000000000001)},
		{name: "escapes", line: `my\ cpu,ho\,st=a\ b\=c us\=e=1`, want: []want{{"my cpu.us=e", 1, "ho,st=a b=c"}}},
		{name: "string field skipped", line: `log,level=x msg="a, b=c d",n=2i`, want: []want{{"log.n", 2, "level=x"}}, skipped: 1},
		{name: "two tags", line: "m,a=1,b=2 v=1", want: []want{{"m.v", 1, "a=1,b=2"}}},
		{name: "extra spaces", line: "  m v=1   1700000000000000000  ", want: []want{{"m.v", 1, ""}}, ts: time.Unix(0, 1700000000000000000)},
		{name: "blank", line: "   "},
		{name: "comment", line: "# hello"},
		{name: "no fields", line: "cpu", err: "no fields"},
		{name: "field without value", line: "cpu usage", err: "not key=value"},
		{name: "bad number", line: "cpu usage=abc", err: "not a finite number"},
		{name: "NaN", line: "cpu usage=NaN", err: "not a finite number"},
		{name: "bad int", line: "cpu n=1.5i", err: "not an integer"},
		{name: "bad timestamp", line: "cpu v=1 yesterday", err: "timestamp"},
		{name: "bad tag", line: "cpu,host v=1", err: "tag"},
		{name: "only strings", line: `m s="x"`, err: "no numeric field", skipped: 1},
		{name: "empty measurement", line: ",a=b v=1", err: "empty measurement"},
		{name: "timestamp out of range", line: "m v=1 1", err: "outside"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pts, skipped, err := parseLineProtocol([]byte(c.line))
			if skipped != c.skipped {
				t.Errorf("skipped %d, want %d", skipped, c.skipped)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrBadEvent) {
					t.Fatalf("err %v, want one containing %q wrapping ErrBadEvent", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pts) != len(c.want) {
				t.Fatalf("got %d points, want %d: %+v", len(pts), len(c.want), pts)
			}
			for i, w := range c.want {
				p := pts[i]
				var tags []string
				for _, tg := range p.tags {
					tags = append(tags, tg.Key+"="+tg.Value)
				}
				if p.metric != w.metric || p.value != w.value || strings.Join(tags, ",") != w.tags || !p.ts.Equal(c.ts) {
					t.Errorf("point %d = %q %v %v %v, want %q %v %q %v", i, p.metric, p.value, tags, p.ts, w.metric, w.value, w.tags, c.ts)
				}
			}
		})
	}
}

// FuzzParseLineProtocol checks the parser never panics and that whatever it
// accepts passes the wire limits.
func FuzzParseLineProtocol(f *testing.F) {
	for _, s := range []string{"cpu,host=a usage=0.5 1700000000000000000", `m\ x,a\,b=c\=d f="s\"q",g=1i,h=t`, "m v=1u", "# c", "", `m s="unterminated`, `\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		pts, _, err := parseLineProtocol(line)
		if err != nil {
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("error %v does not wrap ErrBadEvent", err)
			}
			return
		}
		for _, p := range pts {
			if err := checkPoint(&p); err != nil {
				t.Fatalf("accepted a point that fails the checks: %v", err)
			}
		}
	})
}
