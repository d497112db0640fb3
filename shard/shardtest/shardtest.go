package shardtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/examples/wordcount"
	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/rockstest"
	"github.com/consumerd/consumerd/internal/waitfor"
	"github.com/consumerd/consumerd/recoverylog"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/rocksmem"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
)

// WaitTimeout bounds every Eventually.
const WaitTimeout = 30 * time.Second

// Eventually polls cond until it holds, failing t after WaitTimeout with
// what and the last explanation cond gave: waitfor.Until, with the kit's
// timeout.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	waitfor.Until(t, WaitTimeout, what, cond)
}

// Cluster is one test's cluster: an embedded etcd, a WAL backend, and the
// members (nodes) the test starts. By default the test plays the allocator
// leader: a "blocker" member that never runs holds the oldest member key, so
// no member schedules, and the test writes assignments itself (Assign,
// Promote) under the assigned member's lease, exactly as the leader would.
// NewScheduledCluster instead lets the nodes' members schedule.
type Cluster struct {
	t testing.TB
	// Client is a client of the cluster's embedded etcd.
	Client *clientv3.Client
	// Prefix is the keyspace root ("/consumerd").
	Prefix string
	// Backend is the WAL backend every node opens.
	Backend walimpls.OpenerBuilderImpls
	// Opener is the test's own opener (publishing, inspection).
	Opener wal.Opener
	// Pub publishes test input.
	Pub *topic.Publisher
	// Apps are registered on every node started with StartNode.
	Apps map[string]shard.App
	// TxnMaxMessages is the transaction size cap of nodes started later
	// (small by default, so a test sees many transactions).
	TxnMaxMessages int
	// Logger logs to the test log at warn level.
	Logger hclog.Logger
	// Snapshots, when set, is the snapshot configuration of nodes started later.
	Snapshots *shard.SnapshotOptions
	// LagInterval is how often primaries of nodes started later refresh
	// their source lag: 20 ms unless set (tests wait on lag), which
	// benchmarks set to the service default, as each refresh asks the
	// backend for every source's last id.
	LagInterval time.Duration
	// Memory, when set, is the RocksDB memory budget of nodes started
	// later (the test closes it after they stopped).
	Memory *rocksmem.Budget
	// LoadInterval is how often nodes started later report their
	// primaries' load (zero: the service default).
	LoadInterval time.Duration
}

// NewCluster starts a cluster whose assignments the test writes.
func NewCluster(t testing.TB, backend walimpls.OpenerBuilderImpls, apps ...shard.App) *Cluster {
	t.Helper()
	e := newCluster(t, backend, apps...)
	blocker, err := allocator.NewMember(context.Background(), allocator.Config{
		Client: e.Client, Prefix: e.Prefix, Zone: "z", MemberID: "blocker", LeaseTTL: 30 * time.Second,
		Spec: allocator.MemberSpec{Endpoint: "http://blocker", ItemLimit: 0}, DecodeItem: shard.DecodeSpec, Logger: e.Logger,
	})
	if err != nil {
		t.Fatalf("blocker member: %v", err)
	}
	t.Cleanup(func() { _ = blocker.Close() })
	return e
}

// NewScheduledCluster starts a cluster whose nodes' members schedule and
// converge assignments themselves (the oldest running node leads).
func NewScheduledCluster(t testing.TB, backend walimpls.OpenerBuilderImpls, apps ...shard.App) *Cluster {
	t.Helper()
	return newCluster(t, backend, apps...)
}

func newCluster(t testing.TB, backend walimpls.OpenerBuilderImpls, apps ...shard.App) *Cluster {
	t.Helper()
	e := &Cluster{
		t:              t,
		Client:         etcdtest.Start(t),
		Prefix:         "/consumerd",
		Backend:        backend,
		Apps:           map[string]shard.App{},
		TxnMaxMessages: 5,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: t.Name(), Level: hclog.Warn, Output: testWriter{t},
		}),
	}
	for _, a := range apps {
		e.Apps[a.Name] = a
	}
	if mem, ok := backend.(*memory.Builder); ok {
		// Outcomes reported out of call order, as on a real connection:
		// every shard test runs the adaptor's reordering.
		mem.ShuffleAcks(uint64(time.Now().UnixNano()) | 1)
	}
	op, err := wal.NewOpenerBuilder(backend).Build()
	if err != nil {
		t.Fatalf("build opener: %v", err)
	}
	e.Opener = op
	e.Pub = topic.NewPublisher(op, e.Logger)
	t.Cleanup(func() {
		e.Pub.Close()
		op.Close()
	})
	// Every app's topics exist, as `topics create` would make them.
	for _, a := range apps {
		for _, name := range append(append([]string{}, a.Topics...), a.Outputs...) {
			e.PutTopic(topic.Description{Name: name, Partitions: DefaultPartitions})
		}
	}
	return e
}

