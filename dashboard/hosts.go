package dashboard

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// hostPolicy decides which Host headers the dashboard answers to (see
// Options.AllowedHosts).
type hostPolicy struct {
	any      bool
	loopback bool // any loopback name or address
	names    map[string]bool
}

func newHostPolicy(o Options) hostPolicy {
	p := hostPolicy{names: map[string]bool{}}
	if len(o.AllowedHosts) == 0 {
		if o.authConfigured() {
			p.any = true
		} else {
			p.loopback = true
		}
		return p
	}
	for _, h := range o.AllowedHosts {
		if h == "*" {
			p.any = true
		}
		p.names[canonicalHost(h)] = true
	}
	return p
}

// allows reports whether a request's Host (with or without a port) is one
// the dashboard answers to. An empty Host (HTTP/1.0) is refused unless any
// host is allowed: no browser sends one.
func (p hostPolicy) allows(hostport string) bool {
	if p.any {
		return true
	}
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = canonicalHost(h)
	if h == "" {
		return false
	}
	if p.names[h] {
		return true
	}
	return p.loopback && IsLoopbackHost(h)
}

// CheckAllowedHost returns an error saying why h cannot be an entry of
// Options.AllowedHosts (a host name or IP address, without scheme, port or
// path; or "*"), nil when it can.
func CheckAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	bad := h == "" || strings.ContainsAny(h, "/?#@ \t")
	if !bad && strings.Contains(h, ":") {
		_, err := netip.ParseAddr(strings.Trim(h, "[]"))
		bad = err != nil // a port, or a scheme
	}
	if bad {
		return fmt.Errorf("%q is not a host name or IP address (no scheme, port or path)", h)
	}
	return nil
}

// canonicalHost lowercases a host name, drops a trailing dot and IPv6
// brackets, and writes an IP address in its canonical form.
func canonicalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return h
}

// IsLoopbackHost reports whether host (a name or an IP address, without a
// port) can only mean this machine: "localhost", a name under
// ".localhost", or a loopback address.
func IsLoopbackHost(host string) bool {
	h := canonicalHost(host)
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}
