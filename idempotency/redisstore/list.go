package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/oplist"
)

var _ idempotency.Lister = (*Store)(nil)

// Bounds of one List call: each SCAN call asks for listScanCount keys (a
// hint Redis keeps to within a small factor), and a call makes at most
// listScanRounds of them before it returns its page and cursor.
const (
	listScanCount  = 200
	listScanRounds = 50
)

// List lists the store's records (idempotency.Lister): it walks the keys with SCAN (MATCH on the prefix, the
// namespace or the key, COUNT listScanCount; never KEYS, which blocks the
// server) and reads the records with the Get script, a read-only script of
// one key, the keys of one SCAN call in one pipeline. A page ends where a
// SCAN call ended once it holds the page size or more, or after
// listScanRounds calls; its cursor is SCAN's. As with SCAN itself, a key
// may be listed twice across pages, and one created during the walk may
// be missed. Records are in key-hash order, not sorted, and come without
// their outcome. The state, age and key filters are applied to each
// record read. A namespace and a key together read that one record.
// On a Redis Cluster it returns an error wrapping errors.ErrUnsupported
// (SCAN walks one node): list each primary through a store on its own
// address.
func (s *Store) List(ctx context.Context, f idempotency.ListFilter) (idempotency.ListPage, error) {
	if err := f.Validate(); err != nil {
		return idempotency.ListPage{}, err
	}
	if _, ok := s.client.(*redis.ClusterClient); ok {
		return idempotency.ListPage{}, fmt.Errorf("redisstore: list: %w on Redis Cluster (SCAN walks one node); list each primary through its own address", errors.ErrUnsupported)
	}
	now, err := s.client.Time(ctx).Result()
	if err != nil {
		return idempotency.ListPage{}, fmt.Errorf("redisstore: list: %w", err)
	}
	page := idempotency.ListPage{Now: now}
	if f.Namespace != "" && f.Key != "" {
		err := s.listAdd(ctx, &page, f, f.Namespace, f.Key)
		return page, err
	}
	var cursor uint64
	if f.After != "" {
		if cursor, err = strconv.ParseUint(f.After, 10, 64); err != nil {
			return idempotency.ListPage{}, fmt.Errorf("%w: cursor %q is not a SCAN cursor", idempotency.ErrInvalidRequest, f.After)
		}
	}
	if cursor, err = s.listScan(ctx, &page, f, cursor); err != nil {
		return idempotency.ListPage{}, err
	}
	if cursor != 0 {
		page.Next = strconv.FormatUint(cursor, 10)
	}
	return page, nil
}

// listScan walks the keyspace from cursor, adding the records f selects to
// page, until the walk ends, the page is full or listScanRounds SCAN calls
// were made. It returns the cursor to go on from (0: the walk is over).
func (s *Store) listScan(ctx context.Context, page *idempotency.ListPage, f idempotency.ListFilter, cursor uint64) (uint64, error) {
	match := globEscape(s.prefix) + "*"
	switch {
	case f.Namespace != "":
		match = globEscape(s.prefix+f.Namespace+":") + "*"
	case f.Key != "":
		match = globEscape(s.prefix) + "*:" + globEscape(f.Key)
	}
	seen := map[string]bool{}
	for range listScanRounds {
		keys, next, err := s.client.Scan(ctx, cursor, match, listScanCount).Result()
		if err != nil {
			return 0, fmt.Errorf("redisstore: list: scan: %w", err)
		}
		var batch [][2]string
		for _, k := range keys {
			ns, key, ok := strings.Cut(strings.TrimPrefix(k, s.prefix), ":")
			if seen[k] || !ok || idem.ValidateNamespace(ns) != nil {
				continue
			}
			seen[k] = true
			batch = append(batch, [2]string{ns, key})
		}
		if err := s.listAddBatch(ctx, page, f, batch); err != nil {
			return 0, err
		}
		cursor = next
		if cursor == 0 || len(page.Records) >= oplist.PageSize(f) {
			break
		}
	}
	return cursor, nil
}

// listAddBatch reads the records of a SCAN call's keys (namespace, key)
// with the Get script in one pipeline, one round trip, and adds those f
// selects to page. A key whose script call the server refused (NOSCRIPT
// after a script cache flush) is read again with Get, which reloads the
// scripts; a key that holds no record is skipped.
func (s *Store) listAddBatch(ctx context.Context, page *idempotency.ListPage, f idempotency.ListFilter, batch [][2]string) error {
	if len(batch) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(batch))
	// Each command's own error is read below.
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range batch {
			cmds[i] = p.EvalSha(ctx, scriptGet.sha, []string{s.redisKey(b[0], b[1])})
		}
		return nil
	})
	for i, b := range batch {
		v, err := cmds[i].Result()
		var rerr redis.Error
		switch {
		case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
			if err := s.listAdd(ctx, page, f, b[0], b[1]); err != nil {
				return err
			}
			continue
		case errors.As(err, &rerr):
			continue // not one of the store's records (WRONGTYPE)
		case err != nil:
			return fmt.Errorf("redisstore: list: %w", err)
		}
		r, err := recordOf(b[0], b[1], v)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
			continue // expired since the SCAN
		case err != nil:
			return err
		}
		listKeep(page, f, r)
	}
	return nil
}

// listAdd reads the record of (ns, key) and adds it to page when f selects
// it. A key that holds no record (gone meanwhile, or a key of something
// else under the prefix) is skipped.
func (s *Store) listAdd(ctx context.Context, page *idempotency.ListPage, f idempotency.ListFilter, ns, key string) error {
	r, err := s.Get(ctx, ns, key)
	var rerr redis.Error
	switch {
	case errors.Is(err, idempotency.ErrNotFound), errors.As(err, &rerr) && !errors.Is(err, redis.Nil):
		return nil // no record, or not one of the store's (WRONGTYPE)
	case err != nil:
		return err
	}
	listKeep(page, f, r)
	return nil
}

// listKeep adds r to page, without its outcome, when f selects it.
func listKeep(page *idempotency.ListPage, f idempotency.ListFilter, r idempotency.Record) {
	updated := oplist.LastChange(r.History)
	if oplist.Match(f, r, updated, page.Now) {
		r.Outcome = nil
		page.Records = append(page.Records, idempotency.ListedRecord{Record: r, Updated: updated})
	}
}

// globEscape escapes the characters SCAN's MATCH gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
