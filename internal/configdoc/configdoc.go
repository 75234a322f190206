// Package configdoc reads docs/CONFIG.md, the configuration reference of
// the binaries, so that tests next to each binary's flags can check the
// page against the keys the code registers (Check) and the two cannot
// drift apart.
package configdoc

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Entry is one documented key: its default as the page shows it ("" for
// the "–" of no default, else the text inside the backticks).
type Entry struct {
	Key, Default string
}

// row matches a table row whose first cell is a backticked key.
var row = regexp.MustCompile("^\\| `([a-z0-9_.\\[\\]-]+)` \\| ([^|]*) \\|")

// Read returns the keys documented in the "## section" part of the page
// at path (up to the next "## " heading), in page order.
func Read(path, section string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line[3:]) == section
			continue
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			def := strings.TrimSpace(m[2])
			switch {
			case def == "–" || def == "none":
				def = ""
			case strings.HasPrefix(def, "`") && strings.HasSuffix(def, "`"):
				def = strings.Trim(def, "`")
			}
			out = append(out, Entry{Key: m[1], Default: def})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no keys under \"## %s\"", path, section)
	}
	return out, nil
}

// Check compares the documented keys with the flags of fs and the other
// keys the binary accepts (extra: keys without a flag, such as a YAML
// section's). It returns one message per difference: a key registered
// but not documented, documented but not registered, documented twice,
// or a flag whose documented default is not its default.
func Check(doc []Entry, fs *pflag.FlagSet, extra []string) []string {
	var problems []string
	documented := map[string]Entry{}
	for _, e := range doc {
		if _, dup := documented[e.Key]; dup {
			problems = append(problems, fmt.Sprintf("%s: documented twice", e.Key))
		}
		documented[e.Key] = e
	}
	registered := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		registered[f.Name] = true
		e, ok := documented[f.Name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: a flag that docs/CONFIG.md does not list (add a row: key, default, what)", f.Name))
		case e.Default != f.DefValue:
			problems = append(problems, fmt.Sprintf("%s: docs/CONFIG.md says the default is %q, the code %q", f.Name, e.Default, f.DefValue))
		}
	})
	for _, k := range extra {
		registered[k] = true
		if _, ok := documented[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s: a config key that docs/CONFIG.md does not list", k))
		}
	}
	for _, e := range doc {
		if !registered[e.Key] {
			problems = append(problems, fmt.Sprintf("%s: documented in docs/CONFIG.md but the code registers no such key", e.Key))
		}
	}
	slices.Sort(problems)
	return problems
}
