package connect

import "testing"

// The one derivation: --wal.namespace when given, else the etcd prefix's.
func TestWALNamespace(t *testing.T) {
	for _, tc := range []struct{ explicit, prefix, want string }{
		{"", "/consumerd", "consumerd"},
		{"", "/alpha", "alpha"},
		{"", "/a/b-c", "a-sb--c"},
		{"blue", "/consumerd", "blue"},
		{"consumerd", "/alpha", "consumerd"},
	} {
		if got, err := WALNamespace(tc.explicit, tc.prefix); err != nil || got != tc.want {
			t.Errorf("walNamespace(%q, %q) = %q, %v; want %q", tc.explicit, tc.prefix, got, err, tc.want)
		}
	}
}
