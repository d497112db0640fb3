package allocator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A primary's fencing term is its slot-0 key's CreateRevision plus the
// cluster's term base, <root>/term-base (absent: 0). Revisions only grow, so
// terms do too, as long as etcd keeps its history. When etcd is rebuilt from
// empty its revisions start again near 1, below the terms the recovery logs
// have seen, and every handoff would be fenced. A new primary that finds its
// term at or below the term of the last record of its log raises the base
// (Terms.Raise), so terms stay above every term any log has seen; the base
// only grows, and everything that compares terms (the WAL's fencing, the
// recovery log's chain) sees higher terms from then on.

// ErrBadTermBase marks a term-base value that does not decode.
var ErrBadTermBase = errors.New("bad term base")

// TermBaseKey is <root>/term-base.
func TermBaseKey(prefix string) string { return cleanPrefix(prefix) + "/term-base" }

// Terms computes and raises fencing terms in the keyspace under Prefix.
type Terms struct {
	Client *clientv3.Client
	Prefix string
}

// Base reads the term base (0 when absent). A value that does not decode is
// an error naming the key: terms cannot be computed without it.
func (t Terms) Base(ctx context.Context) (int64, error) {
	base, _, err := t.read(ctx)
	return base, err
}

func (t Terms) read(ctx context.Context) (base, mod int64, err error) {
	key := TermBaseKey(t.Prefix)
	resp, err := t.Client.Get(ctx, key)
	if err != nil {
		etcdErrors.Inc()
		return 0, 0, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	kv := resp.Kvs[0]
	base, err = strconv.ParseInt(strings.TrimSpace(string(kv.Value)), 10, 64)
	if err != nil || base < 0 {
		return 0, 0, fmt.Errorf("%w: %s holds %q, not a non-negative integer: restore it (it must not go down), or delete it only if no recovery log has a term above etcd's revision", ErrBadTermBase, key, kv.Value)
	}
	return base, kv.ModRevision, nil
}

// Term is a's fencing term given base.
func Term(base int64, a Assignment) uint64 { return uint64(base + a.CreateRevision) }

// Raise makes the base at least atLeast (never lowering it) and returns the
// base now in effect.
func (t Terms) Raise(ctx context.Context, atLeast int64) (int64, error) {
	key := TermBaseKey(t.Prefix)
	for {
		base, mod, err := t.read(ctx)
		if err != nil || base >= atLeast {
			return base, err
		}
		resp, err := t.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, strconv.FormatInt(atLeast, 10))).
			Commit()
		if err != nil {
			etcdErrors.Inc()
			return 0, fmt.Errorf("raising %s to %d: %w", key, atLeast, err)
		}
		if resp.Succeeded {
			return atLeast, nil
		}
		// Raised concurrently: read again.
	}
}
