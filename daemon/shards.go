package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/internal/ident"
	"github.com/consumerd/consumerd/shard"
)

func newShardsCommand(opts Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Create, change, list and unassign shards",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newShardsCreateCommand(opts), newShardsApplyCommand(opts),
		newShardsListCommand(opts), newShardsUnassignCommand(opts), newShardsRecoverCommand(opts), newShardsResetCommand(opts),
		newShardsDeleteCommand(opts))
	return cmd
}

func newShardsCreateCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var appName string
	var count, standbys int
	cmd := &cobra.Command{
		Use:   "create --app A [--count N] [--hot-standbys K]",
		Short: "Create one shard of an app per partition: shard i (<app>-%04d) reads partition i of each of the app's topics",
		Long: `create makes one shard per partition of the app's input topics, which must exist
(consumerd topics create) and have the same partition count: shard i (<app>-%04d)
reads partition i of each. --count, when given, must equal that count.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			app, err := opts.app(appName)
			if err != nil {
				return usageError{fmt.Errorf("--app: %w", err)}
			}
			countGiven := cmd.Flags().Changed("count")
			if countGiven && count < 1 {
				return usagef("--count: %d must be at least 1", count)
			}
			if standbys < 0 || standbys > shard.MaxHotStandbys {
				return usagef("--hot-standbys: %d must be in 0..%d", standbys, shard.MaxHotStandbys)
			}
			cli, err := cf.etcd(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			n, err := appPartitions(cmd.Context(), cli, cf.etcdPrefix, app)
			if err != nil {
				return err
			}
			if countGiven && count != n {
				return usagef("--count: %d must equal the partition count of %s (%d): one shard per partition", count, strings.Join(app.Topics, ", "), n)
			}
			for _, t := range app.Outputs {
				if _, err := getTopic(cmd.Context(), cli, cf.etcdPrefix, t); err != nil {
					return fmt.Errorf("app %s publishes to topic %s: %w", app.Name, t, err)
				}
			}
			specs, err := app.SpecsFor(n, standbys)
			if err != nil {
				return err
			}
			if err := createSpecs(cmd.Context(), cli, cf.etcdPrefix, specs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created %d shards: %s .. %s\n", len(specs), specs[0].ID, specs[len(specs)-1].ID)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVar(&appName, "app", "", "application of the shards (required)")
	cmd.Flags().IntVar(&count, "count", 0, "number of shards: must equal the topics' partition count (default: that count)")
	cmd.Flags().IntVar(&standbys, "hot-standbys", 0, "hot standby replicas per shard")
	_ = cmd.MarkFlagRequired("app")
	return cmd
}

// applyEntry is one entry of a `shards apply` file: a full spec to create or
// update, or {"id": ..., "delete": true} to delete a shard.
type applyEntry struct {
	Spec   *shard.Spec
	ID     string
	Delete bool
	// ModRevision, when not 0, is the key's ModRevision as the caller read
	// it (from a snapshot): applyEntries guards with it instead of reading
	// the key again.
	ModRevision int64
}

// parseApplyFile decodes a YAML or JSON list of shard specs. Each entry is
// a spec as stored in etcd, plus an optional `delete: true` that deletes the
// shard of that id (then only id is needed). Errors name the entry and field.
func parseApplyFile(data []byte, apps map[string]shard.App) ([]applyEntry, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return nil, fmt.Errorf("no shard specs in file")
	}
	var raws []json.RawMessage
	if js[0] == '{' {
		// A single spec, or {"shards": [...]}.
		var wrap map[string]json.RawMessage
		if err := json.Unmarshal(js, &wrap); err != nil {
			return nil, err
		}
		if list, ok := wrap["shards"]; ok && len(wrap) == 1 {
			if err := json.Unmarshal(list, &raws); err != nil {
				return nil, fmt.Errorf("shards: want a list of shard specs: %w", err)
			}
		} else {
			raws = []json.RawMessage{js}
		}
	} else if err := json.Unmarshal(js, &raws); err != nil {
		return nil, fmt.Errorf("want a list of shard specs: %w", err)
	}
	seen := map[string]int{}
	var out []applyEntry
	for i, raw := range raws {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, fmt.Errorf("entry %d: want an object: %w", i, err)
		}
		var id string
		if r, ok := fields["id"]; ok {
			if err := json.Unmarshal(r, &id); err != nil {
				return nil, fmt.Errorf("entry %d: id: want a string", i)
			}
		}
		where := fmt.Sprintf("entry %d (shard %q)", i, id)
		if id == "" {
			where = fmt.Sprintf("entry %d", i)
		}
		del := false
		if r, ok := fields["delete"]; ok {
			if err := json.Unmarshal(r, &del); err != nil {
				return nil, fmt.Errorf("%s: delete: want true or false", where)
			}
			delete(fields, "delete")
		}
		if j, dup := seen[id]; dup && id != "" {
			return nil, fmt.Errorf("%s: id: duplicates entry %d", where, j)
		}
		seen[id] = i
		if del {
			if err := ident.Check(id); err != nil {
				return nil, fmt.Errorf("%s: id: %w", where, err)
			}
			out = append(out, applyEntry{ID: id, Delete: true})
			continue
		}
		clean, _ := json.Marshal(fields)
		spec, err := shard.ParseSpec(clean)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := knownApp(apps, spec.App); err != nil {
			return nil, fmt.Errorf("%s: app: %w", where, err)
		}
		out = append(out, applyEntry{Spec: spec, ID: spec.ID})
	}
	return out, nil
}

// knownApp checks that the binary registers an app named name: a shard of
// an unknown app would be assigned and never run.
func knownApp(apps map[string]shard.App, name string) error {
	if _, ok := apps[name]; ok {
		return nil
	}
	names := make([]string, 0, len(apps))
	for n := range apps {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("unknown app %q (known: %s)", name, strings.Join(names, ", "))
}

// Applied counts what Client.ApplySpecs did.
type Applied struct {
	Created, Updated, Unchanged int
}

// applySpecs is `shards apply` of a list of specs (no deletes), for
// Client.ApplySpecs: each spec is validated, its app must be registered
// and its sources must exist (checkSources), then applyEntries writes
// those that differ from what etcd holds. A spec identical to the stored
// one is left alone, so that re-applying the same list writes nothing (a
// put of an unchanged spec would still wake every member's watch).
func applySpecs(ctx context.Context, cli *clientv3.Client, prefix string, apps map[string]shard.App, specs []*shard.Spec) (Applied, error) {
	var res Applied
	seen := map[string]bool{}
	for i, s := range specs {
		if s == nil {
			return res, fmt.Errorf("spec %d: nil", i)
		}
		if err := s.Validate(); err != nil {
			return res, fmt.Errorf("spec %d (shard %q): %w", i, s.ID, err)
		}
		if err := knownApp(apps, s.App); err != nil {
			return res, fmt.Errorf("shard %s: app: %w", s.ID, err)
		}
		if seen[s.ID] {
			return res, fmt.Errorf("shard %s: given twice", s.ID)
		}
		seen[s.ID] = true
	}
	ts, err := loadTopics(ctx, cli, prefix)
	if err != nil {
		return res, err
	}
	if err := checkSources(ts, specs); err != nil {
		return res, err
	}
	var entries []applyEntry
	for _, s := range specs {
		g, err := cli.Get(ctx, allocator.ItemKey(prefix, s.ID))
		if err != nil {
			return res, fmt.Errorf("reading shard %s from etcd: %w", s.ID, err)
		}
		var mod int64
		if len(g.Kvs) > 0 {
			mod = g.Kvs[0].ModRevision
			if have, err := shard.DecodeSpec(s.ID, g.Kvs[0].Value); err == nil && sameSpec(have.(*shard.Spec), s) {
				res.Unchanged++
				continue
			}
		}
		// The ModRevision just read guards the write: a concurrent change
		// fails the apply rather than being overwritten.
		entries = append(entries, applyEntry{Spec: s, ID: s.ID, ModRevision: mod})
	}
	created, updated, _, err := applyEntries(ctx, cli, prefix, entries)
	res.Created, res.Updated = created, updated
	return res, err
}

// sameSpec compares specs as stored: by their JSON encoding.
func sameSpec(a, b *shard.Spec) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

func newShardsApplyCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create, update or delete shard specs from a YAML or JSON list ('-' reads stdin)",
		Long: `apply writes every spec of FILE to etcd: a spec whose id exists is replaced, a new
one is created. An entry {id: X, delete: true} deletes shard X (its replicas are
then released). The file is a YAML or JSON list of specs, each as 'shards list'
shows them in etcd:

  - id: wordcount-0000
    app: wordcount
    sources: [{topic: words, partition: 0}]
    hot_standbys: 1
    max_txn_duration: 1s
  - id: wordcount-0007
    delete: true

Every entry is validated before anything is written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("-f %s: %w", file, err)
			}
			entries, err := parseApplyFile(data, opts.appMap())
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			cli, err := cf.etcd(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			ts, err := loadTopics(cmd.Context(), cli, cf.etcdPrefix)
			if err != nil {
				return err
			}
			var specs []*shard.Spec
			for _, e := range entries {
				if e.Spec != nil {
					specs = append(specs, e.Spec)
				}
			}
			if err := checkSources(ts, specs); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			created, updated, deleted, err := applyEntries(cmd.Context(), cli, cf.etcdPrefix, entries)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %s: %d created, %d updated, %d deleted\n", file, created, updated, deleted)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML or JSON file of shard specs (required)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// applyEntries writes entries in txns of at most maxTxnOps ops. Each put and
// delete is guarded by the key's ModRevision as read just before, so a
// concurrent change fails the apply instead of being overwritten silently.
func applyEntries(ctx context.Context, cli *clientv3.Client, prefix string, entries []applyEntry) (created, updated, deleted int, err error) {
	for start := 0; start < len(entries); start += maxTxnOps {
		batch := entries[start:min(start+maxTxnOps, len(entries))]
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		var c, u, d int
		for _, e := range batch {
			key := allocator.ItemKey(prefix, e.ID)
			mod := e.ModRevision
			if mod == 0 {
				g, err := cli.Get(ctx, key)
				if err != nil {
					return created, updated, deleted, fmt.Errorf("reading shard %s from etcd: %w", e.ID, err)
				}
				if len(g.Kvs) > 0 {
					mod = g.Kvs[0].ModRevision
				}
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", mod))
			switch {
			case e.Delete:
				if mod == 0 {
					continue // already gone
				}
				ops = append(ops, clientv3.OpDelete(key))
				d++
			default:
				raw, err := json.Marshal(e.Spec)
				if err != nil {
					return created, updated, deleted, fmt.Errorf("encoding shard %s: %w", e.ID, err)
				}
				ops = append(ops, clientv3.OpPut(key, string(raw)))
				if mod == 0 {
					c++
				} else {
					u++
				}
			}
		}
		resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return created, updated, deleted, fmt.Errorf("writing shard specs to etcd: %w", err)
		}
		if !resp.Succeeded {
			return created, updated, deleted, fmt.Errorf("shard specs changed concurrently while applying; nothing of this batch was written, try again")
		}
		created, updated, deleted = created+c, updated+u, deleted+d
	}
	return created, updated, deleted, nil
}

// shardExists is the --shard check of the commands that act on a shard's
// keys: the shard's spec key exists, valid or not (an invalid spec's keys
// can be unassigned or deleted too).
func shardExists(snap allocator.Snapshot, id string) error {
	_, ok := snap.Items[id]
	if _, invalid := snap.InvalidItems[id]; !ok && !invalid {
		return fmt.Errorf("--shard: no shard %q", id)
	}
	return nil
}

func newShardsUnassignCommand(opts Options) *cobra.Command {
	var cf clientFlags
	var failed bool
	var shardID string
	cmd := &cobra.Command{
		Use:   "unassign [--failed] [--shard ID]",
		Short: "Remove replica assignments so the leader reassigns them (--failed: only FAILED ones)",
		Long: `unassign deletes assignment keys; the allocator leader then assigns the shard
again (a FAILED replica restarts, from its recovery log, possibly elsewhere).
  --failed            every FAILED replica
  --failed --shard X  the FAILED replicas of shard X
  --shard X           every replica of shard X (the shard restarts)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !failed && shardID == "" {
				return usagef("give --failed, --shard ID, or both")
			}
			ctx := cmd.Context()
			cli, snap, err := cf.snapshot(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			if shardID != "" {
				if err := shardExists(snap, shardID); err != nil {
					return err
				}
			}
			var targets []allocator.Assignment
			all := snap.Assignments
			if !failed { // keys whose value does not decode go too (Status is zero)
				all = append(append([]allocator.Assignment(nil), all...), snap.Undecodable...)
			}
			for _, a := range all {
				if shardID != "" && a.Item != shardID {
					continue
				}
				if failed && a.Status.State != allocator.StateFailed {
					continue
				}
				targets = append(targets, a)
			}
			n := 0
			for _, a := range targets {
				key := allocator.AssignmentKey(cf.etcdPrefix, a)
				resp, err := cli.Txn(ctx).
					If(clientv3.Compare(clientv3.ModRevision(key), "=", a.ModRevision)).
					Then(clientv3.OpDelete(key)).Commit()
				if err != nil {
					return fmt.Errorf("unassigning %s: %w", key, err)
				}
				if resp.Succeeded {
					n++
					state := string(a.Status.State)
					if state == "" {
						state = "value did not decode"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "unassigned %s slot %d from %s/%s (%s)\n", a.Item, a.Slot, a.Zone, a.Member, state)
				}
			}
			// A person restarted the FAILED replicas: an automatic restart
			// policy counts its attempts from zero again.
			reset := map[string]bool{}
			for _, a := range targets {
				if _, ok := snap.Restarts[a.Item]; ok && a.Status.State == allocator.StateFailed && !reset[a.Item] {
					reset[a.Item] = true
					if _, err := cli.Delete(ctx, allocator.RestartKey(cf.etcdPrefix, a.Item)); err != nil {
						return fmt.Errorf("resetting %s's restart count (%s): %w", a.Item, allocator.RestartKey(cf.etcdPrefix, a.Item), err)
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d assignments removed\n", n)
			return nil
		},
	}
	cf.bind(cmd.Flags())
	cmd.Flags().BoolVar(&failed, "failed", false, "only replicas in state FAILED")
	cmd.Flags().StringVar(&shardID, "shard", "", "only replicas of this shard")
	return cmd
}
