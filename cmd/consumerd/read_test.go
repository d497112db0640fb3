package main

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/internal/natstest"
)

// TestReadFollow runs `consumerd read` as a process: without --follow it
// stops at the head; with --follow it prints what is there, then a message
// published after it started, and SIGINT (Ctrl-C) ends it with exit 0.
func TestReadFollow(t *testing.T) {
	bin := consumerdBinary(t)
	conn := []string{"--etcd.endpoints", strings.Join(etcdtest.StartServer(t), ","), "--wal.url", natstest.Start(t)}
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, conn...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, errb.String())
		}
		return out.String()
	}
	run("", "topics", "create", "--name", "t", "--partitions", "2")
	run("k1\tone\nk2\t\xfftwo\n", "publish", "--topic", "t", "--format", "kv")
	if out := run("", "read", "--topic", "t"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "k1\tone\n") || !strings.Contains(out, "k2\t\xfftwo\n") {
		t.Fatalf("read to the head: %q", out)
	}

	cmd := exec.Command(bin, append([]string{"read", "--topic", "t", "--follow"}, conn...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var mu sync.Mutex
	var got strings.Builder
	arrived := make(chan struct{}, 1)
	copied := make(chan struct{})
	go func() { // owned here: ends when the process closes its stdout
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := stdout.Read(buf)
			mu.Lock()
			got.Write(buf[:n])
			mu.Unlock()
			select {
			case arrived <- struct{}{}:
			default:
			}
			if err != nil { // io.EOF once the process exited
				return
			}
		}
	}()
	waitLines := func(n int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			s := got.String()
			mu.Unlock()
			if strings.Count(s, "\n") >= n {
				return
			}
			select {
			case <-arrived:
			case <-deadline:
				t.Fatalf("read --follow printed %q; want %d lines (stderr %s)", s, n, errb.String())
			}
		}
	}
	waitLines(2)
	run("late\tthree\n", "publish", "--topic", "t", "--format", "kv")
	waitLines(3)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-copied
	err = cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if err != nil || time.Since(start) > 5*time.Second || !strings.HasSuffix(got.String(), "late\tthree\n") {
		t.Fatalf("read --follow after SIGINT: %v after %s, stdout %q, stderr %q; want exit 0 at once", err, time.Since(start), got.String(), errb.String())
	}
}
