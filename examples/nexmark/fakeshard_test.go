package nexmark

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
)

// fakeShard is a shard.Shard for the tests that run a query's logic or
// stages without a cluster (q3_test.go's join driver, q5q7sim_test.go's
// winSim). Its open transaction is a WriteBatch over a store: an in-memory
// map (newMemShard: cheap, for the many short runs of the join tests) or a
// RocksDB of its own (newDBShard: a stage's runner loads its state from
// Database). Get reads the batch's last write of a key, else the store;
// commit applies the batch to the store.
type fakeShard struct {
	spec  *shard.Spec
	part  int
	db    *grocksdb.DB      // nil: the store is kv
	kv    map[string][]byte // the store when db is nil
	ro    *grocksdb.ReadOptions
	wo    *grocksdb.WriteOptions
	wb    *grocksdb.WriteBatch
	cache any
}

var _ shard.Shard = (*fakeShard)(nil)

// newMemShard is a fakeShard over an in-memory map; Database, ReadOptions
// and WriteOptions are nil.
func newMemShard(t testing.TB) *fakeShard {
	t.Helper()
	s := &fakeShard{spec: &shard.Spec{ID: "test-0000"}, kv: map[string][]byte{}, wb: grocksdb.NewWriteBatch()}
	t.Cleanup(s.wb.Destroy)
	return s
}

// newDBShard is a fakeShard of spec reading partition part, over a RocksDB
// in a directory of the test's; it is closed when the test ends.
func newDBShard(t testing.TB, spec *shard.Spec, part int) *fakeShard {
	t.Helper()
	s := &fakeShard{
		spec: spec, part: part, db: rockstest.Open(t),
		ro: grocksdb.NewDefaultReadOptions(), wo: grocksdb.NewDefaultWriteOptions(), wb: grocksdb.NewWriteBatch(),
	}
	t.Cleanup(func() {
		s.wb.Destroy()
		s.ro.Destroy()
		s.wo.Destroy()
	})
	return s
}

func (s *fakeShard) ID() string                           { return s.spec.ID }
func (s *fakeShard) Spec() *shard.Spec                    { return s.spec }
func (s *fakeShard) Partition() int                       { return s.part }
func (s *fakeShard) Context() context.Context             { return context.Background() }
func (s *fakeShard) Cache() any                           { return s.cache }
func (s *fakeShard) SetCache(c any)                       { s.cache = c }
func (s *fakeShard) Database() *grocksdb.DB               { return s.db }
func (s *fakeShard) Transaction() *grocksdb.WriteBatch    { return s.wb }
func (s *fakeShard) ReadOptions() *grocksdb.ReadOptions   { return s.ro }
func (s *fakeShard) WriteOptions() *grocksdb.WriteOptions { return s.wo }

// Get reads the open transaction's last write of key, else the store.
func (s *fakeShard) Get(key []byte) ([]byte, error) {
	var val []byte
	found := false
	it := s.wb.NewIterator()
	for it.Next() {
		r := it.Record()
		if !bytes.Equal(r.Key, key) {
			continue
		}
		switch r.Type {
		case grocksdb.WriteBatchValueRecord:
			val, found = r.Value, true
		case grocksdb.WriteBatchDeletionRecord, grocksdb.WriteBatchSingleDeletionRecord:
			val, found = nil, true
		default:
			return nil, fmt.Errorf("fakeShard: unsupported batch record type %d", r.Type)
		}
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if found {
		return bytes.Clone(val), nil
	}
	if s.db != nil {
		return s.db.GetBytes(s.ro, key)
	}
	return bytes.Clone(s.kv[string(key)]), nil
}

// commit applies the open transaction to the store and clears it.
func (s *fakeShard) commit(t testing.TB) {
	t.Helper()
	if s.db != nil {
		if err := s.db.Write(s.wo, s.wb); err != nil {
			t.Fatal(err)
		}
		s.wb.Clear()
		return
	}
	it := s.wb.NewIterator()
	for it.Next() {
		r := it.Record()
		switch r.Type {
		case grocksdb.WriteBatchValueRecord:
			s.kv[string(r.Key)] = bytes.Clone(r.Value)
		case grocksdb.WriteBatchDeletionRecord, grocksdb.WriteBatchSingleDeletionRecord:
			delete(s.kv, string(r.Key))
		default:
			t.Fatalf("fakeShard: unsupported batch record type %d", r.Type)
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	s.wb.Clear()
}

// scan calls fn with every committed key and value of the store, in key
// order; fn may keep them.
func (s *fakeShard) scan(fn func(key, val []byte)) {
	if s.db == nil {
		for _, k := range slices.Sorted(maps.Keys(s.kv)) {
			fn([]byte(k), bytes.Clone(s.kv[k]))
		}
		return
	}
	it := s.db.NewIterator(s.ro)
	defer it.Close()
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		key, val := bytes.Clone(k.Data()), bytes.Clone(v.Data())
		k.Free()
		v.Free()
		fn(key, val)
	}
}

// summary counts the committed keys per prefix (up to the first '/').
func (s *fakeShard) summary() string {
	n := map[string]int{}
	s.scan(func(k, _ []byte) {
		p, _, _ := strings.Cut(string(k), "/")
		n[p+"/"]++
	})
	if len(n) == 0 {
		return "empty"
	}
	var parts []string
	for p, c := range n {
		parts = append(parts, fmt.Sprintf("%s %d", p, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// fakePub is a shard.Publisher that stages what a transaction publishes,
// each message with its partition; parts gives a topic's partition count
// (and fails for a topic that does not exist).
type fakePub struct {
	parts  func(topic string) (int, error)
	staged []fakeStaged
}

type fakeStaged struct {
	part topic.Partition
	msg  message.MutableMessage
}

var _ shard.Publisher = (*fakePub)(nil)

// onePartition is the parts of a fakePub whose every topic has one
// partition.
func onePartition(string) (int, error) { return 1, nil }

func (p *fakePub) Publish(name string, m message.MutableMessage) error {
	n, err := p.Partitions(name)
	if err != nil {
		return err
	}
	return p.PublishTo(topic.Partition{Topic: name, Index: topic.PartitionFor(m.Key, n)}, m)
}

func (p *fakePub) PublishTo(part topic.Partition, m message.MutableMessage) error {
	n, err := p.Partitions(part.Topic)
	if err != nil {
		return err
	}
	if part.Index < 0 || part.Index >= n {
		return fmt.Errorf("fakePub: %s: partition out of range", part)
	}
	m.Payload = bytes.Clone(m.Payload)
	m.Properties = maps.Clone(m.Properties)
	p.staged = append(p.staged, fakeStaged{part: part, msg: m})
	return nil
}

func (p *fakePub) Partitions(name string) (int, error) { return p.parts(name) }

// take removes the messages staged for topic name and returns them, in
// publishing order.
func (p *fakePub) take(name string) []message.MutableMessage {
	var out []message.MutableMessage
	kept := p.staged[:0]
	for _, st := range p.staged {
		if st.part.Topic == name {
			out = append(out, st.msg)
		} else {
			kept = append(kept, st)
		}
	}
	p.staged = kept
	return out
}

// topics names the topics of the staged messages, sorted, once each.
func (p *fakePub) topics() []string {
	var names []string
	for _, st := range p.staged {
		names = append(names, st.part.Topic)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
