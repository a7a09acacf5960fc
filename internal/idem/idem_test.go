package idem

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/surely-dev/surely/internal/defaults"
)

// TestOwner: the owner of a process is "host/pid", valid whatever the host
// name holds.
func TestOwner(t *testing.T) {
	long := strings.Repeat("h", 300)
	cases := []struct{ host, want string }{
		{"worker-1.example.com", "worker-1.example.com/42"},
		{"", "unknown/42"},
		{"bad\nhost\x00", "bad?host?/42"},
		{"caf\xe9", "caf?/42"},
		{long, long[:defaults.MaxOwnerLen-3] + "/42"},
		{strings.Repeat("é", 200), strings.Repeat("é", 126) + "/42"},
	}
	for _, c := range cases {
		got := Owner(c.host, 42)
		if got != c.want {
			t.Errorf("Owner(%q, 42) = %q, want %q", c.host, got, c.want)
		}
		if err := ValidateOwner(got); err != nil {
			t.Errorf("Owner(%q, 42) = %q is no valid owner: %v", c.host, got, err)
		}
	}
}

// TestProcessOwner: this process, read once.
func TestProcessOwner(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no host name:", err)
	}
	want := Owner(host, os.Getpid())
	if got := ProcessOwner(); got != want || !strings.HasSuffix(got, "/"+strconv.Itoa(os.Getpid())) {
		t.Fatalf("ProcessOwner() = %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = ProcessOwner() }); n != 0 {
		t.Fatalf("ProcessOwner allocates %v times per call once read", n)
	}
}

// TestValidateOwner: at most defaults.MaxOwnerLen bytes of UTF-8 without control
// characters; empty is valid.
func TestValidateOwner(t *testing.T) {
	for _, ok := range []string{"", "h/1", strings.Repeat("o", defaults.MaxOwnerLen), "wörker/1"} {
		if err := ValidateOwner(ok); err != nil {
			t.Errorf("ValidateOwner(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("o", defaults.MaxOwnerLen+1), "h\n/1", "h\x7f/1", "h\u0085/1", "h\xff/1"} {
		if err := ValidateOwner(bad); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("ValidateOwner(%q) = %v, want ErrInvalidRequest", bad, err)
		}
	}
}
