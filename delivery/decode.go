package delivery

import "github.com/ThreeDotsLabs/watermill/message"

// Metadata keys of a message an adapter could not decode. Every adapter
// marks such a message the same way, so that surely's chain dead-letters it
// (reason "decode") before it looks for a key, and the handler never runs.
const (
	// KeyDecodeError holds the decoding error's text. Its presence marks
	// the message undecodable: its payload is the raw body the broker
	// delivered, and its metadata holds only this key and, where the
	// broker has headers and there were any, KeyDecodeHeaders (and keys of
	// the adapter's own, prefixed "surely_decode_", that its doc lists).
	KeyDecodeError = "surely_decode_error"
	// KeyDecodeHeaders holds the broker's raw headers of a message an
	// adapter could not decode, as JSON (where the broker has headers and
	// there were any); the dead letter keeps it.
	KeyDecodeHeaders = "surely_decode_headers"
)

// DecodeError reports whether an adapter marked msg undecodable, and the
// decoding error's text.
func DecodeError(msg *message.Message) (string, bool) {
	v, ok := msg.Metadata[KeyDecodeError]
	return v, ok
}
