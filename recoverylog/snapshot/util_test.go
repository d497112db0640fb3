package snapshot_test

import (
	"bytes"
	"io"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/consumerd/consumerd/internal/etcdtest"
	"github.com/consumerd/consumerd/wal/message"
)

type messageID = message.MessageID

func ioReadFull(r io.Reader, b []byte) (int, error) { return io.ReadFull(r, b) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func etcdClientStub(t *testing.T) *clientv3.Client { return etcdtest.Start(t) }
