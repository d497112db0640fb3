package cmdline

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/consumerd/consumerd/shard"
)

// Program is what every command of a daemon's command line shares: the
// applications the binary registers, its name, its streams, its
// environment and its signals. daemon.Options fills it; every field is set
// (the process's own streams, os.LookupEnv) except Signals.
type Program struct {
	// Apps are the applications the binary knows, in registration order.
	Apps []shard.App
	// Name is the program's name in help and messages.
	Name string
	// Stdin, Stdout, Stderr are the command's streams.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// LookupEnv reads the flags' environment mirrors.
	LookupEnv func(string) (string, bool)
	// Signals, when set, replaces SIGINT/SIGTERM as the shutdown requests
	// of serve and of read --follow (tests send on it).
	Signals <-chan os.Signal
}

// NotifySignals returns the channel of shutdown requests and a function
// that stops their delivery: Signals when set, else SIGINT and SIGTERM.
func (p Program) NotifySignals() (<-chan os.Signal, func()) {
	if p.Signals != nil {
		return p.Signals, func() {}
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

// RealSignals reports whether shutdown requests are the process's own
// signals (not a test's channel): a second one may then end the process.
func (p Program) RealSignals() bool { return p.Signals == nil }

// App returns the registered application named name; an unknown name is
// an error naming the ones the binary knows.
func (p Program) App(name string) (shard.App, error) {
	for _, a := range p.Apps {
		if a.Name == name {
			return a, nil
		}
	}
	return shard.App{}, fmt.Errorf("unknown app %q (this binary knows: %s)", name, strings.Join(p.AppNames(), ", "))
}

// AppNamesInOrder are the apps' names in registration order.
func (p Program) AppNamesInOrder() []string {
	names := make([]string, 0, len(p.Apps))
	for _, a := range p.Apps {
		names = append(names, a.Name)
	}
	return names
}

// AppNames are the apps' names sorted, or "none".
func (p Program) AppNames() []string {
	names := p.AppNamesInOrder()
	sort.Strings(names)
	if len(names) == 0 {
		names = []string{"none"}
	}
	return names
}

// AppMap is the apps by name.
func (p Program) AppMap() map[string]shard.App {
	m := make(map[string]shard.App, len(p.Apps))
	for _, a := range p.Apps {
		m[a.Name] = a
	}
	return m
}
