package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/freeport"
	"github.com/consumerd/consumerd/internal/waitfor"
)

// TestMemberIdentity runs real processes: a second process with a member id
// a live one holds is refused (exit 1, naming the holder) instead of
// looping; a process on a data directory another one holds is refused at
// once; a member restarted after SIGKILL reclaims its own key at once
// instead of waiting out its old lease (60 s here, longer than the test
// waits).
func TestMemberIdentity(t *testing.T) {
	c := newCluster(t, 60*time.Second)
	a := c.addMember("a", "z1")
	c.start(a)
	waitfor.Until(t, 60*time.Second, "a to join", func() (bool, string) {
		out, err := c.run(nil, "members", "list")
		return err == nil && strings.Contains(out, a.httpAddr), out
	})
	exitsWith := func(name string, m *member, want ...string) {
		t.Helper()
		p := startProc(t, name, filepath.Join(c.dir, name+".log"), nil, c.bin, c.serveArgs(m)...)
		t.Cleanup(p.kill)
		waitfor.Until(t, 60*time.Second, name+" to exit", func() (bool, string) { return p.exited(), p.tail(5) })
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: %v, want exit 1\n%s", name, p.err, p.tail(20))
		}
		for _, w := range want {
			if !strings.Contains(p.tail(50), w) {
				t.Fatalf("%s does not say %q:\n%s", name, w, p.tail(20))
			}
		}
	}
	dup := &member{id: "a", zone: "z1", httpAddr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), dataDir: filepath.Join(c.dir, "dup")}
	exitsWith("duplicate-id", dup, `member id "a" in zone "z1" is held by a live process`, "endpoint http://"+a.httpAddr, "give each member its own --member.id")
	same := &member{id: "b", zone: "z1", httpAddr: fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), dataDir: a.dataDir}
	exitsWith("same-data-dir", same, "is in use by another consumerd process", "give each process its own --data-dir")

	a.proc.kill()
	c.start(a)
	waitfor.Until(t, 30*time.Second, "a to reclaim its key and serve", func() (bool, string) {
		code, body, err := httpGet("http://" + a.httpAddr + "/readyz")
		return err == nil && code == 200 && strings.Contains(a.proc.tail(200), "reclaimed the member key from this process's previous incarnation"),
			fmt.Sprint(code, string(body), err)
	})
}
