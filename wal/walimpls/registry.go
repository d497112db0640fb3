package walimpls

import (
	"fmt"
	"sort"
	"sync"
)

// Registry maps backend names to their builders. It is safe for concurrent use.
// The zero value is not usable; create one with NewRegistry.
type Registry struct {
	mu       sync.RWMutex
	builders map[string]OpenerBuilderImpls
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{builders: make(map[string]OpenerBuilderImpls)}
}

// Register adds b under b.Name(), replacing any builder registered under the
// same name (the last registration wins, so tests can swap a fresh builder in).
// A nil builder or an empty name is ignored with an error.
func (r *Registry) Register(b OpenerBuilderImpls) error {
	if b == nil {
		return fmt.Errorf("walimpls: register: nil builder")
	}
	name := b.Name()
	if name == "" {
		return fmt.Errorf("walimpls: register %T: empty backend name", b)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.builders[name] = b
	return nil
}

// Get returns the builder registered under name.
func (r *Registry) Get(name string) (OpenerBuilderImpls, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.builders[name]
	return b, ok
}

// Names lists the registered backend names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.builders))
	for n := range r.builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// defaultRegistry is the process-wide registry behind Register and Get. It is
// the package's only global besides the sentinel errors.
var defaultRegistry = NewRegistry()

// Register adds b to the process-wide registry under b.Name(). A nil builder
// or an empty name is ignored; use (*Registry).Register to see the error.
func Register(b OpenerBuilderImpls) { _ = defaultRegistry.Register(b) }

// Get returns the builder registered in the process-wide registry under name.
func Get(name string) (OpenerBuilderImpls, bool) { return defaultRegistry.Get(name) }

// Names lists the backends in the process-wide registry, sorted.
func Names() []string { return defaultRegistry.Names() }