// DefaultPartitions is the partition count of the topics a cluster creates
// for its apps.
const DefaultPartitions = 16

// PutTopic makes topic d through the topic registry, replacing a record
// with another partition count: a test shapes its topics before anything
// reads them (NewCluster already made every app's topics with
// DefaultPartitions), which the registry itself never allows.
func (e *Cluster) PutTopic(d topic.Description) {
	e.t.Helper()
	ctx := context.Background()
	reg := &topic.Registry{Client: e.Client, Prefix: e.Prefix}
	_, err := reg.Create(ctx, d)
	if errors.Is(err, topic.ErrPartitionsChange) {
		if err = reg.Delete(ctx, d.Name); err == nil {
			_, err = reg.Create(ctx, d)
		}
	}
	if err != nil {
		e.t.Fatalf("put topic %s: %v", d.Name, err)
	}
}

// ShareMemory gives the nodes started after it one RocksDB memory budget
// of bytes (Memory), closed once they stopped.
func (e *Cluster) ShareMemory(bytes uint64) {
	e.t.Helper()
	mem, err := rocksmem.New(bytes)
	if err != nil {
		e.t.Fatalf("memory budget: %v", err)
	}
	e.Memory = mem
	e.t.Cleanup(mem.Close) // before the nodes' own: runs after they stopped
}

// testWriter sends log output to the test log (dropped after the test).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Node is one consumerd member: an allocator.Member and a shard.Service.
type Node struct {
	e *Cluster
	// ID is the member id (zone "z").
	ID string
	// Dir is the node's data dir.
	Dir       string
	Member    *allocator.Member
	Service   *shard.Service
	opener    wal.Opener
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	svcErr    error
	once      sync.Once
	closeOnce sync.Once
}

// RunErr is what the node's Service.Run returned (valid after Wait).
func (n *Node) RunErr() error { return n.svcErr }

// StartNode starts a member and its shard service with the cluster's apps,
// data in dir. It is killed at the test's cleanup.
func (e *Cluster) StartNode(id, dir string) *Node {
	e.t.Helper()
	return e.StartNodeApps(id, dir, e.Apps)
}

// StartNodeApps starts a node with its own registered apps.
func (e *Cluster) StartNodeApps(id, dir string, apps map[string]shard.App) *Node {
	e.t.Helper()
	m, err := allocator.NewMember(context.Background(), allocator.Config{
		Client: e.Client, Prefix: e.Prefix, Zone: "z", MemberID: id, LeaseTTL: 30 * time.Second,
		Spec:       allocator.MemberSpec{Endpoint: "http://" + id, ItemLimit: 100},
		DecodeItem: shard.DecodeSpec, Logger: e.Logger,
	})
	if err != nil {
		e.t.Fatalf("member %s: %v", id, err)
	}
	// No retries: an injected append fault must reach the recorder as is.
	op, err := wal.NewOpenerBuilder(e.Backend, wal.WithRetry(time.Millisecond, time.Millisecond, 1)).Build()
	if err != nil {
		e.t.Fatalf("opener: %v", err)
	}
	n := &Node{e: e, ID: id, Dir: dir, Member: m, opener: op}
	n.Service = shard.NewService(shard.Config{
		Member: m, Opener: op, DataDir: dir, Apps: apps, Topics: shard.EtcdTopics(e.Client, e.Prefix),
		TxnMaxMessages: e.TxnMaxMessages, LagInterval: cmp.Or(e.LagInterval, 20*time.Millisecond),
		Logger: e.Logger.Named(id), Snapshots: e.Snapshots,
		Terms:  &allocator.Terms{Client: e.Client, Prefix: e.Prefix},
		Memory: e.Memory, LoadInterval: e.LoadInterval,
	})
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go func() { defer n.wg.Done(); _ = m.Run(ctx) }()
	go func() { defer n.wg.Done(); n.svcErr = n.Service.Run(ctx) }()
	e.t.Cleanup(n.Kill)
	return n
}

// StartPrimary starts node id with data in dir, assigns it spec's slot 0
// and waits until it is PRIMARY.
func (e *Cluster) StartPrimary(id, dir string, spec *shard.Spec) *Node {
	e.t.Helper()
	n := e.StartNode(id, dir)
	e.Assign(n, spec.ID, 0)
	e.WaitState(n, spec.ID, 0, allocator.StatePrimary)
	return n
}

// Halt starts killing the node: its contexts are cancelled and its lease
// revoked (its assignments vanish). Wait then waits for it to stop.
func (n *Node) Halt() {
	n.once.Do(func() {
		n.cancel()
		_ = n.Member.Close()
	})
}

