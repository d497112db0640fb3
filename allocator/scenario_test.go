package allocator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var update = flag.Bool("update", false, "rewrite expected blocks of testdata/scenarios from actual results")

// Scenario files (testdata/scenarios/*.txt) drive members against a real
// embedded etcd. Commands, one per line ('#' starts a comment):
//
//	member zone=Z id=M limit=N [expect-error=exists]   start a member (NewMember + Run)
//	item id=I replication=R | item id=I disable      create/update an item
//	items I=R ...           create/update several items in one transaction
//	delete-item I
//	put KEY VALUE...        raw put of <root>/KEY (e.g. malformed keys)
//	delete KEY              raw delete of <root>/KEY (e.g. an operator's unassign)
//	absent KEY              assert <root>/KEY does not exist
//	status I Z/M STATE      the member writes STATE on its assignment of I
//	ready                   every IDLE/BACKFILL replica reports STANDBY (slot 0: PRIMARY;
//	                        a promoted slot-0 STANDBY reports PRIMARY),
//	                        all in one transaction
//	fail I Z/M              the member's replica of I reports FAILED
//	load Z/M [I=BUSY[@AGE] ...]  the member reports its load (window 1 s): each item I
//	                        it is primary of now, busy BUSY µs per second, led for
//	                        AGE ms (default 60000) (ReportLoad)
//	exit Z/M                SetExiting
//	kill Z/M                the member stops and its lease is revoked
//	converge                wait until the leader has nothing left to do
//	exited Z/M              wait until the member's Run returned nil (drained)
//	running                 assert every member not killed or exited is still running
//	check                   assert scheduler invariants on the assignments
//	expect                  the assignments, one item a line, until "end":
//	                          ITEM ZONE/MEMBER/SLOT:STATE ... (slot 0 first, '-' if none; then by member)
//	                        run with -update to rewrite the block from the actual state
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			t.Parallel()
			runScenario(t, f)
		})
	}
}

type scenMember struct {
	m      *Member
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	killed bool
}

type scenario struct {
	t       *testing.T
	client  *clientv3.Client
	prefix  string
	members map[string]*scenMember
	order   []string
	logger  hclog.Logger
}

func runScenario(t *testing.T, file string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{
		t:       t,
		client:  etcdtest.Start(t),
		prefix:  "/scen",
		members: map[string]*scenMember{},
		logger:  hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
	}
	defer s.stopAll()
	lines := strings.Split(string(raw), "\n")
	var out []string
	for n := 0; n < len(lines); n++ {
		line := lines[n]
		out = append(out, line)
		text := strings.TrimSpace(line)
		if i := strings.Index(text, "#"); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" {
			continue
		}
		where := fmt.Sprintf("%s:%d: %s", filepath.Base(file), n+1, text)
		if text == "expect" {
			var want []string
			n++
			for ; n < len(lines) && strings.TrimSpace(lines[n]) != "end"; n++ {
				if l := strings.TrimSpace(lines[n]); l != "" {
					want = append(want, l)
				}
			}
			if n >= len(lines) {
				t.Fatalf("%s: expect without end", where)
			}
			got := s.assignmentLines()
			if *update {
				out = append(out, got...)
			} else if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%s:\n--- got\n%s\n--- want\n%s", where, strings.Join(got, "\n"), strings.Join(want, "\n"))
			} else {
				out = append(out, want...)
			}
			out = append(out, "end")
			continue
		}
		if err := s.exec(text); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func kv(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}

func (s *scenario) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}

