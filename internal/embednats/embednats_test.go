package embednats_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/internal/embednats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// publishAndCount stores n messages on a fresh or existing stream "T" and
// returns the stream's message count.
func publishAndCount(t *testing.T, url string, n int) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t"}})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	for i := 0; i < n; i++ {
		if _, err := js.Publish(ctx, "t", []byte("x")); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestStartPublishRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := embednats.Start(embednats.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") {
		t.Fatalf("URL %q: want nats://127.0.0.1:<port>", s.URL())
	}
	if got := publishAndCount(t, s.URL(), 3); got != 3 {
		t.Fatalf("stream holds %d messages, want 3", got)
	}
	s.Shutdown()
	s.Shutdown() // idempotent

	// Same store directory: the stream and its messages survive.
	s2, err := embednats.Start(embednats.Config{StoreDir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	if got := publishAndCount(t, s2.URL(), 2); got != 5 {
		t.Fatalf("after restart stream holds %d messages, want 5", got)
	}
}

func TestPortTakenNamesAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = embednats.Start(embednats.Config{Port: port, StoreDir: t.TempDir()})
	if err == nil {
		t.Fatal("Start on a taken port succeeded")
	}
	want := "127.0.0.1:" + strconv.Itoa(port)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the address %s", err, want)
	}
}

func TestExplicitPortAndBadConfig(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s, err := embednats.Start(embednats.Config{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if want := "127.0.0.1:" + strconv.Itoa(port); s.Addr() != want {
		t.Fatalf("Addr %q, want %q", s.Addr(), want)
	}

	for _, tc := range []struct {
		name string
		cfg  embednats.Config
		want string
	}{
		{"no store dir", embednats.Config{}, "StoreDir"},
		{"negative port", embednats.Config{Port: -5, StoreDir: t.TempDir()}, "invalid port -5"},
		{"port too big", embednats.Config{Port: 70000, StoreDir: t.TempDir()}, "invalid port 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := embednats.Start(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
