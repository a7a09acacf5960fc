package idempotency_test

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

// FuzzExtract feeds untrusted messages to an Extractor that tries every
// built-in source: a metadata entry, the CloudEvents attributes, a JSON
// payload field, then the UUID. Whatever the input, Extract must not panic,
// must not touch the message, must fail only with ErrNoKey or ErrInvalidKey,
// and a key it returns must pass ValidateKey and come with a stable
// fingerprint.
func FuzzExtract(f *testing.F) {
	f.Add([]byte(`{"order_id":"o-1"}`), "", "", "", "uuid-1", "amount", "10")
	f.Add([]byte(`{"order_id":42}`), "", "", "", "", "", "")
	f.Add([]byte(`{"order_id":1e400}`), "", "", "", "", "", "")
	f.Add([]byte(`{"order_id":null}`), "", "", "", "uuid-1", "", "")
	f.Add([]byte(`{"order_id":{"nested":1}}`), "", "", "", "", "", "")
	f.Add([]byte(`{"order_id":"a\u0000b"}`), "", "", "", "", "", "")
	f.Add([]byte(`{"order_id":"\ud800"}`), "", "", "", "", "", "")
	f.Add([]byte(`[1,2,3]`), "", "", "", "uuid-1", "", "")
	f.Add([]byte("\xff\xfe not json"), "", "", "", "uuid-1", "", "")
	f.Add([]byte(`{}`), "", "/orders", "evt-1", "", "", "")
	f.Add([]byte(`{}`), "", "/orders\x00", "evt-1", "", "", "")
	f.Add([]byte(`{}`), "k\x7f", "", "", "", "", "")
	f.Add([]byte(`{}`), "\xc3\x28", "", "", "", "", "")
	f.Add([]byte(`{}`), "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, payload []byte, mdKey, ceSource, ceID, uuid, fpName, fpValue string) {
		ex, err := idempotency.NewExtractor(
			idempotency.WithSources(
				idempotency.FromMetadata(idempotency.DefaultMetadataKey),
				idempotency.FromCloudEvents(),
				idempotency.FromJSONField("order_id"),
				idempotency.FromUUID(),
			),
			idempotency.WithFingerprintMetadata(fpName, "amount"),
		)
		if err != nil {
			t.Fatal(err)
		}
		msg := message.NewMessage(uuid, bytes.Clone(payload))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, mdKey)
		msg.Metadata.Set("ce_source", ceSource)
		msg.Metadata.Set("ce_id", ceID)
		if fpName != "" {
			msg.Metadata.Set(fpName, fpValue)
		}
		before := maps.Clone(msg.Metadata)

		id, err := ex.Extract(msg)
		if !bytes.Equal(msg.Payload, payload) || !maps.Equal(msg.Metadata, before) {
			t.Fatal("Extract changed the message")
		}
		if err != nil {
			if !errors.Is(err, idempotency.ErrNoKey) && !errors.Is(err, idempotency.ErrInvalidKey) {
				t.Fatalf("error wraps neither ErrNoKey nor ErrInvalidKey: %v", err)
			}
			if id != (idempotency.Operation{}) {
				t.Fatalf("an error with an identity: %+v", id)
			}
			return
		}
		if verr := idem.ValidateKey(id.Key); verr != nil {
			t.Fatalf("Extract returned key %q that ValidateKey refuses: %v", id.Key, verr)
		}
		if len(id.Fingerprint) != 64 {
			t.Fatalf("fingerprint %q is not hex SHA-256", id.Fingerprint)
		}
		again, err := ex.Extract(msg)
		if err != nil || again != id {
			t.Fatalf("not deterministic: %+v then %+v, %v", id, again, err)
		}
		// The first source that yields a key wins.
		switch {
		case mdKey != "":
			if id.Key != mdKey {
				t.Fatalf("metadata key %q present, got %q", mdKey, id.Key)
			}
		case ceSource != "" && ceID != "":
			if id.Key != ceSource+"/"+ceID {
				t.Fatalf("CloudEvents key expected, got %q", id.Key)
			}
		}
		// Another fingerprinted metadata value is another fingerprint.
		other := message.NewMessage(uuid, payload)
		maps.Copy(other.Metadata, msg.Metadata)
		other.Metadata.Set("amount", msg.Metadata.Get("amount")+"0")
		if ex.Fingerprint(other) == id.Fingerprint {
			t.Fatal("fingerprint ignores a fingerprinted metadata entry")
		}
	})
}
