package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotPrimary is wrapped by PublishPointer when the guard failed: the
// writer's primary assignment is gone or was replaced (it is a zombie).
var ErrNotPrimary = errors.New("snapshot: not the shard's primary any more")

// ErrStalePointer is wrapped by PublishPointer when etcd already points at
// a snapshot at least as new: pointers never move backwards.
var ErrStalePointer = errors.New("snapshot: a newer snapshot pointer exists")

// Pointer is the value of <root>/snapshots/<shard>: the newest durable
// snapshot of the shard.
type Pointer struct {
	// Manifest is the manifest's object name in the store.
	Manifest string `json:"manifest"`
	// ID is the snapshot id.
	ID string `json:"id"`
	// LogID is the recovery-log id the snapshot covers.
	LogID uint64 `json:"log_id"`
	// Term is the fencing term of the primary that wrote it.
	Term uint64 `json:"term"`
	// Size is the total size of the snapshot's files.
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
}

// PointerOf is the pointer to m.
func PointerOf(m *Manifest) Pointer {
	return Pointer{Manifest: m.Name(), ID: m.ID, LogID: m.LogID, Term: m.Term, Size: m.Size(), Created: m.Created}
}

// PointerKey is <root>/snapshots/<shard>.
func PointerKey(prefix, shard string) string {
	return strings.TrimRight(prefix, "/") + "/snapshots/" + shard
}

// Guard names the etcd key that must still exist with the given
// CreateRevision for a pointer update to succeed: the writer's slot-0
// assignment key (its CreateRevision is the primary's term).
type Guard struct {
	Key            string
	CreateRevision int64
}

// LoadPointer reads a shard's pointer. ok is false when there is none.
func LoadPointer(ctx context.Context, cli *clientv3.Client, prefix, shard string) (p Pointer, ok bool, err error) {
	p, rev, err := loadPointer(ctx, cli, PointerKey(prefix, shard))
	return p, rev != 0, err
}

func loadPointer(ctx context.Context, cli *clientv3.Client, key string) (Pointer, int64, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return Pointer{}, 0, fmt.Errorf("snapshot: read pointer %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Pointer{}, 0, nil
	}
	var p Pointer
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return Pointer{}, 0, fmt.Errorf("snapshot: decode pointer %s: %w", key, err)
	}
	if p.Manifest == "" {
		return Pointer{}, 0, fmt.Errorf("snapshot: pointer %s names no manifest", key)
	}
	return p, resp.Kvs[0].ModRevision, nil
}

// PublishPointer points <root>/snapshots/<shard> at p, in one etcd txn
// that succeeds only if the guard key still exists with its CreateRevision
// (a zombie primary fails with ErrNotPrimary) and the pointer did not change
// since it was read. A stored pointer covering a later log id (or the same
// id under a higher term) is never overwritten (ErrStalePointer).
func PublishPointer(ctx context.Context, cli *clientv3.Client, prefix, shard string, p Pointer, g Guard) error {
	key := PointerKey(prefix, shard)
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("snapshot: encode pointer: %w", err)
	}
	for attempt := 0; attempt < 8; attempt++ {
		cur, rev, err := loadPointer(ctx, cli, key)
		if err != nil && rev == 0 {
			// An undecodable pointer is replaced (guarded like any other).
			resp, gerr := cli.Get(ctx, key)
			if gerr != nil {
				return fmt.Errorf("snapshot: read pointer %s: %w", key, gerr)
			}
			if len(resp.Kvs) > 0 {
				rev = resp.Kvs[0].ModRevision
			}
		} else if rev != 0 && (cur.LogID > p.LogID || (cur.LogID == p.LogID && cur.Term > p.Term)) {
			return fmt.Errorf("%w: %s covers log id %d (term %d), not publishing log id %d (term %d)", ErrStalePointer, key, cur.LogID, cur.Term, p.LogID, p.Term)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
		if g.Key != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.CreateRevision))
		}
		txn := cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(val)))
		if g.Key != "" {
			txn = txn.Else(clientv3.OpGet(g.Key))
		}
		resp, err := txn.Commit()
		if err != nil {
			return fmt.Errorf("snapshot: write pointer %s: %w", key, err)
		}
		if resp.Succeeded {
			return nil
		}
		if g.Key != "" {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 || kvs[0].CreateRevision != g.CreateRevision {
				return fmt.Errorf("%w: assignment %s (create revision %d) is gone or replaced", ErrNotPrimary, g.Key, g.CreateRevision)
			}
		}
		// The pointer changed under us: re-read and retry.
	}
	return fmt.Errorf("snapshot: write pointer %s: kept changing under concurrent writers", key)
}
