package nats

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
)

// ErrNoStream is returned by Subscribe when no stream captures the topic.
var ErrNoStream = errors.New("nats: no stream captures the topic")

const maxConsumerLen = 64

func validName(s string) bool {
	if s == "" || len(s) > maxConsumerLen {
		return false
	}
	for _, r := range s {
		if !nameRune(r) {
			return false
		}
	}
	return true
}

func nameRune(r rune) bool {
	return r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

// ConsumerName returns the name of the durable JetStream consumer that a
// Subscriber of consumer (NewSubscriber's argument) creates for topic:
// "<consumer>-<topic>", with every character of topic other than letters,
// digits, '-' and '_' replaced by '_' and then, when anything was replaced
// or the topic is long, an FNV-32a hash of the topic appended so that two
// topics never share a consumer.
func ConsumerName(consumer, topic string) string {
	clean := strings.Map(func(r rune) rune {
		if nameRune(r) {
			return r
		}
		return '_'
	}, topic)
	if clean != topic || len(clean) > 96 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(topic))
		clean = fmt.Sprintf("%s-%08x", clean[:min(len(clean), 96)], h.Sum32())
	}
	return consumer + "-" + clean
}
