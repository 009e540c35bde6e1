package remotedoor

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/testenv/tlstest"
)

// fakeNames is a node listening at listen on a machine with the addresses 10.0.0.1 and 127.0.0.1,
// whose resolver knows controller-1 (this machine) and controller-2 (another); it counts lookups.
func fakeNames(listen string, extra []string, cert *x509.Certificate, now *time.Time, lookups *int) *names {
	n := newNames(func() string { return listen }, extra, cert)
	known := map[string]string{"controller-1": "10.0.0.1", "controller-2": "10.0.0.2"}
	n.lookup = func(_ context.Context, host string) ([]net.IPAddr, error) {
		*lookups++
		ip, ok := known[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		return []net.IPAddr{{IP: net.ParseIP(ip)}}, nil
	}
	n.interfaces = func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("10.0.0.1"), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)}}, nil
	}
	n.now = func() time.Time { return *now }
	return n
}

func TestANodeKnowsItsNames(t *testing.T) {
	pair := tlstest.NewCA(t, "conclave").Issue(t, "node-a") // names localhost, 127.0.0.1 and ::1
	cert, err := TLSFiles{Cert: pair.Cert, Key: pair.Key}.leaf()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc   string
		listen string
		extra  []string
		cert   *x509.Certificate
		addr   string
		want   bool
	}{
		{"its listening address", "0.0.0.0:7001", nil, nil, "0.0.0.0:7001", true},
		{"an address of the machine, listening on all", "0.0.0.0:7001", nil, nil, "10.0.0.1:7001", true},
		{"loopback, listening on all", "[::]:7001", nil, nil, "127.0.0.1:7001", true},
		{"a name of the machine", "0.0.0.0:7001", nil, nil, "controller-1:7001", true},
		{"another machine", "0.0.0.0:7001", nil, nil, "10.0.0.2:7001", false},
		{"another machine's name", "0.0.0.0:7001", nil, nil, "controller-2:7001", false},
		{"another port: another node on this machine", "0.0.0.0:7001", nil, nil, "10.0.0.1:7002", false},
		{"a name nobody knows", "0.0.0.0:7001", nil, nil, "controller-9:7001", false},
		{"no host", "0.0.0.0:7001", nil, nil, ":7001", false},
		{"not an address", "0.0.0.0:7001", nil, nil, "controller-1", false},
		{"a name resolving to the address it listens on", "10.0.0.1:7001", nil, nil, "controller-1:7001", true},
		{"an address of the machine it does not listen on", "10.0.0.1:7001", nil, nil, "127.0.0.1:7001", false},
		{"a name given to it", "10.0.0.1:7001", []string{"balancer.internal:443"}, nil, "balancer.internal:443", true},
		{"a name of its certificate", "10.0.0.1:7001", nil, cert, "localhost:7001", true},
		{"a name of its certificate, at another port", "10.0.0.1:7001", nil, cert, "localhost:7002", false},
		{"a name its certificate does not have", "10.0.0.1:7001", nil, cert, "node-b.internal:7001", false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			now, lookups := gateNow, 0
			if got := fakeNames(tc.listen, tc.extra, tc.cert, &now, &lookups).mine(tc.addr); got != tc.want {
				t.Fatalf("mine(%q) listening at %s = %v", tc.addr, tc.listen, got)
			}
		})
	}
}

// A name is looked up once a minute at most, a name that does not resolve every few seconds.
func TestNamesAreLookedUpOnceAMinute(t *testing.T) {
	now, lookups := gateNow, 0
	n := fakeNames("0.0.0.0:7001", nil, nil, &now, &lookups)
	for range 3 {
		if !n.mine("controller-1:7001") || n.mine("controller-9:7001") {
			t.Fatal("the names changed")
		}
	}
	if lookups != 2 {
		t.Fatalf("%d lookups for two names", lookups)
	}
	now = now.Add(namesFailedFor)
	n.mine("controller-1:7001")
	n.mine("controller-9:7001")
	if lookups != 3 {
		t.Fatalf("%d lookups: want the failed one again, and only it", lookups)
	}
	now = now.Add(namesFor)
	n.mine("controller-1:7001")
	if lookups != 4 {
		t.Fatalf("%d lookups: want the name looked up again after a minute", lookups)
	}
}
