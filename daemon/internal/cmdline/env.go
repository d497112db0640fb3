package cmdline

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix prefixes every flag's environment mirror.
const envPrefix = "CONSUMERD_"

// EnvName is the environment variable that mirrors flag name:
// "etcd.lease-ttl" -> "CONSUMERD_ETCD_LEASE_TTL".
func EnvName(flag string) string {
	r := strings.NewReplacer(".", "_", "-", "_")
	return envPrefix + strings.ToUpper(r.Replace(flag))
}

// envOnlyAnnotation marks a setting that has an environment variable but
// no command-line flag: a secret (a command line is visible to every user
// of the host). It is registered as a hidden flag, so ApplyEnv sets it like
// any other, and refused on the command line.
const envOnlyAnnotation = "consumerd-env-only"

// BindEnvOnly registers the env-only setting name (its variable is
// EnvName(name)) on fs.
func BindEnvOnly(fs *pflag.FlagSet, p *string, name, usage string) {
	fs.StringVar(p, name, "", usage)
	_ = fs.SetAnnotation(name, envOnlyAnnotation, []string{"true"})
	_ = fs.MarkHidden(name)
}

// AnnotateEnv appends the env mirror's name to each flag's usage text, so
// `--help` shows it.
func AnnotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || strings.Contains(f.Usage, "[$"+envPrefix) {
			return
		}
		f.Usage = fmt.Sprintf("%s [$%s]", f.Usage, EnvName(f.Name))
	})
}

// ApplyEnv sets every flag of cmd (local and inherited) that was not given on
// the command line from its environment mirror, if that is set. A flag given
// on the command line wins over its env. A bad env value is an error naming
// the variable.
func ApplyEnv(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	var firstErr error
	visit := func(f *pflag.Flag) {
		if firstErr != nil || f.Name == "help" {
			return
		}
		if _, envOnly := f.Annotations[envOnlyAnnotation]; envOnly && f.Changed {
			firstErr = fmt.Errorf("--%s is not a command-line flag (a command line is visible to every user of the host): set $%s instead", f.Name, EnvName(f.Name))
			return
		}
		if f.Changed {
			return
		}
		name := EnvName(f.Name)
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
