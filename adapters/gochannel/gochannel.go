package gochannel

import (
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/internal/options"
)

// config is the GoChannel configuration New uses (see the package doc for
// why).
func config() gochannel.Config {
	return gochannel.Config{
		Persistent:                     true,
		BlockPublishUntilSubscriberAck: false,
		PreserveContext:                false,
	}
}

// New returns an in-process Pub/Sub with the defaults of the package doc.
// It is both the publisher and the subscriber: use the same instance for
// both. Close closes both and every subscription. It takes
// delivery.WithLogger (default: no logs); any other option is an error
// wrapping delivery.ErrInvalidOption.
//
// It is for tests and examples: everything in it is lost when the process
// ends (see the package doc).
func New(opts ...delivery.Option) (*gochannel.GoChannel, error) {
	s, err := options.Load(delivery.ErrInvalidOption, "gochannel.New", opts, options.Logger)
	if err != nil {
		return nil, err
	}
	var wl watermill.LoggerAdapter = watermill.NopLogger{}
	if l := options.Get[*slog.Logger](s, options.Logger, nil); l != nil {
		wl = watermill.NewSlogLogger(l)
	}
	return gochannel.NewGoChannel(config(), wl), nil
}
