package archivekit

import (
	"context"
	"sync"
	"time"

	"github.com/surely-dev/surely/dlq/archive"
)

// Arrivals counts the entries dead-lettered in n consecutive buckets of
// width from from: counts[i] is the number in [from+i*width,
// from+(i+1)*width).
type Arrivals func(ctx context.Context, from time.Time, width time.Duration, n int) (counts []int, err error)

// arrivalsFinders are the registered ways to get an archive's Arrivals.
var (
	arrivalsMu      sync.RWMutex
	arrivalsFinders []func(archive.Archive) (Arrivals, bool)
)

// RegisterArrivals registers find, which returns the Arrivals of the
// archives of one implementation (ok false for any other), from that
// package's init: an archive that can count arrivals by time in one
// query (dlq/sqlarchive) offers it to the console without an exported
// method. Archive.List is the fallback of the others.
func RegisterArrivals(find func(archive.Archive) (Arrivals, bool)) {
	arrivalsMu.Lock()
	defer arrivalsMu.Unlock()
	arrivalsFinders = append(arrivalsFinders, find)
}

// ArrivalsOf returns ar's Arrivals, if its implementation registered one.
func ArrivalsOf(ar archive.Archive) (Arrivals, bool) {
	arrivalsMu.RLock()
	defer arrivalsMu.RUnlock()
	for _, find := range arrivalsFinders {
		if f, ok := find(ar); ok {
			return f, true
		}
	}
	return nil, false
}
