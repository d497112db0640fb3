package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// Kind is a kind of fault the nemesis injects.
type Kind string

// The fault kinds. A partition drops packets with a blackhole route (toward
// a service's addresses) or a blackhole rule (from a service's address);
// netem is not needed.
const (
	// MemberEtcd cuts a consumerd member off from every etcd member; it
	// still reaches NATS and the other members.
	MemberEtcd Kind = "member-etcd"
	// MemberNats cuts a consumerd member off from every nats-server; it
	// still reaches etcd.
	MemberNats Kind = "member-nats"
	// EtcdMinority isolates one etcd member from its peers and all clients.
	EtcdMinority Kind = "etcd-minority"
	// NatsIsolate isolates one nats-server from its peers and all clients.
	NatsIsolate Kind = "nats-isolate"
	// NatsKill SIGKILLs one nats-server and restarts it on its store.
	NatsKill Kind = "nats-kill"
	// MemberKill SIGKILLs a consumerd member and restarts it on its data dir.
	MemberKill Kind = "member-kill"
	// MemberStop SIGSTOPs a consumerd member for longer than its lease,
	// then SIGCONTs it: it wakes up a zombie and must fence itself.
	MemberStop Kind = "member-stop"
	// MemberTerm SIGTERMs a consumerd member (it hands its shards off and
	// exits 0) and starts it again.
	MemberTerm Kind = "member-term"
	// MemberFlap takes a member's link down and up repeatedly.
	MemberFlap Kind = "member-flap"
	// StreamRecreate deletes the stream of a partition of the pipeline's
	// input (as `nats stream rm` does); the fault's batch creates it again.
	// The shard reading it must stop FAILED, not skip the new lines whose
	// ids are at or below its offset; the heal accepts the loss from the
	// stream's start (`shards accept-source`). Nothing unread is lost: the
	// batch is published after the deletion, and every earlier line was
	// counted before it, so the counts must be exact again.
	StreamRecreate Kind = "stream-recreate"
)

// Kinds is every fault kind, in a fixed order.
var Kinds = []Kind{MemberEtcd, MemberNats, EtcdMinority, NatsIsolate, NatsKill, MemberKill, MemberStop, MemberTerm, MemberFlap, StreamRecreate}

// onBackend reports whether the kind's target is a backend host (an etcd or
// NATS node) rather than a consumerd member.
func (k Kind) onBackend() bool { return k == EtcdMinority || k == NatsIsolate || k == NatsKill }

// onPartition reports whether the kind's target is a partition of the
// pipeline's input topic.
func (k Kind) onPartition() bool { return k == StreamRecreate }

// loses reports whether the fault loses data a stream held, so that its
// batch is published after it is injected (what a stream held when the
// fault struck was consumed already), not while it holds.
func (k Kind) loses() bool { return k == StreamRecreate }

// targets is how many targets a fault of kind k chooses from.
func (k Kind) targets(members int) int {
	switch {
	case k.onBackend():
		return backends
	case k.onPartition():
		return pipelinePartitions
	}
	return members
}

// Fault is one scheduled fault: its kind, its target (a member index, or a
// backend index for backend kinds), how long it holds before the heal, and
// for MemberFlap the down and up periods of each flap.
type Fault struct {
	Kind   Kind
	Target int
	Hold   time.Duration
	Flaps  []time.Duration // MemberFlap: down, up, down, up, ...
}

func (f Fault) String() string {
	target := memberName(f.Target)
	switch {
	case f.Kind.onBackend():
		target = backendHost(f.Target)
	case f.Kind.onPartition():
		target = inputChannel(f.Target)
	}
	s := fmt.Sprintf("%s %s hold=%s", f.Kind, target, f.Hold)
	if len(f.Flaps) > 0 {
		s += fmt.Sprintf(" flaps=%d", len(f.Flaps)/2)
	}
	return s
}