// Wait waits for a halted node to stop.
func (n *Node) Wait() {
	n.wg.Wait()
	n.closeOnce.Do(n.opener.Close)
}

// Kill halts the node and waits for it.
func (n *Node) Kill() {
	n.Halt()
	n.Wait()
}

// PutSpec writes a shard spec to etcd.
func (e *Cluster) PutSpec(s *shard.Spec) {
	e.t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.Client.Put(context.Background(), allocator.ItemKey(e.Prefix, s.ID), string(raw)); err != nil {
		e.t.Fatal(err)
	}
}

// PutRawSpec writes raw as the value of shard id's spec key.
func (e *Cluster) PutRawSpec(id, raw string) {
	e.t.Helper()
	if _, err := e.Client.Put(context.Background(), allocator.ItemKey(e.Prefix, id), raw); err != nil {
		e.t.Fatal(err)
	}
}

// Assign writes n's assignment of shardID at slot, as the leader would.
func (e *Cluster) Assign(n *Node, shardID string, slot int) {
	e.t.Helper()
	a := allocator.Assignment{Item: shardID, Zone: "z", Member: n.ID, Slot: slot}
	val, _ := json.Marshal(allocator.ReplicaStatus{State: allocator.StateIdle})
	if _, err := e.Client.Put(context.Background(), allocator.AssignmentKey(e.Prefix, a), string(val), clientv3.WithLease(n.Member.LeaseID())); err != nil {
		e.t.Fatal(err)
	}
}

// Promote replaces n's standby assignment at slot by a slot-0 one in one
// txn, as the leader's converge does.
func (e *Cluster) Promote(n *Node, shardID string, slot int) {
	e.t.Helper()
	old := allocator.Assignment{Item: shardID, Zone: "z", Member: n.ID, Slot: slot}
	cur, err := e.Client.Get(context.Background(), allocator.AssignmentKey(e.Prefix, old))
	if err != nil || len(cur.Kvs) != 1 {
		e.t.Fatalf("promote: standby key: %v %v", err, cur)
	}
	nw := old
	nw.Slot = 0
	resp, err := e.Client.Txn(context.Background()).
		If(clientv3.Compare(clientv3.CreateRevision(allocator.AssignmentKey(e.Prefix, old)), "=", cur.Kvs[0].CreateRevision)).
		Then(clientv3.OpDelete(allocator.AssignmentKey(e.Prefix, old)),
			clientv3.OpPut(allocator.AssignmentKey(e.Prefix, nw), string(cur.Kvs[0].Value), clientv3.WithLease(n.Member.LeaseID()))).
		Commit()
	if err != nil || !resp.Succeeded {
		e.t.Fatalf("promote: %v %v", err, resp)
	}
}

