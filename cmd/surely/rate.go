package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseRate reads a replay rate: "500/s", "500", "30/m", "1800/h". It
// returns messages per second; 0 means unlimited ("0" or "unlimited").
func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "unlimited" || s == "0" {
		return 0, nil
	}
	num, unit, hasUnit := strings.Cut(s, "/")
	per := 1.0
	if hasUnit {
		switch unit {
		case "s", "sec", "second":
		case "m", "min", "minute":
			per = 60
		case "h", "hour":
			per = 3600
		default:
			return 0, fmt.Errorf("rate %q: unit must be /s, /m or /h", s)
		}
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n <= 0 || n > 1e6 {
		return 0, fmt.Errorf("rate %q: want a positive number of messages, e.g. 500/s, 30/m or 500", s)
	}
	return n / per, nil
}
