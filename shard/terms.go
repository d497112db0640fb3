package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/consumerd/consumerd/allocator"
)

// handoffTerm is the term a new primary of assignment a fences with: the
// slot-0 key's CreateRevision plus the cluster's term base. When that is
// below logTerm, the term of the last record of the recovery log, etcd's
// revisions restarted (etcd was rebuilt from empty) and every handoff would
// be fenced forever: the base is raised so the term passes logTerm, with a
// WARN (allocator.Terms). An etcd failure is transient; a term base that
// does not decode fails the replica, naming the key.
func (r *replica) handoffTerm(ctx context.Context, a allocator.Assignment, logTerm uint64) (uint64, error) {
	t := r.svc.cfg.Terms
	if t == nil {
		return uint64(a.CreateRevision), nil
	}
	fail := func(err error) error {
		if errors.Is(err, allocator.ErrBadTermBase) {
			return err
		}
		return markTransient(err)
	}
	base, err := t.Base(ctx)
	if err != nil {
		return 0, fail(fmt.Errorf("computing the handoff term: %w", err))
	}
	term := allocator.Term(base, a)
	if term >= logTerm {
		return term, nil
	}
	if base, err = t.Raise(ctx, int64(logTerm)-a.CreateRevision+1); err != nil {
		return 0, fail(fmt.Errorf("raising the term base past the recovery log's term %d: %w", logTerm, err))
	}
	r.logger.Warn("the recovery log has seen higher terms than etcd's revisions (was etcd rebuilt from empty?): raised the cluster's term base",
		"log_term", logTerm, "create_revision", a.CreateRevision, "term_base", base, "term", allocator.Term(base, a))
	return allocator.Term(base, a), nil
}
