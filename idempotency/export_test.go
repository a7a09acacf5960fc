package idempotency

import "github.com/ThreeDotsLabs/watermill/message"

// Fingerprint is the fingerprint Extract gives msg, whatever its key.
func (e *Extractor) Fingerprint(msg *message.Message) string { return e.fingerprint(msg) }
