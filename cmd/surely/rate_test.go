package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{
		"500/s": 500, "500": 500, "30/m": 0.5, "1800/h": 0.5, "0": 0, "unlimited": 0, " 2.5/S ": 2.5,
	} {
		got, err := parseRate(in)
		require.NoError(t, err, in)
		assert.InDelta(t, want, got, 1e-9, in)
	}
	for _, in := range []string{"", "-1", "fast", "5/d", "/s", "1e9"} {
		_, err := parseRate(in)
		assert.Error(t, err, in)
	}
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"90m": "1h30m0s", "7d": "168h0m0s", "1d12h": "36h0m0s", "0s": "0s"} {
		got, err := parseAge(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got.String(), in)
	}
	for _, in := range []string{"", "-1h", "d", "1.5d", "xd", "1d-2h", "yesterday"} {
		_, err := parseAge(in)
		assert.Error(t, err, in)
	}
}
