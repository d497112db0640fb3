package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
)

// MaxTxnOps is etcd's default --max-txn-ops: a txn holds at most this many ops.
const MaxTxnOps = 128

// ensureShards creates n shards of app when no shard of app exists; it
// returns how many it created.
func ensureShards(ctx context.Context, cli *clientv3.Client, prefix string, app shard.App, n int) (int, error) {
	snap, err := Load(ctx, cli, prefix)
	if err != nil {
		return 0, err
	}
	for _, s := range shard.Specs(snap) {
		if s.App == app.Name {
			return 0, nil
		}
	}
	specs, err := app.SpecsFor(n, 0)
	if err != nil {
		return 0, err
	}
	if err := CreateSpecs(ctx, cli, prefix, specs); err != nil {
		return 0, err
	}
	return len(specs), nil
}

// CreateSpecs writes specs that must not exist yet, in txns of at most
// MaxTxnOps keys, each guarded so that an existing shard is never overwritten.
func CreateSpecs(ctx context.Context, cli *clientv3.Client, prefix string, specs []*shard.Spec) error {
	for start := 0; start < len(specs); start += MaxTxnOps {
		batch := specs[start:min(start+MaxTxnOps, len(specs))]
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, s := range batch {
			raw, err := json.Marshal(s)
			if err != nil {
				return fmt.Errorf("encoding shard %s: %w", s.ID, err)
			}
			key := allocator.ItemKey(prefix, s.ID)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			ops = append(ops, clientv3.OpPut(key, string(raw)))
		}
		resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("writing shard specs to etcd: %w", err)
		}
		if !resp.Succeeded {
			var exist []string
			for _, s := range batch {
				g, err := cli.Get(ctx, allocator.ItemKey(prefix, s.ID), clientv3.WithCountOnly())
				if err == nil && g.Count > 0 {
					exist = append(exist, s.ID)
				}
			}
			return fmt.Errorf("shards already exist: %s (use 'shards apply' to change them)", strings.Join(exist, ", "))
		}
	}
	return nil
}

// SpecEntry is one entry of a `shards apply` file: a full spec to create or
// update, or {"id": ..., "delete": true} to delete a shard.
type SpecEntry struct {
	Spec   *shard.Spec
	ID     string
	Delete bool
	// ModRevision, when not 0, is the key's ModRevision as the caller read
	// it (from a snapshot): WriteSpecs guards with it instead of reading
	// the key again.
	ModRevision int64
}

// KnownApp checks that the binary registers an app named name: a shard of
// an unknown app would be assigned and never run.
func KnownApp(apps map[string]shard.App, name string) error {
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

// ApplySpecs is `shards apply` of a list of specs (no deletes), for
// Client.ApplySpecs: each spec is validated, its app must be registered
// and its sources must exist (CheckSources), then WriteSpecs writes
// those that differ from what etcd holds. A spec identical to the stored
// one is left alone, so that re-applying the same list writes nothing (a
// put of an unchanged spec would still wake every member's watch).
func ApplySpecs(ctx context.Context, cli *clientv3.Client, prefix string, apps map[string]shard.App, specs []*shard.Spec) (Applied, error) {
	var res Applied
	seen := map[string]bool{}
	for i, s := range specs {
		if s == nil {
			return res, fmt.Errorf("spec %d: nil", i)
		}
		if err := s.Validate(); err != nil {
			return res, fmt.Errorf("spec %d (shard %q): %w", i, s.ID, err)
		}
		if err := KnownApp(apps, s.App); err != nil {
			return res, fmt.Errorf("shard %s: app: %w", s.ID, err)
		}
		if seen[s.ID] {
			return res, fmt.Errorf("shard %s: given twice", s.ID)
		}
		seen[s.ID] = true
	}
	ts, err := (&topic.Registry{Client: cli, Prefix: prefix}).List(ctx)
	if err != nil {
		return res, err
	}
	if err := CheckSources(ts, specs); err != nil {
		return res, err
	}
	var entries []SpecEntry
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
		entries = append(entries, SpecEntry{Spec: s, ID: s.ID, ModRevision: mod})
	}
	created, updated, _, err := WriteSpecs(ctx, cli, prefix, entries)
	res.Created, res.Updated = created, updated
	return res, err
}

// sameSpec compares specs as stored: by their JSON encoding.
func sameSpec(a, b *shard.Spec) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// WriteSpecs writes entries in txns of at most MaxTxnOps ops. Each put and
// delete is guarded by the key's ModRevision as read just before, so a
// concurrent change fails the apply instead of being overwritten silently.
func WriteSpecs(ctx context.Context, cli *clientv3.Client, prefix string, entries []SpecEntry) (created, updated, deleted int, err error) {
	for start := 0; start < len(entries); start += MaxTxnOps {
		batch := entries[start:min(start+MaxTxnOps, len(entries))]
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

// ShardExists is the --shard check of the commands that act on a shard's
// keys: the shard's spec key exists, valid or not (an invalid spec's keys
// can be unassigned or deleted too).
func ShardExists(snap allocator.Snapshot, id string) error {
	_, ok := snap.Items[id]
	if _, invalid := snap.InvalidItems[id]; !ok && !invalid {
		return fmt.Errorf("--shard: no shard %q", id)
	}
	return nil
}
