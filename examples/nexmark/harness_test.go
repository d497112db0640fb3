package nexmark

import (
	"context"
	"fmt"
	"testing"

	"github.com/consumerd/consumerd/allocator"
	"github.com/consumerd/consumerd/shard"
	"github.com/consumerd/consumerd/shard/shardtest"
	"github.com/consumerd/consumerd/topic"
	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
	"github.com/consumerd/consumerd/windows"
)

// testPartitions is the partition count of the sources in tests.
const testPartitions = 2

// testRate is the event-time rate of test runs: 1000 events/s, so 20 k
// events span 20 s and the windowed queries close several windows.
const testRate = 1000

// runQueries runs qs on an in-process cluster of two nodes (every shard a
// primary on a and a hot standby on b) over events generated events, checks
// every query's output equals its model, and returns the rows per query.
// With kill, node a is killed once half the events are published and some
// output is committed, and b's standbys take over.
func runQueries(t *testing.T, qs []Query, events uint64, kill bool) map[string][]string {
	t.Helper()
	var apps []shardApp
	for _, q := range qs {
		apps = append(apps, q.Stages...)
	}
	e := shardtest.NewCluster(t, memory.NewBuilder(), apps...)
	e.TxnMaxMessages = 50
	for _, name := range SourceTopics {
		e.PutTopic(topic.Description{Name: name, Partitions: testPartitions})
	}
	for _, q := range qs {
		for _, ts := range q.Topics {
			e.PutTopic(topic.Description{Name: ts.Name, Partitions: ts.Partitions(testPartitions)})
		}
	}
	a, b := e.StartNode("a", t.TempDir()), e.StartNode("b", t.TempDir())
	var ids []string
	for _, q := range qs {
		for _, app := range q.Stages {
			n := testPartitions
			for _, ts := range q.Topics {
				if ts.Name == app.Topics[0] {
					n = ts.Partitions(testPartitions)
				}
			}
			specs, err := app.SpecsFor(n, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range specs {
				e.PutSpec(s)
				e.Assign(a, s.ID, 0)
				e.Assign(b, s.ID, 1)
				ids = append(ids, s.ID)
			}
		}
	}
	for _, id := range ids {
		e.WaitState(a, id, 0, allocator.StatePrimary)
		e.WaitState(b, id, 1, allocator.StateStandby)
	}

	g, err := NewGenerator(1, testRate)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(from, to uint64) {
		var ev Event
		for n := from; n < to; n++ {
			g.Event(n, &ev)
			d := topic.Description{Name: ev.Topic(), Partitions: testPartitions}
			msg := message.MutableMessage{Key: ev.Key(), Payload: ev.Append(nil), DedupeID: fmt.Sprintf("nexmark/1/%d", n)}
			if _, _, err := e.Pub.Publish(context.Background(), d, msg); err != nil {
				t.Fatalf("publish event %d: %v", n, err)
			}
		}
	}
	half := events / 2
	publish(0, half)
	if kill {
		// Every query has published some output (rows or marks; maybe more
		// committed, not yet published) when a dies, as when each query
		// had a kill test of its own.
		shardtest.Eventually(t, "some output of every query before the kill", func() (bool, string) {
			for _, q := range qs {
				if e.CountTopic(topic.Description{Name: q.Output, Partitions: outputParts(q)}) == 0 {
					return false, q.Name + ": no output yet"
				}
			}
			return true, ""
		})
		a.Kill()
		for _, id := range ids {
			e.Promote(b, id, 1)
		}
		for _, id := range ids {
			e.WaitState(b, id, 0, allocator.StatePrimary)
		}
	}
	publish(half, events)
	for _, name := range SourceTopics {
		for p := 0; p < testPartitions; p++ {
			end := windows.Mark{Sender: 0, Senders: 1, Time: windows.MaxTime}.Message()
			if _, err := e.Pub.PublishTo(context.Background(), topic.Partition{Topic: name, Index: p}, end); err != nil {
				t.Fatal(err)
			}
		}
	}

	out := map[string][]string{}
	for _, q := range qs {
		parts := outputParts(q)
		var rows []string
		shardtest.Eventually(t, q.Name+" to finish its output", func() (bool, string) {
			var done bool
			var why string
			rows, done, why = readOutput(t, e, topic.Description{Name: q.Output, Partitions: parts})
			return done, why
		})
		want := q.Model(g.Events(events))
		if len(want) == 0 {
			t.Errorf("%s: the model has no rows over %d events: the run checks nothing", q.Name, events)
		}
		if d := Diff(rows, want); d != "" {
			t.Errorf("%s (kill=%v): output differs from the model: %s", q.Name, kill, d)
		}
		out[q.Name] = rows
	}
	return out
}

type shardApp = shard.App

// outputParts is the partition count of q's output topic in tests.
func outputParts(q Query) int {
	for _, ts := range q.Topics {
		if ts.Name == q.Output {
			return ts.Partitions(testPartitions)
		}
	}
	return testPartitions
}

// readOutput reads every partition of an output topic: its rows, and whether
// every partition holds an end mark (MaxTime) from every sender.
func readOutput(t testing.TB, e *shardtest.Cluster, d topic.Description) (rows []string, done bool, why string) {
	t.Helper()
	done = true
	for p, msgs := range e.ReadTopic(d) {
		ch := topic.ChannelName(d.Name, p)
		part, ended, senders := splitOutput(t, ch, msgs)
		rows = append(rows, part...)
		if senders == 0 || ended < senders {
			done = false
			why = fmt.Sprintf("%s: %d of %d senders ended", ch, ended, senders)
		}
	}
	return rows, done, why
}

// splitOutput splits a partition's messages into its rows (the payloads of
// the messages that are not marks), the number of senders whose end mark
// (MaxTime) it holds, and the number of senders its marks name.
func splitOutput(t testing.TB, ch string, msgs []message.ImmutableMessage) (rows []string, ended, senders int) {
	t.Helper()
	end := map[int]bool{}
	for _, m := range msgs {
		mk, ok, err := windows.MarkOf(m)
		switch {
		case err != nil:
			t.Fatalf("%s message %d: %v", ch, m.ID, err)
		case ok:
			senders = mk.Senders
			if mk.Time == windows.MaxTime {
				end[mk.Sender] = true
			}
		default:
			rows = append(rows, string(m.Payload))
		}
	}
	return rows, len(end), senders
}
