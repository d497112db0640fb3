package cli

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/daemon/api"
	"github.com/consumerd/consumerd/daemon/internal/cluster"
	"github.com/consumerd/consumerd/daemon/internal/cmdline"
	"github.com/consumerd/consumerd/daemon/internal/connect"
	"github.com/consumerd/consumerd/daemon/internal/query"
	"github.com/consumerd/consumerd/internal/retry"
	"github.com/consumerd/consumerd/topic"
	"github.com/spf13/cobra"
)

func newQueryCommand(prog cmdline.Program) *cobra.Command {
	var cf connect.ClientFlags
	var appName, key, keyHex string
	var all, hexKeys, partial bool
	cmd := &cobra.Command{
		Use:   "query --app A (--key K | --key-hex HEX | --all [--hex-keys])",
		Short: "Read an app's state from its shard primaries over HTTP",
		Long: `query asks the shard primaries of app A (found in etcd) over HTTP and merges the
answers with the app's Merge (wordcount sums the counts).
  --key K         prints K's merged value; exit 1 when no shard has K. The
                  empty key (--key "") is a key like any other.
  --key-hex HEX   the same for the key whose bytes are HEX (e.g. ff00 for the
                  two bytes 0xff 0x00): for keys that are not text
  --all           prints every key and its merged value, "key value" per
                  line, sorted by the keys' bytes; keys and values are
                  written as their raw bytes, so a key that is not UTF-8 or
                  holds a space or a control character is ambiguous there
                  (a warning says how many): --hex-keys prints each key as
                  hex instead (the empty key as an empty field)
A key query of an app keyed by a topic (App.KeyedBy) asks only the shard(s)
reading the key's partition of that topic; other queries ask every shard.
A shard without a serving primary is an error (after retrying for --dial-timeout,
as during a failover), and so is a shard spec in etcd that does not decode
(its shard is not running): the answer is never silently partial. With
--partial, invalid shard specs are reported on stderr and the answer is built
from the shards that are valid.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			app, err := prog.App(appName)
			if err != nil {
				return cmdline.Usage(fmt.Errorf("--app: %w", err))
			}
			byKey, byHex := cmd.Flags().Changed("key"), cmd.Flags().Changed("key-hex")
			if n := cmdline.CountTrue(all) + cmdline.CountTrue(byKey) + cmdline.CountTrue(byHex); n != 1 {
				return cmdline.Usagef("give exactly one of --key K, --key-hex HEX or --all")
			}
			if byHex {
				b, err := hex.DecodeString(keyHex)
				if err != nil {
					return cmdline.Usagef("--key-hex: %q is not hex (two digits 0-9a-f per byte): %v", keyHex, err)
				}
				key = string(b)
			}
			if hexKeys && !all {
				return cmdline.Usagef("--hex-keys: only with --all")
			}
			ctx := cmd.Context()
			cli, err := cf.Etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			hc, err := cf.HTTPClient(4 * cf.DialTimeout)
			if err != nil {
				return err
			}
			defer hc.CloseIdleConnections() // its own transport: no keep-alive outlives the command
			ans, err := askRetrying(ctx, cli, hc, &cf, query.Request{App: app, Key: key, All: all, Partial: partial})
			if err != nil {
				return err
			}
			vals, route := ans.Merged, ans.Route
			if ans.Partial != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING (--partial): %v\n", ans.Partial)
			}
			if all {
				ambiguous, err := query.WriteKeyValues(cmd.OutOrStdout(), vals, hexKeys)
				if err == nil && ambiguous > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %d key(s) are empty, not UTF-8, or hold a space or control character: their lines are ambiguous; --hex-keys prints keys as hex\n", ambiguous)
				}
				return err
			}
			v, ok := vals[key]
			if !ok {
				return fmt.Errorf("key %s not found in app %s (%s)", api.DescribeKey(key), app.Name, route)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			_, _ = w.WriteString(v)
			_ = w.WriteByte('\n')
			return w.Flush()
		},
	}
	cf.Bind(cmd.Flags())
	cmd.Flags().StringVar(&appName, "app", "", "application to query (required)")
	cmd.Flags().StringVar(&key, "key", "", "key to look up")
	cmd.Flags().StringVar(&keyHex, "key-hex", "", "key to look up, as hex of its bytes (for keys that are not text)")
	cmd.Flags().BoolVar(&all, "all", false, "print every key")
	cmd.Flags().BoolVar(&hexKeys, "hex-keys", false, "with --all: print each key as hex of its bytes")
	cmd.Flags().BoolVar(&partial, "partial", false, "answer from the valid shards when some shard specs in etcd do not decode (warning on stderr) instead of failing")
	_ = cmd.MarkFlagRequired("app")
	return cmd
}

// askRetrying asks req (query.Ask) with a fresh view of the keyspace each
// time, again while a shard does not answer (it may be between primaries:
// a failover, a handoff) until --dial-timeout passed.
func askRetrying(ctx context.Context, cli *clientv3.Client, hc *http.Client, cf *connect.ClientFlags, req query.Request) (query.Answer, error) {
	deadline := time.Now().Add(cf.DialTimeout)
	topics := func(ctx context.Context, name string) (topic.Description, error) {
		return topicsAt(cli, cf.EtcdPrefix).Get(ctx, name)
	}
	wait := retry.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond}.Start()
	for {
		snap, err := cluster.Load(ctx, cli, cf.EtcdPrefix)
		if err != nil {
			return query.Answer{}, err
		}
		qctx, cancel := context.WithTimeout(ctx, 4*cf.DialTimeout)
		ans, err := query.Ask(qctx, hc, topics, snap, req)
		cancel()
		switch {
		case err == nil:
			return ans, nil
		case errors.Is(err, query.ErrIncomplete):
			return query.Answer{}, fmt.Errorf("%w, or pass --partial to accept a partial answer", err)
		case !errors.Is(err, query.ErrNotAnswered) || time.Now().After(deadline) || wait.Wait(ctx, nil) != nil:
			return query.Answer{}, err
		}
	}
}
