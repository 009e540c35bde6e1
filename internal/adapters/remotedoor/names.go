package remotedoor

import (
	"context"
	"crypto/x509"
	"net"
	"slices"
	"sync"
	"time"
)

// names tells the addresses of this node from another node's. A message is signed for the address its
// sender dialed, which may be a name the node never heard of (it listens on 0.0.0.0:7001 and is
// dialed as controller-1:7001): an address is this node's when it is
//   - its listening address, or one of Options.Names;
//   - at its port, and a name of its TLS certificate (which its callers check it by anyway);
//   - at its port, and an IP it listens on (any of the machine's with a wildcard listening address),
//     or a name resolving to one.
//
// Names are resolved only for messages that authenticated already, so only a holder of the token (or
// a replay of what one sent) makes the node look a name up; results are kept a minute.
type names struct {
	local func() string
	extra map[string]bool
	cert  *x509.Certificate // nil without TLS
	// lookup and interfaces are the resolver's and the machine's; tests replace them.
	lookup     func(ctx context.Context, host string) ([]net.IPAddr, error)
	interfaces func() ([]net.Addr, error)
	now        func() time.Time

	mu       sync.Mutex
	resolved map[string]resolution
	own      resolution // the machine's addresses
}

// resolution is what a name (or the machine) had for addresses when it was last asked.
type resolution struct {
	ips []net.IP
	at  time.Time
	ok  bool // false: the lookup failed, and is tried again sooner
}

const (
	// namesFor is how long a name's addresses are kept; a failed lookup is tried again after
	// namesFailedFor.
	namesFor       = time.Minute
	namesFailedFor = 5 * time.Second
	// maxNames bounds the names kept: past it they are all forgotten.
	maxNames = 1024
	// lookupLimit bounds a lookup, which holds the stream of the peer whose message waits on it.
	lookupLimit = 2 * time.Second
)

func newNames(local func() string, extra []string, cert *x509.Certificate) *names {
	n := &names{local: local, extra: map[string]bool{}, cert: cert, lookup: net.DefaultResolver.LookupIPAddr,
		interfaces: net.InterfaceAddrs, now: time.Now, resolved: map[string]resolution{}}
	for _, a := range extra {
		n.extra[a] = true
	}
	return n
}

// mine reports whether addr ("host:port") names this node.
func (n *names) mine(addr string) bool {
	here := n.local()
	if addr == here || n.extra[addr] {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	listenHost, listenPort, lerr := net.SplitHostPort(here)
	if err != nil || lerr != nil || port != listenPort || host == "" {
		return false
	}
	if n.cert != nil && n.cert.VerifyHostname(host) == nil {
		return true
	}
	return n.listensAt(listenHost, n.addresses(host))
}

// addresses are a host's IPs: the host itself when it is one, else what its name resolves to.
func (n *names) addresses(host string) []net.IP {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}
	}
	return n.resolve(host)
}

// listensAt says whether a listener on listenHost is reached at one of ips: at its own IP, or, for a
// wildcard listening address, at any address of the machine.
func (n *names) listensAt(listenHost string, ips []net.IP) bool {
	listenIP := net.ParseIP(listenHost)
	if listenIP != nil && !listenIP.IsUnspecified() {
		return slices.ContainsFunc(ips, listenIP.Equal)
	}
	// A wildcard listener is reached at any address of the machine.
	for _, ip := range ips {
		if slices.ContainsFunc(n.machine(), ip.Equal) {
			return true
		}
	}
	return false
}

// resolve returns a name's addresses, looked up at most once a minute.
func (n *names) resolve(host string) []net.IP {
	now := n.now()
	n.mu.Lock()
	r, ok := n.resolved[host]
	n.mu.Unlock()
	if ok && fresh(r, now) {
		return r.ips
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupLimit)
	defer cancel()
	addrs, err := n.lookup(ctx, host)
	r = resolution{at: now, ok: err == nil}
	for _, a := range addrs {
		r.ips = append(r.ips, a.IP)
	}
	n.mu.Lock()
	if len(n.resolved) >= maxNames {
		clear(n.resolved)
	}
	n.resolved[host] = r
	n.mu.Unlock()
	return r.ips
}

// machine returns the machine's addresses, read at most once a minute.
func (n *names) machine() []net.IP {
	now := n.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if fresh(n.own, now) {
		return n.own.ips
	}
	addrs, err := n.interfaces()
	n.own = resolution{at: now, ok: err == nil}
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok {
			n.own.ips = append(n.own.ips, p.IP)
		}
	}
	return n.own.ips
}

func fresh(r resolution, now time.Time) bool {
	if r.at.IsZero() {
		return false
	}
	keep := namesFor
	if !r.ok {
		keep = namesFailedFor
	}
	return now.Sub(r.at) < keep
}