// Status reads n's assignment status of shardID at slot from etcd.
func (e *Cluster) Status(n *Node, shardID string, slot int) (allocator.ReplicaStatus, bool) {
	e.t.Helper()
	a := allocator.Assignment{Item: shardID, Zone: "z", Member: n.ID, Slot: slot}
	resp, err := e.Client.Get(context.Background(), allocator.AssignmentKey(e.Prefix, a))
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

// WaitState waits until n's replica of shardID at slot has state want in
// etcd, and returns that status.
func (e *Cluster) WaitState(n *Node, shardID string, slot int, want allocator.ReplicaState) allocator.ReplicaStatus {
	e.t.Helper()
	var st allocator.ReplicaStatus
	Eventually(e.t, fmt.Sprintf("%s of %s on %s", want, shardID, n.ID), func() (bool, string) {
		var ok bool
		st, ok = e.Status(n, shardID, slot)
		return ok && st.State == want, fmt.Sprintf("status %+v (present %v)", st, ok)
	})
	return st
}

// Publish appends lines to partition p of topic "words" (key = the line).
func (e *Cluster) Publish(p int, lines ...string) {
	e.t.Helper()
	for _, l := range lines {
		if _, err := e.Pub.PublishTo(context.Background(), topic.Partition{Topic: wordcount.InputTopic, Index: p}, message.MutableMessage{Key: l, Payload: []byte(l)}); err != nil {
			e.t.Fatalf("publish: %v", err)
		}
	}
}

// PublishAll publishes n messages, msg(0) … msg(n-1), to topic d routed by
// key, all in flight at once, and waits for every acknowledgement (a
// benchmark's stored input).
func (e *Cluster) PublishAll(d topic.Description, n int, msg func(i int) message.MutableMessage) {
	e.t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var pubErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		e.Pub.PublishAsync(context.Background(), d, msg(i), func(_ topic.Partition, _ message.MessageID, err error) {
			if err != nil {
				mu.Lock()
				pubErr = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if pubErr != nil {
		e.t.Fatalf("publish to %s: %v", d.Name, pubErr)
	}
}

// CountTopic is the number of messages stored in topic d's partitions.
func (e *Cluster) CountTopic(d topic.Description) int {
	e.t.Helper()
	n := 0
	for p := 0; p < d.Partitions; p++ {
		w, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: topic.ChannelName(d.Name, p)})
		if err != nil {
			e.t.Fatal(err)
		}
		c, err := w.(wal.Counter).Count(context.Background())
		w.Close()
		if err != nil {
			e.t.Fatal(err)
		}
		n += int(c)
	}
	return n
}

// LastID is the last id of channel.
func (e *Cluster) LastID(channel string) message.MessageID {
	e.t.Helper()
	w, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: channel})
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

// ReadTopic returns what topic d's partitions hold, indexed by partition:
// each partition's messages in id order, marks and data alike, from its
// oldest to its last id as of when ReadTopic reads it (none for an empty
// partition). It does not wait for messages still in flight, so a test
// waiting for output polls it with Eventually. A partition that cannot be
// opened or read, or whose scanner stops before its last id, fails the test.
func (e *Cluster) ReadTopic(d topic.Description) [][]message.ImmutableMessage {
	e.t.Helper()
	out := make([][]message.ImmutableMessage, d.Partitions)
	for p := range out {
		ch := topic.ChannelName(d.Name, p)
		last := e.LastID(ch)
		if last == 0 {
			continue
		}
		w, err := e.Opener.Open(context.Background(), &wal.OpenOption{Channel: ch})
		if err != nil {
			e.t.Fatal(err)
		}
		s, err := w.Read(context.Background(), wal.ReadOption{Name: "shardtest-read", DeliverPolicy: wal.DeliverAll()})
		if err != nil {
			w.Close()
			e.t.Fatal(err)
		}
		var at message.MessageID
		for m := range s.Chan() {
			out[p] = append(out[p], m)
			if at = m.ID; at >= last {
				break
			}
		}
		s.Close()
		w.Close()
		if at < last {
			e.t.Fatalf("reading %s: the scanner stopped at message id %d, before the last id %d: %v", ch, at, last, s.Error())
		}
	}
	return out
}

// Counts waits until n's primary of spec has committed every message of its
// sources, then returns the shard's wordcount counts.
func (e *Cluster) Counts(n *Node, spec *shard.Spec) map[string]int64 {
	e.t.Helper()
	var out map[string]int64
	Eventually(e.t, "shard "+spec.ID+" on "+n.ID+" consumed its sources", func() (bool, string) {
		sh, release, ok := n.Service.Primary(spec.ID)
		if !ok {
			return false, "not primary"
		}
		defer release()
		offs, err := recoverylog.LoadOffsets(sh.Database())
		if err != nil {
			return false, err.Error()
		}
		for _, src := range spec.Sources {
			if last := e.LastID(src.Channel()); offs[src.Channel()].ID != last {
				return false, fmt.Sprintf("%s at %d of %d", src.Channel(), offs[src.Channel()].ID, last)
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

// WordcountSpec is a wordcount shard spec reading words/<partition>.
func WordcountSpec(id string, partition, standbys int) *shard.Spec {
	return &shard.Spec{ID: id, App: wordcount.Name, Sources: []shard.Source{{Topic: wordcount.InputTopic, Partition: partition}}, HotStandbys: standbys}
}

// Corpus returns n deterministic lines of a few words from a small
// vocabulary (so counts collide across messages).
func Corpus(seed, n int) []string {
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

// DiffCounts describes how got differs from want ("" when equal).
func DiffCounts(got, want map[string]int64) string {
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

// DumpDB returns every key/value of the RocksDB at dir (opened after its
// replica stopped).
func DumpDB(t testing.TB, dir string) map[string]string {
	t.Helper()
	return rockstest.MapDir(t, dir)
}

// HookedApp is wordcount (named name) with hook run after each Consume.
func HookedApp(name string, hook func(s shard.Shard, env topic.Envelope) error) shard.App {
	app := wordcount.App()
	app.Name = name
	app.NewConsumer = func() shard.Consumer { return &hookedConsumer{hook: hook} }
	return app
}

// hookedConsumer is HookedApp's consumer.
type hookedConsumer struct {
	wordcount.Consumer
	hook func(s shard.Shard, env topic.Envelope) error
}

// Consume counts the message, then runs the hook.
func (c *hookedConsumer) Consume(s shard.Shard, env topic.Envelope, pub shard.Publisher) error {
	if err := c.Consumer.Consume(s, env, pub); err != nil {
		return err
	}
	return c.hook(s, env)
}

// Exists reports whether path exists.
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
