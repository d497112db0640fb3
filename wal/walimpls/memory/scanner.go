package memory

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/consumerd/consumerd/wal/message"
	"github.com/consumerd/consumerd/wal/walimpls"
)

// scanner delivers a channel's messages from next on.
type scanner struct {
	name string
	w    *wal
	next message.MessageID

	out      chan message.ImmutableMessage
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	errMu    sync.Mutex
	err      error
}

func (s *scanner) Name() string                          { return s.name }
func (s *scanner) Chan() <-chan message.ImmutableMessage { return s.out }
func (s *scanner) Done() <-chan struct{}                 { return s.done }

func (s *scanner) Error() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *scanner) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *scanner) run() {
	err := s.loop()
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	close(s.out)
	s.w.forget(s)
	close(s.done)
}

func (s *scanner) loop() error {
	c := s.w.ch
	var batch []message.ImmutableMessage
	for {
		c.mu.Lock()
		if s.next < c.firstID {
			first := c.firstID
			c.mu.Unlock()
			return fmt.Errorf("memory: scanner %q on %q: next id %d truncated (first retained %d): %w",
				s.name, c.name, s.next, first, walimpls.ErrTruncated)
		}
		i := sort.Search(len(c.msgs), func(i int) bool { return c.msgs[i].ID >= s.next })
		batch = append(batch[:0], c.msgs[i:min(len(c.msgs), i+cap(s.out)+1)]...)
		notify := c.notify
		c.mu.Unlock()

		hook := s.w.st.scanHook()
		for _, m := range batch {
			if hook != nil {
				if err := hook(c.name, m.ID); err != nil {
					return fmt.Errorf("memory: scanner %q on %q at id %d: %w", s.name, c.name, m.ID, err)
				}
			}
			m.Payload = slices.Clone(m.Payload)
			m.Properties = maps.Clone(m.Properties)
			select {
			case s.out <- m:
				s.next = m.ID + 1
			case <-s.stop:
				return walimpls.ErrScannerClosed
			case <-s.w.closed:
				return fmt.Errorf("memory: scanner %q on %q: wal: %w", s.name, c.name, walimpls.ErrClosed)
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-notify:
		case <-s.stop:
			return walimpls.ErrScannerClosed
		case <-s.w.closed:
			return fmt.Errorf("memory: scanner %q on %q: wal: %w", s.name, c.name, walimpls.ErrClosed)
		}
	}
}
