package memory

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/consumerd/consumerd/wal/message"
)

// outcome is one append's result on its way to the caller.
type outcome struct {
	w      *wal
	msg    *message.MutableMessage // for the AfterStore hook
	stored bool                    // the message was stored (run the AfterStore hook)
	id     message.MessageID
	err    error
	cb     func(message.MessageID, error)
}

// acker is an opener's acknowledgement goroutine: it delivers outcomes in
// the order they were queued, or shuffled within each batch it takes (see
// Builder.ShuffleAcks), so the backend's callbacks come from another
// goroutine and, optionally, out of call order — as JetStream's do.
type acker struct {
	mu      sync.Mutex
	q       []outcome
	wake    chan struct{} // cap 1
	stopped bool
	quit    chan struct{}
	done    chan struct{}
	rnd     *rand.Rand // nil: arrival order
}

func newAcker(seed uint64) *acker {
	a := &acker{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if seed != 0 {
		a.rnd = rand.New(rand.NewPCG(seed, seed>>1|1))
	}
	return a
}

// push queues an outcome for delivery.
func (a *acker) push(o outcome) {
	a.mu.Lock()
	a.q = append(a.q, o)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run delivers queued outcomes until stop; the outcomes queued when stop is
// called are still delivered.
func (a *acker) run() {
	defer close(a.done)
	var batch []outcome
	for {
		a.mu.Lock()
		batch, a.q = a.q, batch[:0]
		stopped := a.stopped
		a.mu.Unlock()
		if a.rnd != nil {
			a.rnd.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		}
		for i := range batch {
			batch[i].deliver()
			batch[i] = outcome{}
		}
		if len(batch) > 0 {
			continue
		}
		if stopped {
			return
		}
		select {
		case <-a.wake:
		case <-a.quit:
			a.mu.Lock()
			a.stopped = true
			a.mu.Unlock()
		}
	}
}

func (a *acker) stop() {
	close(a.quit)
	<-a.done
}

// deliver runs the AfterStore hook of a stored message (an error there is a
// lost acknowledgement: the message stays stored) and reports the outcome.
func (o *outcome) deliver() {
	w := o.w
	if o.stored {
		if hook := w.st.appendHook(); hook != nil {
			if err := hook(w.ch.name, o.msg, AfterStore); err != nil {
				o.id, o.err = 0, fmt.Errorf("memory: append to %q: acknowledgement of id %d lost: %w", w.ch.name, o.id, err)
			}
		}
	}
	w.settled(o.err)
	o.cb(o.id, o.err)
	w.done()
}
