package topic

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registry owns the topic records in etcd (Key(Prefix, name), see record.go):
// every read and write of a record goes through it, so the rules of a record
// (strict decoding, a partition count that never changes, errors that name
// the key or the topics there are) live in one place. The daemon's commands
// and the shards' output lookup (shard.EtcdTopics) use it.
type Registry struct {
	Client *clientv3.Client
	// Prefix is the cluster's root in etcd (--etcd.prefix).
	Prefix string
}

var (
	// ErrUnknownTopic is wrapped by Get's error for a topic with no record.
	ErrUnknownTopic = errors.New("topic does not exist")
	// ErrPartitionsChange is wrapped by Create's error for an existing topic
	// with another partition count.
	ErrPartitionsChange = errors.New("a topic's partition count never changes (it would re-route every key)")
	// ErrDeleteGuard is wrapped by Delete's error when one of its guards
	// failed: nothing was deleted.
	ErrDeleteGuard = errors.New("etcd changed since it was read (a guard of the delete failed); nothing was deleted")
)

// Create writes d's record unless the topic exists, in one guarded etcd txn,
// so of concurrent creates of one topic exactly one writes. An existing topic
// with the same partition count is left as it is (created false, no error);
// one with another count is an error naming both that wraps
// ErrPartitionsChange. d must be valid (Description.Validate).
func (r *Registry) Create(ctx context.Context, d Description) (created bool, err error) {
	if err := d.Validate(); err != nil {
		return false, err
	}
	key := Key(r.Prefix, d.Name)
	resp, err := r.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(d.Encode()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("writing topic %s to etcd: %w", d.Name, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, fmt.Errorf("topic %s: created and deleted concurrently; try again", d.Name)
	}
	have, err := DecodeRecord(r.Prefix, key, kvs[0].Value)
	if err != nil {
		return false, err
	}
	if have.Partitions != d.Partitions {
		return false, fmt.Errorf("topic %s exists with %d partitions; refusing %d: %w", d.Name, have.Partitions, d.Partitions, ErrPartitionsChange)
	}
	return false, nil
}

// Get reads topic name's record. Its error is one of three: the topic has no
// record (wrapping ErrUnknownTopic, naming the topics there are and how to
// create one), the record does not decode (wrapping ErrBadRecord, naming the
// key), or etcd failed (anything else). shard.EtcdTopics relies on that
// partition: only the last is transient.
func (r *Registry) Get(ctx context.Context, name string) (Description, error) {
	key := Key(r.Prefix, name)
	resp, err := r.Client.Get(ctx, key)
	if err != nil {
		return Description{}, fmt.Errorf("reading topic %s from etcd: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		known := "-"
		if set, err := r.List(ctx); err != nil {
			known = "not listed: " + err.Error()
		} else if len(set.ByName) > 0 {
			known = strings.Join(set.Names(), ", ")
		}
		return Description{}, &unknownTopicError{name: name, known: known}
	}
	return DecodeRecord(r.Prefix, key, resp.Kvs[0].Value)
}

// unknownTopicError is Get's error for a topic with no record: it is
// ErrUnknownTopic (errors.Is) with a message that says what to do.
type unknownTopicError struct{ name, known string }

func (e *unknownTopicError) Error() string {
	return fmt.Sprintf("topic %q does not exist (topics: %s); create it with 'consumerd topics create --name %s --partitions N'", e.name, e.known, e.name)
}

func (e *unknownTopicError) Is(target error) bool { return target == ErrUnknownTopic }

// Set is every topic record under a root, as List read it.
type Set struct {
	// ByName holds the records that decode.
	ByName map[string]Description
	// Bad holds an error (wrapping ErrBadRecord, naming the key) per record
	// that does not decode: for the caller to report, never to drop silently.
	Bad []error
}

// Names are the topics of ByName, sorted.
func (s Set) Names() []string {
	out := make([]string, 0, len(s.ByName))
	for n := range s.ByName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// List reads every topic record, decoding each strictly (DecodeRecord). A
// record that does not decode is in Set.Bad, not an error of List: the
// others still count.
func (r *Registry) List(ctx context.Context) (Set, error) {
	prefix := KeyPrefix(r.Prefix)
	resp, err := r.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return Set{}, fmt.Errorf("reading topics from etcd (%s): %w", prefix, err)
	}
	set := Set{ByName: make(map[string]Description, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		d, err := DecodeRecord(r.Prefix, string(kv.Key), kv.Value)
		if err != nil {
			set.Bad = append(set.Bad, err)
			continue
		}
		set.ByName[d.Name] = d
	}
	return set, nil
}

// Delete deletes topic name's record, in one etcd txn guarded by ifs: when
// one of them fails nothing is deleted and the error wraps ErrDeleteGuard.
// The daemon guards a delete with what its refusal was decided on (no shard
// reads the topic: the shard specs unchanged since it read them). A topic
// with no record is not an error. Delete leaves the topic's data (its WAL
// channels) to the caller.
func (r *Registry) Delete(ctx context.Context, name string, ifs ...clientv3.Cmp) error {
	resp, err := r.Client.Txn(ctx).If(ifs...).Then(clientv3.OpDelete(Key(r.Prefix, name))).Commit()
	if err != nil {
		return fmt.Errorf("deleting topic %s's record from etcd: %w", name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("deleting topic %s's record: %w", name, ErrDeleteGuard)
	}
	return nil
}
