package console

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/internal/options"
)

// WithAllowedHosts makes the console answer only a request whose Host
// header names it: a loopback name or address (localhost, 127.0.0.0/8,
// ::1, IPv6 with or without brackets) with the port the request arrived
// on, or one of hosts. Any other Host gets 421 Misdirected Request, before
// authorization, and nothing is read or done.
//
// It is the defense against DNS rebinding: a page on a name the attacker
// resolves first to their server, then to 127.0.0.1 (or to the address
// the console listens on), is same-origin with the console to the browser,
// so http.CrossOriginProtection lets its POSTs through; its requests carry
// its own name as Host, and are refused here. Use it in every deployment
// without authentication (WithoutAuth) that a browser can reach: the
// console on loopback or on an internal network, behind an authorization
// that trusts the network rather than a credential the attacker's page
// cannot send. `surely console` without authentication serves with
// WithAllowedHosts().
//
// Each host is a name or an IP address (an IPv6 address in brackets when
// it has a port), with a port or without: "ops.example.com",
// "ops.example.com:8443", "10.0.0.5:8080", "[fd00::5]:8080". One without a
// port matches its name on any port. Names match without regard to case
// or a trailing dot. Behind a reverse proxy the Host is the proxy's public
// name (list it), unless the proxy rewrites it to the console's own
// address (nginx's default proxy_set_header Host $proxy_host, a loopback
// address): then check the name at the proxy (its server_name), as this
// option cannot.
//
// The port of a loopback Host is compared with the local port of the
// request's connection (http.LocalAddrContextKey, set by http.Server), so
// the console needs no configuration of the port it is mounted on; a Host
// without a port is the scheme's (80, or 443 over TLS). A request with no
// local TCP address (a handler called without an http.Server, a Unix
// socket) matches only hosts. WithAllowedHosts returns an error wrapping
// dlq.ErrInvalidOption for a host that is not a name or an address with an
// optional port (a URL, a path, a wildcard, a port out of range).
func WithAllowedHosts(hosts ...string) dlq.Option {
	return options.Func[options.DLQ](func(s *options.Set) error {
		allowed := make(hostCheck, 0, len(hosts))
		for _, h := range hosts {
			a, err := parseAllowedHost(h)
			if err != nil {
				return fmt.Errorf("%w: console.WithAllowedHosts: %w", dlq.ErrInvalidOption, err)
			}
			allowed = append(allowed, a)
		}
		s.Put(nameAllowedHosts, allowed)
		return nil
	})
}

// allowedHost is one host of WithAllowedHosts: a name (lower case, no
// brackets or trailing dot) and a port ("": any).
type allowedHost struct{ name, port string }

// hostCheck is the hosts WithAllowedHosts allows besides loopback.
type hostCheck []allowedHost

// parseAllowedHost reads one host of WithAllowedHosts.
func parseAllowedHost(h string) (allowedHost, error) {
	name, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: a name, an IPv4 address, or an IPv6 one with or
		// without brackets.
		name, port = h, ""
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return allowedHost{}, fmt.Errorf("%q: the port is not a number from 1 to 65535", h)
	}
	name = normalHost(name)
	ip := net.ParseIP(name)
	if strings.Contains(h, "[") && (ip == nil || ip.To4() != nil) {
		return allowedHost{}, fmt.Errorf("%q: only an IPv6 address is written in brackets", h)
	}
	if ip == nil && !validName(name) {
		return allowedHost{}, fmt.Errorf("%q is not a host name or an IP address, with an optional port", h)
	}
	return allowedHost{name, port}, nil
}

// validName reports whether name is a DNS name: labels of letters,
// digits, hyphens and underscores, separated by dots.
func validName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// normalHost is a host's name as it is compared: lower case, without the
// brackets of an IPv6 address or a trailing dot.
func normalHost(name string) string {
	name = strings.ToLower(name)
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		name = name[1 : len(name)-1]
	}
	return strings.TrimSuffix(name, ".")
}

// allows reports whether r's Host names the console: a loopback name on
// the port r arrived on, or one of hc.
func (hc hostCheck) allows(r *http.Request) bool {
	if r.Host == "" {
		return false
	}
	name, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		name, port = r.Host, "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	name = normalHost(name)
	if local := localPort(r); local != "" && port == local && loopbackName(name) {
		return true
	}
	for _, a := range hc {
		if a.name == name && (a.port == "" || a.port == port) {
			return true
		}
	}
	return false
}

// loopbackName reports whether name (normalized) is localhost or a
// loopback address.
func loopbackName(name string) bool {
	if name == "localhost" {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// localPort is the port of the local address of r's connection, or "" when
// the server set none (http.LocalAddrContextKey) or it has no port.
func localPort(r *http.Request) string {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return ""
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return strconv.Itoa(tcp.Port)
	}
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	return port
}
