// Package idem holds what package idempotency shares with the other
// packages of surely without exporting it: the checks of keys, owners and
// namespaces (against the bounds in internal/defaults), the reserved
// keyless namespace, the context key of the running attempt and the
// identity of this process as a claim's owner. It imports no public
// package of surely, so that idempotency can import it; idempotency's
// errors of the same names are these.
package idem

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/surely-dev/surely/internal/defaults"
)

// KeylessNamespace is the store namespace of the attempt records of
// messages without a key (delivery.ProcessWithoutDedup). It is reserved:
// middleware.Dedup and handler.WithStore refuse it as a handler's
// namespace.
const KeylessNamespace = "surely.keyless"

// The errors of package idempotency that the checks here return.
var (
	ErrNoKey          = errors.New("idempotency: message has no operation key")
	ErrInvalidKey     = errors.New("idempotency: invalid operation key")
	ErrInvalidRequest = errors.New("idempotency: invalid request")
)

// OperationKey is the context key of the running attempt's state, the
// *opctx.Op the dedup step keeps (read by idempotency.OperationFrom).
type OperationKey struct{}

// ValidateKey checks an operation key: non-empty (else ErrNoKey), at most
// defaults.MaxKeyLen bytes, valid UTF-8 and free of control characters (else an
// error wrapping ErrInvalidKey).
func ValidateKey(key string) error {
	if key == "" {
		return ErrNoKey
	}
	if err := checkText(key, defaults.MaxKeyLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// ValidateOwner checks a claim's owner: at most defaults.MaxOwnerLen bytes, valid
// UTF-8 and free of control characters (else an error wrapping
// ErrInvalidRequest). The empty owner (none given) is valid.
func ValidateOwner(owner string) error {
	if err := checkText(owner, defaults.MaxOwnerLen); err != nil {
		return fmt.Errorf("%w: owner: %w", ErrInvalidRequest, err)
	}
	return nil
}

// checkText checks that s has at most limit bytes, is valid UTF-8 and
// has no control character.
func checkText(s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%d bytes, the limit is %d", len(s), limit)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
	}
	return nil
}

// ProcessOwner is the owner the dedup step gives its claims
// (ClaimRequest.Owner): this process as "host/pid", read once. A host name
// that cannot be read is "unknown"; one that is not a valid owner is made
// one (control characters and invalid UTF-8 replaced by '?', cut to fit).
var ProcessOwner = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = ""
	}
	return Owner(host, os.Getpid())
})

// Owner is the owner "host/pid" of process pid on host, valid
// (ValidateOwner) whatever host holds: "unknown" when it is empty, its
// control characters and invalid UTF-8 replaced by '?', cut to fit
// defaults.MaxOwnerLen.
func Owner(host string, pid int) string {
	if host == "" {
		host = "unknown"
	}
	host = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(host, "?"))
	suffix := "/" + strconv.Itoa(pid)
	return Truncate(host, defaults.MaxOwnerLen-len(suffix)) + suffix
}

// ValidateNamespace checks that ns can be used as a namespace: it must
// match [A-Za-z0-9._-]{1,128} (else an error wrapping ErrInvalidRequest).
func ValidateNamespace(ns string) error {
	ok := len(ns) >= 1 && len(ns) <= 128
	for i := 0; ok && i < len(ns); i++ {
		c := ns[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: namespace %q must match [A-Za-z0-9._-]{1,128}", ErrInvalidRequest, ns)
	}
	return nil
}

// Truncate shortens s to at most n bytes without splitting a UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
