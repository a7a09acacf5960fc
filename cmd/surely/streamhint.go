package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsHintPublisher is the NATS publisher of a replay: a publish that
// JetStream does not answer (no stream takes the subject) fails with a
// *missingStreamError naming the subject, so the command can say what to
// do.
type natsHintPublisher struct{ message.Publisher }

func (p natsHintPublisher) Publish(subject string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(subject, msgs...)
	if err != nil && noStreamResponse(err) {
		return &missingStreamError{subject: subject, err: err}
	}
	return err
}

// noStreamResponse reports whether err is NATS's "no response from
// stream": no JetStream stream took the published subject (the library
// turns a request nobody answers into it). It is matched by value and, as
// the Watermill publisher may wrap it without Unwrap, by its text.
func noStreamResponse(err error) bool {
	return errors.Is(err, natsgo.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		strings.Contains(err.Error(), natsgo.ErrNoStreamResponse.Error())
}

// missingStreamError is a publish to subject that no JetStream stream
// answered. Its text is err's.
type missingStreamError struct {
	subject string
	err     error
}

func (e *missingStreamError) Error() string { return e.err.Error() }
func (e *missingStreamError) Unwrap() error { return e.err }

// withStreamHint adds to an error that a publish to a subject no stream
// takes caused a line saying so and how to create the stream. Other
// errors are returned as they are.
func withStreamHint(err error) error {
	var ms *missingStreamError
	if !errors.As(err, &ms) {
		return err
	}
	return fmt.Errorf("%w\nhint: no JetStream stream seems to take subject %q (the stream is probably missing): create it, e.g.\n"+
		"  nats stream add %s --subjects %s\nthen resume the run", err, ms.subject, streamName(ms.subject), ms.subject)
}

// streamName suggests a stream name for subject: upper case, with the
// characters a stream name may not hold replaced by "_".
func streamName(subject string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '/', '\\':
			return '_'
		}
		return r
	}, strings.ToUpper(subject))
}
