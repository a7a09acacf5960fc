// Package archivetest is the conformance suite of archive.Archive: every
// implementation runs it against its real backend.
//
//	func TestConformance(t *testing.T) {
//		archivetest.Run(t, func(t *testing.T) archive.Archive {
//			a, err := memarchive.New()
//			require.NoError(t, err)
//			return a
//		})
//	}
//
// newArchive is called once per subtest and must return an empty archive
// of its own (its own key prefix or table names), cleaned up when t ends.
// The subtests run in parallel.
//
// The suite checks that Publish stores payload and metadata byte for byte
// (non-UTF-8 bytes included), reads the envelope fields, is idempotent by
// UUID (a second copy counts in Copies and keeps Seq) also under concurrent
// publishers, and archives a message that is not an envelope; that List
// selects exactly what archive.Filter.Match selects for every Filter field and
// pages by Seq, and with Page.OmitPayload lists the same entries without
// their payloads; that a reader paging with a cursor while four writers
// publish sees every entry once (Seq order is the order entries become
// visible); that Stats counts the same selection; the lifecycle of an
// entry (Mark: open, replayed by a run, resolved, discarded as a tombstone
// with its reason, reopened; Filter.States, Filter.ReplayedBy and
// Stats.ByState; the failed-again link a re-failure's dead letter sets);
// and Delete, SaveReplay, LoadReplay and ListReplays.
//
// The test of an optional interface of package archive runs when the
// archive implements it and is skipped (saying why) when it does not:
// archive.ArrivalCounter's counts per bucket, every state counted, each
// bucket closed at its start and open at its end, are those of counting a
// listing, and a bucket of no width or no bucket is refused.
package archivetest
