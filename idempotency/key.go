package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/options"
)

// DefaultMetadataKey is the metadata key the default Extractor reads the
// operation key from, before falling back to the message UUID.
const DefaultMetadataKey = "idempotency_key"

var (
	// ErrNoKey means no source produced an operation key for the message.
	ErrNoKey = idem.ErrNoKey
	// ErrInvalidKey means a key was found but is unusable (longer than 512
	// bytes, control characters, not UTF-8). It is rejected, never stored.
	ErrInvalidKey = idem.ErrInvalidKey
)

// A KeySource reads an operation key from a message. It returns "" with a
// nil error when the message does not carry its kind of key, so that the next
// source is tried; an error stops the extraction (the message is malformed).
type KeySource func(msg *message.Message) (string, error)

// FromMetadata reads the key from a metadata entry.
func FromMetadata(name string) KeySource {
	return func(msg *message.Message) (string, error) {
		return msg.Metadata.Get(name), nil
	}
}

// FromCloudEvents builds the key from the CloudEvents binary-mode attributes
// ce_source and ce_id (their pair is unique by the CloudEvents spec). It
// yields nothing unless both are present.
func FromCloudEvents() KeySource {
	return func(msg *message.Message) (string, error) {
		src, id := msg.Metadata.Get("ce_source"), msg.Metadata.Get("ce_id")
		if src == "" || id == "" {
			return "", nil
		}
		return src + "/" + id, nil
	}
}

// FromUUID uses the Watermill message UUID. It is only as stable as the
// producer makes it: a producer that retries a publish with a new UUID
// defeats deduplication.
func FromUUID() KeySource {
	return func(msg *message.Message) (string, error) {
		return msg.UUID, nil
	}
}

// FromJSONField reads a top-level field of a JSON object payload (a string,
// or a number used by its literal text). A payload that is not a JSON object
// is an error: the message is malformed.
func FromJSONField(field string) KeySource {
	return func(msg *message.Message) (string, error) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(msg.Payload, &obj); err != nil {
			return "", fmt.Errorf("%w: payload is not a JSON object: %w", ErrInvalidKey, err)
		}
		raw, ok := obj[field]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s, nil
		}
		var n json.Number
		if err := json.Unmarshal(raw, &n); err == nil {
			return n.String(), nil
		}
		return "", fmt.Errorf("%w: field %q is neither a string nor a number", ErrInvalidKey, field)
	}
}

// Extractor derives the operation identity of a message, its key and
// fingerprint: the first source that yields a key wins, and the
// fingerprint is the SHA-256 of the payload plus the selected metadata
// entries.
type Extractor struct {
	sources []KeySource
	fpMeta  []string
}

// NewExtractor builds an Extractor. It takes WithSources and
// WithFingerprintMetadata; any other Option is an error wrapping
// ErrInvalidOption.
func NewExtractor(opts ...Option) (*Extractor, error) {
	set, err := options.Apply(ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(ErrInvalidOption, "idempotency.NewExtractor", optSources, optFingerprint); err != nil {
		return nil, err
	}
	return &Extractor{
		sources: options.Get(set, optSources, []KeySource{FromMetadata(DefaultMetadataKey), FromUUID()}),
		fpMeta:  options.Get[[]string](set, optFingerprint, nil),
	}, nil
}

// Extract returns the operation identity of msg: an Operation with its Key
// and Fingerprint set (the dedup step fills in the rest when it claims).
// Errors wrap ErrNoKey or ErrInvalidKey.
func (e *Extractor) Extract(msg *message.Message) (Operation, error) {
	var key string
	for _, src := range e.sources {
		k, err := src(msg)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				err = fmt.Errorf("%w: %w", ErrInvalidKey, err)
			}
			return Operation{}, err
		}
		if k != "" {
			key = k
			break
		}
	}
	if err := idem.ValidateKey(key); err != nil {
		return Operation{}, err
	}
	return Operation{Key: key, Fingerprint: e.fingerprint(msg)}, nil
}

// fingerprint is the hex SHA-256 of the payload and the selected metadata
// (each entry length-prefixed, so no two inputs collide by concatenation).
func (e *Extractor) fingerprint(msg *message.Message) string {
	if len(e.fpMeta) == 0 {
		sum := sha256.Sum256(msg.Payload)
		var buf [2 * sha256.Size]byte
		hex.Encode(buf[:], sum[:])
		return string(buf[:])
	}
	h := sha256.New()
	h.Write(msg.Payload)
	for _, k := range e.fpMeta {
		v := msg.Metadata.Get(k)
		var n [24]byte
		b := fmt.Appendf(n[:0], "\x00%d:%s=%d:", len(k), k, len(v))
		h.Write(b)
		h.Write([]byte(v))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}
