package configdoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestCheckFindsDrift(t *testing.T) {
	page := "# x\n\n## bin\n\n| key | default | what |\n|---|---|---|\n" +
		"| `a` | `1s` | ok |\n| `b` | – | ok |\n| `c` | `5` | wrong default |\n| `gone` | – | not registered |\n" +
		"| `sect.k` | `0` | extra key |\n\n## other\n\n| `x` | – | another binary |\n"
	path := filepath.Join(t.TempDir(), "CONFIG.md")
	if err := os.WriteFile(path, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := Read(path, "bin")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("bin", pflag.ContinueOnError)
	fs.String("a", "1s", "")
	fs.String("b", "", "")
	fs.Int("c", 4, "")
	fs.Bool("new", false, "")
	got := strings.Join(Check(doc, fs, []string{"sect.k", "sect.undocumented"}), "\n")
	for _, want := range []string{"c: docs/CONFIG.md says the default is \"5\", the code \"4\"",
		"gone: documented in docs/CONFIG.md but the code registers no such key",
		"new: a flag that docs/CONFIG.md does not list", "sect.undocumented: a config key that docs/CONFIG.md does not list"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if n := len(strings.Split(got, "\n")); n != 4 {
		t.Errorf("%d problems, want 4:\n%s", n, got)
	}
}
