package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/spf13/cobra"
)

func newQueryCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var appName, key string
	var all bool
	cmd := &cobra.Command{
		Use:   "query --app A (--key K | --all)",
		Short: "Read an app's state from its shard primaries over HTTP",
		Long: `query asks the primary of every shard of app A (found in etcd) over HTTP and
merges the answers with the app's Merge (wordcount sums the counts).
  --key K   prints K's merged value; exit 1 when no shard has K
  --all     prints every key and its merged value, "key value" per line, sorted by key
A shard without a serving primary is an error (after retrying for --dial-timeout,
as during a failover): the answer is never partial.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			app, err := opts.app(appName)
			if err != nil {
				return usageError{fmt.Errorf("--app: %w", err)}
			}
			if all == cmd.Flags().Changed("key") {
				return usagef("give exactly one of --key K or --all")
			}
			ctx := cmd.Context()
			cli, err := cf.etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			// A shard may be between primaries (failover, handoff): retry
			// with a fresh view of the keyspace until --dial-timeout passed.
			hc := &http.Client{Timeout: 4 * cf.dialTimeout}
			deadline := time.Now().Add(cf.dialTimeout)
			var vals map[string]string
			wait := retry.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond}.Start()
			for {
				snap, err := loadSnapshot(ctx, cli, cf.etcdPrefix)
				if err != nil {
					return err
				}
				qctx, cancel := context.WithTimeout(ctx, 4*cf.dialTimeout)
				vals, err = gather(qctx, hc, snap, app, key, all)
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) || wait.Wait(ctx, nil) != nil {
					return err
				}
			}
			if all {
				return writeKeyValues(cmd.OutOrStdout(), vals)
			}
			v, ok := vals[key]
			if !ok {
				return fmt.Errorf("key %q not found in app %s", key, app.Name)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), v)
			return err
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&appName, "app", "", "application to query (required)")
	cmd.Flags().StringVar(&key, "key", "", "key to look up")
	cmd.Flags().BoolVar(&all, "all", false, "print every key")
	_ = cmd.MarkFlagRequired("app")
	return cmd
}

// writeKeyValues prints "key value" lines sorted by key.
func writeKeyValues(w io.Writer, vals map[string]string) error {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%s %s\n", k, vals[k]); err != nil {
			return err
		}
	}
	return nil
}
