package topic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/etcdtest"
)

const testRoot = "/t"

// TestRegistry runs testdata/registry against a real etcd (one per file).
// Commands:
//
//	create name=N partitions=P   Registry.Create: "created", "unchanged" or the error
//	get name=N                   Registry.Get: "N P" or the error
//	list                         Registry.List: "N P" a topic, then "bad: ERR" a record
//	put key=K                    raw put of <root>/K with the input as its value
//	delete name=N [unless=K]     Registry.Delete, guarded by <root>/K not existing
//
// An error is printed with the sentinels it wraps.
func TestRegistry(t *testing.T) {
	cli := etcdtest.Start(t)
	reg := &Registry{Client: cli, Prefix: testRoot}
	datadriven.RunTest(t, "testdata/registry", func(t *testing.T, d *datadriven.TestData) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var name, key, unless string
		var partitions int
		d.MaybeScanArgs(t, "name", &name)
		d.MaybeScanArgs(t, "partitions", &partitions)
		d.MaybeScanArgs(t, "key", &key)
		d.MaybeScanArgs(t, "unless", &unless)
		switch d.Cmd {
		case "create":
			created, err := reg.Create(ctx, Description{Name: name, Partitions: partitions})
			if err != nil {
				return errorLine(err)
			}
			if created {
				return "created\n"
			}
			return "unchanged\n"
		case "get":
			got, err := reg.Get(ctx, name)
			if err != nil {
				return errorLine(err)
			}
			return fmt.Sprintf("%s %d\n", got.Name, got.Partitions)
		case "list":
			set, err := reg.List(ctx)
			if err != nil {
				return errorLine(err)
			}
			var b strings.Builder
			for _, n := range set.Names() {
				fmt.Fprintf(&b, "%s %d\n", n, set.ByName[n].Partitions)
			}
			for _, err := range set.Bad {
				b.WriteString("bad: " + errorLine(err))
			}
			return b.String()
		case "put":
			if _, err := cli.Put(ctx, testRoot+"/"+key, strings.TrimSuffix(d.Input, "\n")); err != nil {
				d.Fatalf(t, "put %s: %v", key, err)
			}
			return "ok\n"
		case "delete":
			var ifs []clientv3.Cmp
			if unless != "" {
				ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(testRoot+"/"+unless), "=", 0))
			}
			if err := reg.Delete(ctx, name, ifs...); err != nil {
				return errorLine(err)
			}
			return "deleted\n"
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// errorLine is err's message and the registry's sentinels it wraps.
func errorLine(err error) string {
	var is []string
	for _, s := range []struct {
		name string
		err  error
	}{
		{"ErrUnknownTopic", ErrUnknownTopic},
		{"ErrPartitionsChange", ErrPartitionsChange},
		{"ErrBadRecord", ErrBadRecord},
		{"ErrDeleteGuard", ErrDeleteGuard},
	} {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	return fmt.Sprintf("error: %v [%s]\n", err, strings.Join(is, " "))
}

// TestCreateConcurrently creates each topic from several goroutines at once,
// half of them with 4 partitions and half with 8: exactly one creates it,
// those asking for the winner's count see it exist, the others get
// ErrPartitionsChange naming both counts, and the record holds the winner's
// count.
func TestCreateConcurrently(t *testing.T) {
	cli := etcdtest.Start(t)
	reg := &Registry{Client: cli, Prefix: testRoot}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topics, perCount = 10, 3
	counts := []int{4, 8}
	for i := range topics {
		name := fmt.Sprintf("t%d", i)
		type result struct {
			partitions int
			created    bool
			err        error
		}
		results := make(chan result, perCount*len(counts))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, n := range counts {
			for range perCount {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					created, err := reg.Create(ctx, Description{Name: name, Partitions: n})
					results <- result{n, created, err}
				}()
			}
		}
		close(start)
		wg.Wait()
		close(results)
		var all []result
		winner := 0
		for r := range results {
			all = append(all, r)
			if r.created {
				if winner != 0 {
					t.Fatalf("topic %s created twice (%d and %d partitions)", name, winner, r.partitions)
				}
				winner = r.partitions
			}
		}
		if winner == 0 {
			t.Fatalf("topic %s: no create succeeded: %+v", name, all)
		}
		for _, r := range all {
			switch {
			case r.partitions == winner && r.err != nil:
				t.Errorf("topic %s: create with the winner's %d partitions: %v", name, winner, r.err)
			case r.partitions != winner && (!errors.Is(r.err, ErrPartitionsChange) ||
				!strings.Contains(r.err.Error(), fmt.Sprintf("exists with %d partitions; refusing %d", winner, r.partitions))):
				t.Errorf("topic %s: create with %d partitions after %d won: %v, want ErrPartitionsChange naming both", name, r.partitions, winner, r.err)
			}
		}
		if d, err := reg.Get(ctx, name); err != nil || d.Partitions != winner {
			t.Errorf("topic %s after the race: %+v, %v; want %d partitions", name, d, err, winner)
		}
	}
}
