package shard

import (
	"context"
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// primaryShard is the Shard a primary hands to its Consumer. It is used only
// from the replica's transaction-loop goroutine.
type primaryShard struct {
	ctx  context.Context
	spec *Spec
	db   *grocksdb.DB
	ro   *grocksdb.ReadOptions
	wo   *grocksdb.WriteOptions

	cache any
	// txn is the open transaction's batch; open is its overlay, parsed
	// lazily by Get. inflight are overlays of transactions whose commit is
	// still in flight, oldest first.
	txn      *grocksdb.WriteBatch
	open     *overlay
	inflight []*overlay
}

func (s *primaryShard) ID() string                         { return s.spec.ID }
func (s *primaryShard) Spec() *Spec                        { return s.spec }
func (s *primaryShard) Partition() int                     { return s.spec.Partition() }
func (s *primaryShard) Context() context.Context           { return s.ctx }
func (s *primaryShard) Cache() any                         { return s.cache }
func (s *primaryShard) SetCache(c any)                     { s.cache = c }
func (s *primaryShard) Database() *grocksdb.DB             { return s.db }
func (s *primaryShard) Transaction() *grocksdb.WriteBatch  { return s.txn }
func (s *primaryShard) ReadOptions() *grocksdb.ReadOptions { return s.ro }
func (s *primaryShard) WriteOptions() *grocksdb.WriteOptions {
	return s.wo
}

// Get reads key through the open transaction, then the in-flight ones
// (newest first), then the database.
func (s *primaryShard) Get(key []byte) ([]byte, error) {
	if s.txn != nil && s.txn.Count() > 0 {
		if err := s.open.update(s.txn.Data()); err != nil {
			return nil, fmt.Errorf("shard %s: get %q: %w", s.spec.ID, key, err)
		}
	}
	// The open transaction, then the in-flight ones, newest first.
	for i := len(s.inflight); i >= 0; i-- {
		o := s.open
		if i < len(s.inflight) {
			o = s.inflight[i]
		}
		if o == nil {
			continue
		}
		switch res, v := o.lookup(key); res {
		case lookupValue:
			return append([]byte(nil), v...), nil
		case lookupDeleted:
			return nil, nil
		case lookupMerge:
			return nil, fmt.Errorf("shard %s: get %q: %w", s.spec.ID, key, ErrMergePending)
		}
	}
	v, err := s.db.GetBytes(s.ro, key)
	if err != nil {
		return nil, fmt.Errorf("shard %s: get %q: %w", s.spec.ID, key, err)
	}
	return v, nil
}

// queryShard is the read-only Shard that Service.Primary hands out: it sees
// committed state only (Get reads Database), and has no transaction.
type queryShard struct {
	ctx  context.Context
	spec *Spec
	db   *grocksdb.DB
	ro   *grocksdb.ReadOptions
	wo   *grocksdb.WriteOptions
}

func (s *queryShard) ID() string                           { return s.spec.ID }
func (s *queryShard) Spec() *Spec                          { return s.spec }
func (s *queryShard) Partition() int                       { return s.spec.Partition() }
func (s *queryShard) Context() context.Context             { return s.ctx }
func (s *queryShard) Cache() any                           { return nil }
func (s *queryShard) SetCache(any)                         {}
func (s *queryShard) Database() *grocksdb.DB               { return s.db }
func (s *queryShard) Transaction() *grocksdb.WriteBatch    { return nil }
func (s *queryShard) ReadOptions() *grocksdb.ReadOptions   { return s.ro }
func (s *queryShard) WriteOptions() *grocksdb.WriteOptions { return s.wo }
func (s *queryShard) Get(key []byte) ([]byte, error) {
	v, err := s.db.GetBytes(s.ro, key)
	if err != nil {
		return nil, fmt.Errorf("shard %s: get %q: %w", s.spec.ID, key, err)
	}
	return v, nil
}