func (s *scenario) exec(text string) error {
	f := strings.Fields(text)
	ctx, cancel := s.ctx()
	defer cancel()
	switch f[0] {
	case "member":
		a := kv(f[1:])
		limit, err := strconv.Atoi(a["limit"])
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		m, err := NewMember(ctx, Config{
			Client: s.client, Prefix: s.prefix, Zone: a["zone"], MemberID: a["id"],
			LeaseTTL: 10 * time.Second, Spec: MemberSpec{ItemLimit: limit, Endpoint: "http://" + a["id"]},
			Logger: s.logger.Named(a["zone"] + "/" + a["id"]),
		})
		if a["expect-error"] == "exists" {
			if !errors.Is(err, ErrMemberExists) {
				return fmt.Errorf("want ErrMemberExists, got %v", err)
			}
			if !strings.Contains(err.Error(), MemberKey(s.prefix, a["zone"], a["id"])) {
				return fmt.Errorf("error does not name the key: %v", err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		rctx, rcancel := context.WithCancel(context.Background())
		sm := &scenMember{m: m, cancel: rcancel, done: make(chan struct{})}
		go func() {
			defer close(sm.done)
			sm.err = m.Run(rctx)
		}()
		name := a["zone"] + "/" + a["id"]
		s.members[name] = sm
		s.order = append(s.order, name)
		return nil
	case "item":
		a := kv(f[1:])
		v := map[string]any{"id": a["id"]}
		if _, ok := a["disable"]; ok {
			v["disable"] = true
		} else {
			r, err := strconv.Atoi(a["replication"])
			if err != nil {
				return fmt.Errorf("replication: %w", err)
			}
			v["hot_standbys"] = r - 1
		}
		b, _ := json.Marshal(v)
		_, err := s.client.Put(ctx, ItemKey(s.prefix, a["id"]), string(b))
		return err
	case "items":
		// items ID=R ... : create or update several items in one transaction.
		var ops []clientv3.Op
		for _, a := range f[1:] {
			id, rs, _ := strings.Cut(a, "=")
			r, err := strconv.Atoi(rs)
			if err != nil {
				return fmt.Errorf("item %s: replication: %w", id, err)
			}
			b, _ := json.Marshal(map[string]any{"id": id, "hot_standbys": r - 1})
			ops = append(ops, clientv3.OpPut(ItemKey(s.prefix, id), string(b)))
		}
		_, err := s.client.Txn(ctx).Then(ops...).Commit()
		return err
	case "delete-item":
		_, err := s.client.Delete(ctx, ItemKey(s.prefix, f[1]))
		return err
	case "delete":
		_, err := s.client.Delete(ctx, s.prefix+"/"+f[1])
		return err
	case "put":
		_, err := s.client.Put(ctx, s.prefix+"/"+f[1], strings.Join(f[2:], " "))
		return err
	case "absent":
		resp, err := s.client.Get(ctx, s.prefix+"/"+f[1])
		if err == nil && len(resp.Kvs) > 0 {
			err = fmt.Errorf("key %s exists: %q", f[1], resp.Kvs[0].Value)
		}
		return err
	case "status", "fail":
		var item, member, state string
		if f[0] == "status" {
			if len(f) != 4 {
				return errors.New("want: status ITEM ZONE/MEMBER STATE")
			}
			item, member, state = f[1], f[2], f[3]
		} else {
			if len(f) != 3 {
				return errors.New("want: fail ITEM ZONE/MEMBER")
			}
			item, member, state = f[1], f[2], string(StateFailed)
		}
		as, err := s.read(ctx)
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.Item == item && a.Zone+"/"+a.Member == member {
				st := ReplicaStatus{State: ReplicaState(state)}
				if st.State == StateFailed {
					st.Error = "simulated failure"
				}
				return s.member(member).m.UpdateStatus(ctx, a, st)
			}
		}
		return fmt.Errorf("no assignment of %s on %s", item, member)
	case "ready":
		as, err := s.read(ctx)
		if err != nil {
			return err
		}
		// One transaction, so the leader sees every replica ready at once
		// (deterministic); each put is guarded as UpdateStatus guards it.
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, a := range as {
			promoted := a.Slot == 0 && a.Status.State == StateStandby
			if a.Status.State != StateIdle && a.Status.State != StateBackfill && !promoted {
				continue
			}
			st := ReplicaStatus{State: StateStandby}
			if a.Slot == 0 {
				st.State = StatePrimary
			}
			b, _ := json.Marshal(st)
			key := AssignmentKey(s.prefix, a)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", a.CreateRevision))
			ops = append(ops, clientv3.OpPut(key, string(b), clientv3.WithLease(s.member(a.Zone+"/"+a.Member).m.LeaseID())))
		}
		if len(ops) == 0 {
			return nil
		}
		resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err == nil && !resp.Succeeded {
			err = errors.New("assignments changed under ready")
		}
		return err
	case "load":
		if len(f) < 2 {
			return errors.New("want: load ZONE/MEMBER [ITEM=BUSY ...]")
		}
		as, err := s.read(ctx)
		if err != nil {
			return err
		}
		r := LoadReport{WindowMillis: 1000, Primaries: map[string]PrimaryLoad{}}
		for _, arg := range f[2:] {
			item, bs, _ := strings.Cut(arg, "=")
			bs, ages, young := strings.Cut(bs, "@")
			age := int64(60_000) // led long enough to be moved
			if young {
				if age, err = strconv.ParseInt(ages, 10, 64); err != nil {
					return fmt.Errorf("%s: age: %w", arg, err)
				}
			}
			busy, err := strconv.ParseInt(bs, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: busy: %w", arg, err)
			}
			var term int64
			for _, a := range as {
				if a.Item == item && a.Slot == 0 && a.Zone+"/"+a.Member == f[1] {
					term = a.CreateRevision
				}
			}
			if term == 0 {
				return fmt.Errorf("%s is not primary of %s", f[1], item)
			}
			r.Primaries[item] = PrimaryLoad{Term: term, BusyMicros: busy, AgeMillis: age}
		}
		return s.member(f[1]).m.ReportLoad(ctx, r)
	case "exit":
		return s.member(f[1]).m.SetExiting(ctx)
	case "kill":
		sm := s.member(f[1])
		sm.killed = true
		sm.cancel()
		<-sm.done
		return sm.m.Close()
	case "converge":
		return s.converge(ctx)
	case "exited":
		sm := s.member(f[1])
		select {
		case <-sm.done:
			if sm.err != nil {
				return fmt.Errorf("Run returned %v, want nil", sm.err)
			}
			sm.killed = true
			return sm.m.Close()
		case <-ctx.Done():
			return fmt.Errorf("member %s did not exit", f[1])
		}
	case "running":
		for _, name := range s.order {
			sm := s.members[name]
			if sm.killed {
				continue
			}
			select {
			case <-sm.done:
				return fmt.Errorf("member %s stopped: %v", name, sm.err)
			default:
			}
		}
		return nil
	case "check":
		return s.check(ctx)
	}
	return fmt.Errorf("unknown command %q", f[0])
}

func (s *scenario) member(name string) *scenMember {
	sm, ok := s.members[name]
	if !ok {
		s.t.Fatalf("unknown member %s", name)
	}
	return sm
}

func (s *scenario) stopAll() {
	for _, name := range s.order {
		sm := s.members[name]
		sm.cancel()
		<-sm.done
		if !sm.killed && sm.err != nil {
			s.t.Errorf("member %s: Run: %v", name, sm.err)
		}
		_ = sm.m.Close()
	}
}

// read returns the assignments as stored in etcd.
func (s *scenario) read(ctx context.Context) ([]Assignment, error) {
	resp, err := s.client.Get(ctx, assignPrefix(s.prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []Assignment
	for _, kv := range resp.Kvs {
		a, err := parseAssignmentKey(s.prefix, string(kv.Key))
		if err != nil {
			continue
		}
		if a.Status, err = DecodeReplicaStatus(kv.Value); err != nil {
			continue
		}
		a.CreateRevision, a.ModRevision = kv.CreateRevision, kv.ModRevision
		out = append(out, a)
	}
	sortAssignments(out)
	return out, nil
}

// converge waits until the current leader has evaluated the latest revision
// and found nothing to do.
func (s *scenario) converge(ctx context.Context) error {
	for {
		resp, err := s.client.Get(ctx, "/scen-noop")
		if err != nil {
			return err
		}
		rev := resp.Header.Revision
		var leader string
		for _, name := range s.order {
			sm := s.members[name]
			if sm.killed {
				continue
			}
			if ks := sm.m.KeySpace(); ks.Revision() >= rev {
				leader = ks.Snapshot().Leader
				break
			}
		}
		if sm, ok := s.members[leader]; ok && !sm.killed && sm.m.idleRev.Load() >= rev {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not converged (leader %q): %w", leader, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *scenario) assignmentLines() []string {
	ctx, cancel := s.ctx()
	defer cancel()
	as, err := s.read(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	byItem := map[string][]Assignment{}
	var items []string
	for _, a := range as {
		if _, ok := byItem[a.Item]; !ok {
			items = append(items, a.Item)
		}
		byItem[a.Item] = append(byItem[a.Item], a)
	}
	var out []string
	for _, it := range items {
		list := byItem[it]
		sort.Slice(list, func(i, j int) bool {
			if (list[i].Slot == 0) != (list[j].Slot == 0) {
				return list[i].Slot == 0
			}
			return list[i].Zone+"/"+list[i].Member < list[j].Zone+"/"+list[j].Member
		})
		parts := []string{it}
		if list[0].Slot != 0 {
			parts = append(parts, "-")
		}
		for _, a := range list {
			parts = append(parts, fmt.Sprintf("%s/%s/%d:%s", a.Zone, a.Member, a.Slot, a.Status.State))
		}
		out = append(out, strings.Join(parts, " "))
	}
	if len(out) == 0 {
		out = []string{"(none)"}
	}
	return out
}

// check verifies the scheduler's invariants on the stored state: the
// desired assignments (recomputed from a fresh mirror) pass checkSolution,
// and the stored assignments respect limits and have no duplicates.
func (s *scenario) check(ctx context.Context) error {
	ks := NewKeySpace(s.client, s.prefix, nil, nil)
	if err := ks.Load(ctx); err != nil {
		return err
	}
	snap := ks.Snapshot()
	in := scheduleInput(snap, s.prefix)
	members, items := in.members, in.items
	sol := Solve(members, items)
	if err := checkSolution(members, items, sol); err != nil {
		return err
	}
	load := map[string]int{}
	seen := map[string]bool{}
	for _, a := range snap.Assignments {
		k := a.Zone + "/" + a.Member
		if seen[a.Item+"|"+k] {
			return fmt.Errorf("item %s twice on %s", a.Item, k)
		}
		seen[a.Item+"|"+k] = true
		load[k]++
	}
	for _, m := range snap.Members {
		if !m.Spec.Exiting && load[m.Key()] > m.Spec.ItemLimit {
			return fmt.Errorf("member %s holds %d, limit %d", m.Key(), load[m.Key()], m.Spec.ItemLimit)
		}
	}
	// Stored state equals the desired state once converged.
	for i, it := range items {
		var got []string
		for _, a := range snap.Assignments {
			if a.Item == it.ID {
				got = append(got, a.Zone+"/"+a.Member)
			}
		}
		var want []string
		for _, m := range sol.Desired[i] {
			want = append(want, snap.Members[m].Key())
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("item %s: assigned %v, desired %v", it.ID, got, want)
		}
	}
	return nil
}

var _ sync.Mutex
