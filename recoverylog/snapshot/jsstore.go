package snapshot

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/consumerd/consumerd/internal/natsconn"
)

// JetStreamConfig configures a JetStream object store.
type JetStreamConfig struct {
	// Bucket is the object-store bucket ([A-Za-z0-9_-]+); see BucketName.
	Bucket string
	// Replicas is the bucket's replication on a NATS cluster (0 or 1: one copy).
	Replicas int
	// Security is the TLS configuration and credentials of the connection
	// DialJetStreamStore makes (the zero value: plain, no credentials).
	Security natsconn.Security
}

// BucketName is the snapshot bucket of a cluster's WAL namespace (see
// wal/walimpls/jetstream.NamespaceOf: derived from the etcd prefix, or given
// with --wal.namespace): "<namespace>-snapshots", so the default prefix
// "/consumerd" keeps "consumerd-snapshots". The suffix is fixed, so distinct
// namespaces give distinct buckets: clusters sharing a NATS stay apart.
func BucketName(namespace string) string { return namespace + "-snapshots" }

// JetStreamStore is a Store in a NATS JetStream object-store bucket (the
// default store: snapshots live on the same NATS as the WAL). The object
// store chunks objects and checks each object's SHA-256 digest on read; a
// Put replaces an object atomically (its metadata is published last).
type JetStreamStore struct {
	obs    jetstream.ObjectStore
	stream jetstream.Stream // the bucket's stream, to purge delete markers
	bucket string
	nc     *nats.Conn // owned when dialled by DialJetStreamStore
}

// NewJetStreamStore binds (creating if missing) the bucket on js. The
// caller keeps owning js's connection.
func NewJetStreamStore(ctx context.Context, js jetstream.JetStream, cfg JetStreamConfig) (*JetStreamStore, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("snapshot: jetstream store: no bucket given")
	}
	obs, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      cfg.Bucket,
			Description: "consumerd shard snapshots",
			Storage:     jetstream.FileStorage,
			Replicas:    max(cfg.Replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = js.ObjectStore(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: jetstream object store bucket %q: %w", cfg.Bucket, err)
	}
	stream, err := js.Stream(ctx, "OBJ_"+cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("snapshot: jetstream object store bucket %q: stream: %w", cfg.Bucket, err)
	}
	return &JetStreamStore{obs: obs, stream: stream, bucket: cfg.Bucket}, nil
}

// DialJetStreamStore connects to the NATS server at url and binds the
// bucket; Close closes the connection.
func DialJetStreamStore(ctx context.Context, url string, cfg JetStreamConfig) (*JetStreamStore, error) {
	nc, err := nats.Connect(url, natsconn.Options("consumerd-snapshots", 0, cfg.Security)...)
	if err != nil {
		return nil, fmt.Errorf("snapshot: connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("snapshot: jetstream at %s: %w", url, err)
	}
	s, err := NewJetStreamStore(ctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w (NATS at %s)", err, url)
	}
	s.nc = nc
	return s, nil
}

// Bucket is the bucket name.
func (s *JetStreamStore) Bucket() string { return s.bucket }

// Close closes the NATS connection if the store dialled it.
func (s *JetStreamStore) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
}

func (s *JetStreamStore) wrap(op, name string, err error) error {
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("snapshot: %s %s in bucket %s: %w", op, name, s.bucket, ErrNotFound)
	}
	return fmt.Errorf("snapshot: %s %s in bucket %s: %w", op, name, s.bucket, err)
}

// Put implements Store.
func (s *JetStreamStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := validName(name); err != nil {
		return err
	}
	_, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name}, &exactReader{r: r, left: size, name: name})
	if err != nil {
		return s.wrap("put", name, err)
	}
	return nil
}

// Get implements Store. Reading the object to its end verifies the object
// store's own digest (a mismatch is a read error).
func (s *JetStreamStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	res, err := s.obs.Get(ctx, name)
	if err != nil {
		return nil, s.wrap("get", name, err)
	}
	return res, nil
}

// GetSHA256 implements digestStore: the object's digest, recorded by the
// object store at Put, must be sum; reading to the end verifies the content
// against it (a mismatch is a read error: jetstream.ErrDigestMismatch).
func (s *JetStreamStore) GetSHA256(ctx context.Context, name, sum string) (io.ReadCloser, error) {
	want, err := hex.DecodeString(sum)
	if err != nil {
		return nil, fmt.Errorf("snapshot: get %s in bucket %s: sha256 %q: %w", name, s.bucket, sum, err)
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	res, err := s.obs.Get(ctx, name)
	if err != nil {
		return nil, s.wrap("get", name, err)
	}
	info, err := res.Info()
	if err != nil {
		res.Close()
		return nil, s.wrap("get", name, err)
	}
	got, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		res.Close()
		return nil, s.wrap("get", name, err)
	}
	if !bytes.Equal(got, want) {
		res.Close()
		return nil, fmt.Errorf("snapshot: get %s in bucket %s: the store recorded sha256 %x, the manifest says %s (corrupt)", name, s.bucket, got, sum)
	}
	return res, nil
}

// Stat implements Store.
func (s *JetStreamStore) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	if err := validName(name); err != nil {
		return ObjectInfo{}, err
	}
	info, err := s.obs.GetInfo(ctx, name)
	if err != nil {
		return ObjectInfo{}, s.wrap("stat", name, err)
	}
	return ObjectInfo{Name: info.Name, Size: int64(info.Size)}, nil
}

// List implements Store.
func (s *JetStreamStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	infos, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: list %q in bucket %s: %w", prefix, s.bucket, err)
	}
	var out []ObjectInfo
	for _, in := range infos {
		if in.Deleted || !strings.HasPrefix(in.Name, prefix) {
			continue
		}
		out = append(out, ObjectInfo{Name: in.Name, Size: int64(in.Size)})
	}
	return out, nil
}

// Delete implements Store.
func (s *JetStreamStore) Delete(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	err := s.obs.Delete(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return s.wrap("delete", name, err)
	}
	s.purgeMarker(ctx, name)
	return nil
}

// purgeMarker removes the delete marker the object store leaves for a
// deleted object: List walks every name's latest metadata, so markers of
// content-addressed SSTs collected over a shard's life would make listing
// (and so restore and retention) slower with history. Only a marker that is
// still the name's latest metadata is purged (a concurrent Put wins).
// Failures are ignored: a marker left behind is harmless.
func (s *JetStreamStore) purgeMarker(ctx context.Context, name string) {
	subj := "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	m, err := s.stream.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return
	}
	var info struct {
		Deleted bool `json:"deleted"`
	}
	if json.Unmarshal(m.Data, &info) != nil || !info.Deleted {
		return
	}
	_ = s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(m.Sequence+1))
}