// Schedule is the faults of a run: every kind once in an order drawn from
// seed, then extra more of kinds drawn from seed. Targets and holds are
// drawn too; a MemberStop holds longer than the lease, so the stopped
// member loses its shards and wakes up as a zombie. The same arguments give
// the same schedule.
func Schedule(seed uint64, members int, leaseTTL time.Duration, extra int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x636861))
	kinds := append([]Kind{}, Kinds...)
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for i := 0; i < extra; i++ {
		kinds = append(kinds, Kinds[rng.IntN(len(Kinds))])
	}
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	faults := make([]Fault, 0, len(kinds))
	for _, k := range kinds {
		f := Fault{Kind: k, Target: rng.IntN(k.targets(members))}
		switch k {
		case MemberStop:
			f.Hold = leaseTTL + ms(1000, 3000)
		case MemberFlap:
			for i, n := 0, 3+rng.IntN(3); i < n; i++ {
				f.Flaps = append(f.Flaps, ms(300, 2500), ms(200, 1500))
			}
			for _, d := range f.Flaps {
				f.Hold += d
			}
		default:
			f.Hold = ms(2000, 6000)
		}
		faults = append(faults, f)
	}
	return faults
}

// inject starts fault f and holds it for f.Hold; the returned heal ends it.
// heal returns once the fault is over (a restarted service started, a
// SIGTERMed member exited and started again).
func (c *cluster) inject(ctx context.Context, f Fault) (heal func(context.Context) error, err error) {
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.Hold):
			return nil
		}
	}
	t := f.Target
	switch f.Kind {
	case MemberEtcd, MemberNats:
		prefix := etcdNet
		if f.Kind == MemberNats {
			prefix = natsNet
		}
		if err := c.net.blackhole(ctx, memberName(t), prefix, true); err != nil {
			return nil, err
		}
		heal = func(ctx context.Context) error { return c.net.blackhole(ctx, memberName(t), prefix, false) }
	case EtcdMinority, NatsIsolate:
		addr := etcdAddr(t)
		if f.Kind == NatsIsolate {
			addr = natsAddr(t)
		}
		if err := c.net.silence(ctx, backendHost(t), addr, true); err != nil {
			return nil, err
		}
		heal = func(ctx context.Context) error { return c.net.silence(ctx, backendHost(t), addr, false) }
	case NatsKill:
		c.nats[t].kill()
		heal = func(context.Context) error { return c.nats[t].start(c.net) }
	case MemberKill:
		c.members[t].kill()
		heal = func(context.Context) error { return c.members[t].start(c.net) }
	case MemberStop:
		if err := c.members[t].signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		heal = func(context.Context) error { return c.members[t].signal(syscall.SIGCONT) }
	case MemberTerm:
		if err := c.members[t].signal(syscall.SIGTERM); err != nil {
			return nil, err
		}
		heal = func(context.Context) error {
			m := c.members[t]
			if err := m.wait(40 * time.Second); err != nil {
				m.kill()
				return fmt.Errorf("after SIGTERM: %w (killed)", err)
			}
			st := m.exitState()
			if err := m.start(c.net); err != nil {
				return err
			}
			if st != "exited 0" {
				return fmt.Errorf("after SIGTERM %s %s instead of handing its shards off and exiting 0", m.name, st)
			}
			return nil
		}
	case StreamRecreate:
		if err := c.removeStream(ctx, inputChannel(t)); err != nil {
			return nil, err
		}
		heal = func(ctx context.Context) error { return c.acceptLostSource(ctx, inputShard(t)) }
	case MemberFlap:
		host := memberName(t)
		heal = func(ctx context.Context) error { return c.net.link(ctx, host, true) }
		for i, d := range f.Flaps {
			if err := c.net.link(ctx, host, i%2 == 1); err != nil {
				return heal, err
			}
			select {
			case <-ctx.Done():
				return heal, ctx.Err()
			case <-time.After(d):
			}
		}
		return heal, nil
	default:
		return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if err := wait(); err != nil {
		return heal, err
	}
	return heal, nil
}
