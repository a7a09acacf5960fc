package gochannel

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// Config returns the GoChannel configuration New uses (see the package doc
// for why), for callers that build their own.
func Config() gochannel.Config {
	return gochannel.Config{
		Persistent:                     true,
		BlockPublishUntilSubscriberAck: false,
		PreserveContext:                false,
	}
}

// New returns an in-process Pub/Sub with Config(). It is both the
// publisher and the subscriber: use the same instance for both. Close
// closes both and every subscription. logger may be nil (discard).
//
// It is for tests and examples: everything in it is lost when the process
// ends (see the package doc).
func New(logger *slog.Logger) *gochannel.GoChannel {
	var wl watermill.LoggerAdapter = watermill.NopLogger{}
	if logger != nil {
		wl = watermill.NewSlogLogger(logger)
	}
	return gochannel.NewGoChannel(Config(), wl)
}
