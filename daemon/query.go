package daemon

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/consumerd/consumerd/internal/retry"
	"github.com/spf13/cobra"
)

func newQueryCommand(opts Options) *cobra.Command {
	var cf clientFlags
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
			app, err := opts.app(appName)
			if err != nil {
				return usageError{fmt.Errorf("--app: %w", err)}
			}
			byKey, byHex := cmd.Flags().Changed("key"), cmd.Flags().Changed("key-hex")
			if n := btoi(all) + btoi(byKey) + btoi(byHex); n != 1 {
				return usagef("give exactly one of --key K, --key-hex HEX or --all")
			}
			if byHex {
				b, err := hex.DecodeString(keyHex)
				if err != nil {
					return usagef("--key-hex: %q is not hex (two digits 0-9a-f per byte): %v", keyHex, err)
				}
				key = string(b)
			}
			if hexKeys && !all {
				return usagef("--hex-keys: only with --all")
			}
			ctx := cmd.Context()
			cli, err := cf.etcd(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			hc, err := cf.httpClient(4 * cf.dialTimeout)
			if err != nil {
				return err
			}
			defer hc.CloseIdleConnections() // its own transport: no keep-alive outlives the command
			// A shard may be between primaries (failover, handoff): retry
			// with a fresh view of the keyspace until --dial-timeout passed.
			deadline := time.Now().Add(cf.dialTimeout)
			var vals map[string]string
			var route queryRoute
			wait := retry.Policy{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond}.Start()
			for {
				snap, err := loadSnapshot(ctx, cli, cf.etcdPrefix)
				if err != nil {
					return err
				}
				if route, err = routeQuery(ctx, cli, cf.etcdPrefix, snap, app, key, all); err != nil {
					return err
				}
				if err := route.incomplete(); err != nil && !partial {
					return fmt.Errorf("%w, or pass --partial to accept a partial answer", err)
				}
				qctx, cancel := context.WithTimeout(ctx, 4*cf.dialTimeout)
				per, err := gather(qctx, hc, snap, app, route.Shards, key, all)
				cancel()
				if err == nil {
					if vals, err = mergeShards(app, route.Shards, per); err != nil {
						return err
					}
					break
				}
				if time.Now().After(deadline) || wait.Wait(ctx, nil) != nil {
					return err
				}
			}
			if err := route.incomplete(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING (--partial): %v\n", err)
			}
			if all {
				ambiguous, err := writeKeyValues(cmd.OutOrStdout(), vals, hexKeys)
				if err == nil && ambiguous > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %d key(s) are empty, not UTF-8, or hold a space or control character: their lines are ambiguous; --hex-keys prints keys as hex\n", ambiguous)
				}
				return err
			}
			v, ok := vals[key]
			if !ok {
				return fmt.Errorf("key %s not found in app %s (%s)", describeKey(key), app.Name, route)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			_, _ = w.WriteString(v)
			_ = w.WriteByte('\n')
			return w.Flush()
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&appName, "app", "", "application to query (required)")
	cmd.Flags().StringVar(&key, "key", "", "key to look up")
	cmd.Flags().StringVar(&keyHex, "key-hex", "", "key to look up, as hex of its bytes (for keys that are not text)")
	cmd.Flags().BoolVar(&all, "all", false, "print every key")
	cmd.Flags().BoolVar(&hexKeys, "hex-keys", false, "with --all: print each key as hex of its bytes")
	cmd.Flags().BoolVar(&partial, "partial", false, "answer from the valid shards when some shard specs in etcd do not decode (warning on stderr) instead of failing")
	_ = cmd.MarkFlagRequired("app")
	return cmd
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeKeyValues prints "key value" lines sorted by key bytes, each key as
// its raw bytes or, with hexKeys, as hex. It returns how many keys print
// ambiguously as raw bytes (see plainKey); none do as hex.
func writeKeyValues(w io.Writer, vals map[string]string, hexKeys bool) (ambiguous int, err error) {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		if hexKeys {
			_, _ = bw.WriteString(hex.EncodeToString([]byte(k)))
		} else {
			if !plainKey(k) {
				ambiguous++
			}
			_, _ = bw.WriteString(k)
		}
		_ = bw.WriteByte(' ')
		_, _ = bw.WriteString(vals[k])
		_ = bw.WriteByte('\n')
	}
	return ambiguous, bw.Flush()
}
