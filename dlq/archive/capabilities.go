package archive

import (
	"context"
	"time"
)

// ArrivalCounter is an Archive that counts its entries by dead-lettering
// time in one query: the console's arrivals chart uses it when the
// archive has it (dlq/sqlarchive does), and lists the entries otherwise.
// It is an optional capability, as a database/sql driver's
// driver.QueryerContext is: checked with a type assertion, its
// conformance tests run by dlq/archivetest when the archive under test
// implements it.
//
// Arrivals returns n counts: counts[i] is the number of entries, in every
// state, whose DeadLetteredAt is in [from+i*width, from+(i+1)*width),
// each bucket closed at its start and open at its end. A width or n that
// is not positive is an error wrapping dlq.ErrInvalidOption.
type ArrivalCounter interface {
	Arrivals(ctx context.Context, from time.Time, width time.Duration, n int) (counts []int, err error)
}
