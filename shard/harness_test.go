package shard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// RocksDB-free but process-wide: klog/zap/grpc background workers.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

const waitTimeout = 30 * time.Second

// eventually polls cond until it holds or the deadline passes; the last
// explanation cond gave is reported on failure.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var why string
	for {
		ok, w := cond()
		if ok {
			return
		}
		why = w
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// env is one test's cluster: an embedded etcd, a WAL backend, and the
// members (nodes) the test starts. The test plays the allocator leader: a
// "blocker" member that never runs holds the oldest member key, so no
// member schedules, and the test writes assignments itself under the
// assigned member's lease, exactly as the leader would.
type env struct {
	t       *testing.T
	client  *clientv3.Client
	prefix  string
	backend walimpls.OpenerBuilderImpls
	opener  wal.Opener
	pub     *topic.Publisher
	apps    map[string]shard.App
	txnMax  int
	logger  hclog.Logger
}

func newEnv(t *testing.T, backend walimpls.OpenerBuilderImpls, apps ...shard.App) *env {
	t.Helper()
	e := &env{
		t:       t,
		client:  etcdtest.Start(t),
		prefix:  "/consumerd",
		backend: backend,
		apps:    map[string]shard.App{},
		txnMax:  5,
		logger: hclog.New(&hclog.LoggerOptions{
			Name: t.Name(), Level: hclog.Warn, Output: testWriter{t},
		}),
	}
	for _, a := range apps {
		e.apps[a.Name] = a
	}
	op, err := wal.NewOpenerBuilder(backend).Build()
	if err != nil {
		t.Fatalf("build opener: %v", err)
	}
	e.opener = op
	e.pub = topic.NewPublisher(op, e.logger)
	t.Cleanup(func() {
		e.pub.Close()
		op.Close()
	})
	blocker, err := allocator.NewMember(context.Background(), allocator.Config{
		Client: e.client, Prefix: e.prefix, Zone: "z", MemberID: "blocker", LeaseTTL: 30 * time.Second,
		Spec: allocator.MemberSpec{Endpoint: "http://blocker", ItemLimit: 0}, DecodeItem: shard.DecodeSpec, Logger: e.logger,
	})
	if err != nil {
		t.Fatalf("blocker member: %v", err)
	}
	t.Cleanup(func() { _ = blocker.Close() })
	return e
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// node is one consumerd member: an allocator.Member and a shard.Service.
type node struct {
	e      *env
	id     string
	dir    string
	member *allocator.Member
	svc    *shard.Service
	opener wal.Opener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	svcErr error
	once   sync.Once
}

func (e *env) startNode(id, dir string) *node {
	e.t.Helper()
	return e.startNodeApps(id, dir, e.apps)
}

// startNodeApps starts a node with its own registered apps.
func (e *env) startNodeApps(id, dir string, apps map[string]shard.App) *node {
	e.t.Helper()
	m, err := allocator.NewMember(context.Background(), allocator.Config{
		Client: e.client, Prefix: e.prefix, Zone: "z", MemberID: id, LeaseTTL: 30 * time.Second,
		Spec:       allocator.MemberSpec{Endpoint: "http://" + id, ItemLimit: 100},
		DecodeItem: shard.DecodeSpec, Logger: e.logger,
	})
	if err != nil {
		e.t.Fatalf("member %s: %v", id, err)
	}
	// No retries: an injected append fault must reach the recorder as is.
	op, err := wal.NewOpenerBuilder(e.backend, wal.WithRetry(time.Millisecond, time.Millisecond, 1)).Build()
	if err != nil {
		e.t.Fatalf("opener: %v", err)
	}
	n := &node{e: e, id: id, dir: dir, member: m, opener: op}
	n.svc = shard.NewService(shard.Config{
		Member: m, Opener: op, DataDir: dir, Apps: apps,
		TxnMaxMessages: e.txnMax, LagInterval: 20 * time.Millisecond,
		Logger: e.logger.Named(id),
	})
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go func() { defer n.wg.Done(); _ = m.Run(ctx) }()
	go func() { defer n.wg.Done(); n.svcErr = n.svc.Run(ctx) }()
	e.t.Cleanup(n.kill)
	return n
}

// halt starts killing the node: its contexts are cancelled and its lease
// revoked (its assignments vanish). wait then waits for it to stop.
func (n *node) halt() {
	n.once.Do(func() {
		n.cancel()
		_ = n.member.Close()
	})
}

func (n *node) wait() {
	n.wg.Wait()
	n.opener.Close()
}

func (n *node) kill() {
	n.halt()
	n.wait()
}

func (e *env) putSpec(s *shard.Spec) {
	e.t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.client.Put(context.Background(), allocator.ItemKey(e.prefix, s.ID), string(raw)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) putRawSpec(id, raw string) {
	e.t.Helper()
	if _, err := e.client.Put(context.Background(), allocator.ItemKey(e.prefix, id), raw); err != nil {
		e.t.Fatal(err)
	}
}

// assign writes n's assignment of shardID at slot, as the leader would.
func (e *env) assign(n *node, shardID string, slot int) {
	e.t.Helper()
	a := allocator.Assignment{Item: shardID, Zone: "z", Member: n.id, Slot: slot}
	val, _ := json.Marshal(allocator.ReplicaStatus{State: allocator.StateIdle})
	if _, err := e.client.Put(context.Background(), allocator.AssignmentKey(e.prefix, a), string(val), clientv3.WithLease(n.member.LeaseID())); err != nil {
		e.t.Fatal(err)
	}
}

// promote replaces n's standby assignment at slot by a slot-0 one in one
// txn, as the leader's converge does.
func (e *env) promote(n *node, shardID string, slot int) {
	e.t.Helper()
	old := allocator.Assignment{Item: shardID, Zone: "z", Member: n.id, Slot: slot}
	cur, err := e.client.Get(context.Background(), allocator.AssignmentKey(e.prefix, old))
	if err != nil || len(cur.Kvs) != 1 {
		e.t.Fatalf("promote: standby key: %v %v", err, cur)
	}
	nw := old
	nw.Slot = 0
	resp, err := e.client.Txn(context.Background()).
		If(clientv3.Compare(clientv3.CreateRevision(allocator.AssignmentKey(e.prefix, old)), "=", cur.Kvs[0].CreateRevision)).
		Then(clientv3.OpDelete(allocator.AssignmentKey(e.prefix, old)),
			clientv3.OpPut(allocator.AssignmentKey(e.prefix, nw), string(cur.Kvs[0].Value), clientv3.WithLease(n.member.LeaseID()))).
		Commit()
	if err != nil || !resp.Succeeded {
		e.t.Fatalf("promote: %v %v", err, resp)
	}
}

// status reads n's assignment status of shardID at slot from etcd.
func (e *env) status(n *node, shardID string, slot int) (allocator.ReplicaStatus, bool) {
	e.t.Helper()
	a := allocator.Assignment{Item: shardID, Zone: "z", Member: n.id, Slot: slot}
	resp, err := e.client.Get(context.Background(), allocator.AssignmentKey(e.prefix, a))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return allocator.ReplicaStatus{}, false
	}
	st, err := allocator.DecodeReplicaStatus(resp.Kvs[0].Value)
	if err != nil {
		e.t.Fatal(err)
	}
	return st, true
}

func (e *env) waitState(n *node, shardID string, slot int, want allocator.ReplicaState) allocator.ReplicaStatus {
	e.t.Helper()
	var st allocator.ReplicaStatus
	eventually(e.t, fmt.Sprintf("%s of %s on %s", want, shardID, n.id), func() (bool, string) {
		var ok bool
		st, ok = e.status(n, shardID, slot)
		return ok && st.State == want, fmt.Sprintf("status %+v (present %v)", st, ok)
	})
	return st
}

// publish appends lines to partition p of topic "words" (key = the line).
func (e *env) publish(p int, lines ...string) {
	e.t.Helper()
	for _, l := range lines {
		if _, err := e.pub.PublishTo(context.Background(), topic.Partition{Topic: wordcount.InputTopic, Index: p}, message.MutableMessage{Key: l, Payload: []byte(l)}); err != nil {
			e.t.Fatalf("publish: %v", err)
		}
	}
}

func (e *env) lastID(channel string) message.MessageID {
	e.t.Helper()
	w, err := e.opener.Open(context.Background(), &wal.OpenOption{Channel: channel})
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Close()
	id, err := w.LastID(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// counts waits until n's primary of shardID has committed every message of
// its sources, then returns the shard's counts.
func (e *env) counts(n *node, spec *shard.Spec) map[string]int64 {
	e.t.Helper()
	var out map[string]int64
	eventually(e.t, "shard "+spec.ID+" on "+n.id+" consumed its sources", func() (bool, string) {
		sh, release, ok := n.svc.Primary(spec.ID)
		if !ok {
			return false, "not primary"
		}
		defer release()
		offs, err := recoverylog.LoadOffsets(sh.Database())
		if err != nil {
			return false, err.Error()
		}
		for _, src := range spec.Sources {
			if last := e.lastID(src.Channel()); offs[src.Channel()] != last {
				return false, fmt.Sprintf("%s at %d of %d", src.Channel(), offs[src.Channel()], last)
			}
		}
		out = map[string]int64{}
		err = wordcount.Scan(sh, func(k, v string) error {
			c, err := strconv.ParseInt(v, 10, 64)
			out[k] = c
			return err
		})
		if err != nil {
			e.t.Fatal(err)
		}
		return true, ""
	})
	return out
}

func wcSpec(id string, partition, standbys int) *shard.Spec {
	return &shard.Spec{ID: id, App: wordcount.Name, Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: partition}}, HotStandbys: standbys}
}

// corpus returns n deterministic lines of a few words from a small
// vocabulary (so counts collide across messages).
func corpus(seed, n int) []string {
	words := []string{"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"}
	out := make([]string, n)
	x := uint32(seed*7919 + 1)
	for i := range out {
		k := 1 + i%4
		parts := make([]string, k)
		for j := range parts {
			x = x*1664525 + 1013904223
			parts[j] = words[(x>>16)%uint32(len(words))]
		}
		out[i] = fmt.Sprintf("%s  %d", strings.Join(parts, " "), i%3)
	}
	return out
}

func diffCounts(got, want map[string]int64) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var ks []string
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		if got[k] != want[k] {
			fmt.Fprintf(&b, "%s: got %d want %d; ", k, got[k], want[k])
		}
	}
	return b.String()
}

// dumpDB returns every key/value of the RocksDB at dir (opened after its
// replica stopped).
func dumpDB(t *testing.T, dir string) map[string]string {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	db, err := grocksdb.OpenDbForReadOnly(opts, dir, false)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer db.Close()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	out := map[string]string{}
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		out[string(k.Data())] = string(v.Data())
		k.Free()
		v.Free()
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// hookedApp is wordcount with a hook run before each Consume.
func hookedApp(name string, hook func(s shard.Shard, env topic.Envelope) error) shard.App {
	app := wordcount.App()
	app.Name = name
	app.NewConsumer = func() shard.Consumer { return &hookedConsumer{hook: hook} }
	return app
}

type hookedConsumer struct {
	wordcount.Consumer
	hook func(s shard.Shard, env topic.Envelope) error
}

func (c *hookedConsumer) Consume(s shard.Shard, env topic.Envelope, pub *topic.Publisher) error {
	if err := c.Consumer.Consume(s, env, pub); err != nil {
		return err
	}
	return c.hook(s, env)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
