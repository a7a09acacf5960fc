package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/surely-dev/surely/dlq/archive"
)

// shortIDLen is how many characters of an entry's ID ls prints.
const shortIDLen = 8

// shortID is the start of id that ls prints.
func shortID(id string) string {
	if len(id) <= shortIDLen {
		return id
	}
	return id[:shortIDLen]
}

// errAmbiguous: a short ID names several entries.
var errAmbiguous = errors.New("ambiguous")

// resolveRefs turns what an operator typed (a full ID, the SEQ number or
// the short ID that ls prints) into entry IDs. A reference that names no
// entry is an error wrapping archive.ErrNotFound; a short ID that names
// several is a usage error listing them.
func resolveRefs(ctx context.Context, ar archive.Archive, refs []string) ([]string, error) {
	ids := make([]string, 0, len(refs))
	var short []string
	for _, ref := range refs {
		ref = strings.TrimSpace(ref)
		if ref == "" {
			return nil, usageErr("an empty dead-letter ID")
		}
		if seq, err := strconv.ParseInt(ref, 10, 64); err == nil && seq > 0 && len(ref) < shortIDLen {
			id, err := idOfSeq(ctx, ar, seq)
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
			continue
		}
		if _, err := ar.Get(ctx, ref); err == nil {
			ids = append(ids, ref)
			continue
		} else if !errors.Is(err, archive.ErrNotFound) {
			return nil, err
		}
		short = append(short, ref)
	}
	if len(short) == 0 {
		return ids, nil
	}
	found, err := idsByPrefix(ctx, ar, short)
	if err != nil {
		return nil, err
	}
	return append(ids, found...), nil
}

// idOfSeq returns the ID of the entry with this Seq.
func idOfSeq(ctx context.Context, ar archive.Archive, seq int64) (string, error) {
	page, err := ar.List(ctx, archive.Filter{}, archive.Page{After: seq - 1, Limit: 1, OmitPayload: true})
	if err != nil {
		return "", fmt.Errorf("find seq %d: %w", seq, err)
	}
	if len(page) == 0 || page[0].Seq != seq {
		return "", fmt.Errorf("dead letter with seq %d: %w", seq, archive.ErrNotFound)
	}
	return page[0].ID, nil
}

// idsByPrefix finds the entries whose ID starts with each of prefixes, in
// one pass over the archive (listed without payloads).
func idsByPrefix(ctx context.Context, ar archive.Archive, prefixes []string) ([]string, error) {
	matches := make([][]string, len(prefixes))
	var after int64
	for {
		page, err := ar.List(ctx, archive.Filter{}, archive.Page{After: after, Limit: 1000, OmitPayload: true})
		if err != nil {
			return nil, fmt.Errorf("find %s: %w", strings.Join(prefixes, ", "), err)
		}
		for _, e := range page {
			for i, p := range prefixes {
				if strings.HasPrefix(e.ID, p) {
					matches[i] = append(matches[i], e.ID)
				}
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	out := make([]string, 0, len(prefixes))
	for i, p := range prefixes {
		switch len(matches[i]) {
		case 0:
			return nil, fmt.Errorf("dead letter %s: %w", p, archive.ErrNotFound)
		case 1:
			out = append(out, matches[i][0])
		default:
			return nil, usageErr("%q is %w: it starts %s; give more of the ID", p, errAmbiguous, strings.Join(matches[i], ", "))
		}
	}
	return out, nil
}
