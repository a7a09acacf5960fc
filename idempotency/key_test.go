package idempotency_test

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
)

func msg(payload string, md ...string) *message.Message {
	m := message.NewMessage("uuid-1", []byte(payload))
	for i := 0; i+1 < len(md); i += 2 {
		m.Metadata.Set(md[i], md[i+1])
	}
	return m
}

func TestExtractorSources(t *testing.T) {
	t.Parallel()
	def, err := idempotency.NewExtractor()
	require.NoError(t, err)
	ce, err := idempotency.NewExtractor(idempotency.WithSources(idempotency.FromCloudEvents(), idempotency.FromJSONField("order_id")))
	require.NoError(t, err)
	cases := []struct {
		name string
		ex   *idempotency.Extractor
		msg  *message.Message
		key  string
		err  error
	}{
		{"metadata first", def, msg("x", idempotency.DefaultMetadataKey, "k1"), "k1", nil},
		{"uuid fallback", def, msg("x"), "uuid-1", nil},
		{"cloudevents", ce, msg("x", "ce_source", "/billing", "ce_id", "42"), "/billing/42", nil},
		{"cloudevents incomplete falls through to json", ce, msg(`{"order_id":"o-7"}`, "ce_id", "42"), "o-7", nil},
		{"json number", ce, msg(`{"order_id":12345678901234567890}`), "12345678901234567890", nil},
		{"json missing field", ce, msg(`{"other":1}`), "", idempotency.ErrNoKey},
		{"json not an object", ce, msg(`[1,2]`), "", idempotency.ErrInvalidKey},
		{"json field of wrong type", ce, msg(`{"order_id":{"a":1}}`), "", idempotency.ErrInvalidKey},
		{"too long", def, msg("x", idempotency.DefaultMetadataKey, strings.Repeat("k", defaults.MaxKeyLen+1)), "", idempotency.ErrInvalidKey},
		{"control character", def, msg("x", idempotency.DefaultMetadataKey, "a\nb"), "", idempotency.ErrInvalidKey},
		{"invalid utf-8", def, msg("x", idempotency.DefaultMetadataKey, "a\xffb"), "", idempotency.ErrInvalidKey},
		{"max length is fine", def, msg("x", idempotency.DefaultMetadataKey, strings.Repeat("k", defaults.MaxKeyLen)), strings.Repeat("k", defaults.MaxKeyLen), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := tc.ex.Extract(tc.msg)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.key, id.Key)
			require.Len(t, id.Fingerprint, 64)
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	plain, err := idempotency.NewExtractor()
	require.NoError(t, err)
	withAmount, err := idempotency.NewExtractor(idempotency.WithFingerprintMetadata("amount", "currency"))
	require.NoError(t, err)
	a, b := msg("pay", "amount", "10"), msg("pay", "amount", "11")
	require.Equal(t, plain.Fingerprint(a), plain.Fingerprint(b), "metadata is ignored unless selected")
	require.NotEqual(t, withAmount.Fingerprint(a), withAmount.Fingerprint(b))
	require.NotEqual(t, plain.Fingerprint(msg("pay")), plain.Fingerprint(msg("pay!")))
	// Length prefixes: moving bytes between entries changes the fingerprint.
	require.NotEqual(t, withAmount.Fingerprint(msg("p", "amount", "1", "currency", "0")),
		withAmount.Fingerprint(msg("p", "amount", "10", "currency", "")))
}

func TestExtractorOptions(t *testing.T) {
	t.Parallel()
	_, err := idempotency.NewExtractor(idempotency.WithSources())
	require.ErrorIs(t, err, idempotency.ErrInvalidOption)
	_, err = idempotency.NewExtractor(idempotency.WithSources(nil))
	require.ErrorIs(t, err, idempotency.ErrInvalidOption)
}
