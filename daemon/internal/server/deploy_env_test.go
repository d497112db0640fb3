package server

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envFileLine matches an assignment of an EnvironmentFile, active or
// commented out (an example): "NAME=VALUE" or "#NAME=VALUE".
var envFileLine = regexp.MustCompile(`^(#?)(CONSUMERD_[A-Z0-9_]+)=(.*)$`)

// TestDeployEnvFile checks deploy/systemd/consumerd.env, the environment
// file of the systemd unit, against serve's flags as the production code
// binds and reads them: every variable in it (set or commented out) is the
// mirror of a serve flag, every serve flag has its variable in it, none is
// set twice, the set ones make a configuration serve accepts, and every
// example value parses.
func TestDeployEnvFile(t *testing.T) {
	const file = "deploy/systemd/consumerd.env"
	b, err := os.ReadFile(filepath.Join("../../..", filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	cmd := &cobra.Command{Use: "serve"}
	cfg.Bind(cmd.Flags(), []string{"wordcount"})
	flags := map[string]string{} // variable -> flag
	cmd.Flags().VisitAll(func(f *pflag.Flag) { flags[cmdline.EnvName(f.Name)] = f.Name })

	active := map[string]string{}
	examples := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		m := envFileLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		name, value := m[2], m[3]
		if _, ok := flags[name]; !ok {
			t.Errorf("%s:%d: %s is not the variable of any serve flag", file, i+1, name)
			continue
		}
		if m[1] == "#" {
			examples[name] = value
			continue
		}
		if _, dup := active[name]; dup {
			t.Errorf("%s:%d: %s is set twice", file, i+1, name)
		}
		active[name] = value
	}
	var missing []string
	for name, flag := range flags {
		_, a := active[name]
		_, e := examples[name]
		if !a && !e {
			missing = append(missing, name+" (--"+flag+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s lacks %s: add it, commented out with its default or an example", file, m)
	}

	c, err := serveConfigFrom(t, nil, active)
	if err != nil {
		t.Fatalf("%s: the variables it sets: %v", file, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("%s: serve refuses the configuration it sets: %v", file, err)
	}
	for name, value := range examples {
		if _, err := serveConfigFrom(t, nil, map[string]string{name: value}); err != nil {
			t.Errorf("%s: example #%s=%s: %v", file, name, value, err)
		}
	}
}
