package daemon

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix prefixes every flag's environment mirror.
const envPrefix = "CONSUMERD_"

// envName is the environment variable that mirrors flag name:
// "etcd.lease-ttl" -> "CONSUMERD_ETCD_LEASE_TTL".
func envName(flag string) string {
	r := strings.NewReplacer(".", "_", "-", "_")
	return envPrefix + strings.ToUpper(r.Replace(flag))
}

// annotateEnv appends the env mirror's name to each flag's usage text, so
// `--help` shows it.
func annotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || strings.Contains(f.Usage, "[$"+envPrefix) {
			return
		}
		f.Usage = fmt.Sprintf("%s [$%s]", f.Usage, envName(f.Name))
	})
}

// applyEnv sets every flag of cmd (local and inherited) that was not given on
// the command line from its environment mirror, if that is set. A flag given
// on the command line wins over its env. A bad env value is an error naming
// the variable.
func applyEnv(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	var firstErr error
	visit := func(f *pflag.Flag) {
		if firstErr != nil || f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			firstErr = fmt.Errorf("environment %s=%q (mirror of --%s): %w", name, v, f.Name, err)
			return
		}
		f.Changed = true
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return firstErr
}
