package remotedoor

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSFiles are the PEM files of a node's TLS: its certificate and key, and the CA that signs its peers'
// certificates. Every node both listens (for requests, or for answers) and dials (to send them), so
// its one certificate serves both ways: it should allow server and client authentication and name the
// address others dial it at. With a CA, TLS is mutual: a peer without a certificate the CA signed
// cannot connect, and the peers' listeners are checked against it too; without one, peers' listeners
// are checked against the system's roots.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// MaxConnections bounds the connections a node's listener holds at once; more are closed at once.
const MaxConnections = 1024

// credentials returns the gRPC options of a node with these files: its server's and its dialer's. The
// server holds at most maxConns connections; refused hears of each connection it closes unserved.
func (f TLSFiles) credentials(maxConns int, refused func(reason, from string)) (server []grpc.ServerOption, dial []grpc.DialOption, err error) {
	serverCreds, dialCreds := insecure.NewCredentials(), insecure.NewCredentials()
	if f.Enabled() {
		if f.Cert == "" || f.Key == "" {
			return nil, nil, errors.New("remote TLS needs both a certificate and its key")
		}
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("remote TLS certificate: %w", err)
		}
		serverCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		clientCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if f.CA != "" {
			pem, err := os.ReadFile(f.CA)
			if err != nil {
				return nil, nil, fmt.Errorf("remote TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("remote TLS CA %s: no PEM certificate in it", f.CA)
			}
			serverCfg.ClientCAs, serverCfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
			clientCfg.RootCAs = pool
		}
		serverCreds, dialCreds = credentials.NewTLS(serverCfg), credentials.NewTLS(clientCfg)
	}
	guarded := &guardedCreds{TransportCredentials: serverCreds, max: int64(maxConns), refused: refused, live: new(atomic.Int64)}
	return []grpc.ServerOption{grpc.Creds(guarded)}, []grpc.DialOption{grpc.WithTransportCredentials(dialCreds)}, nil
}

// guardedCreds holds a listener's connections to a number, and reports the handshakes that fail: a
// peer without the right certificate is refused like a message without the right authentication.
type guardedCreds struct {
	credentials.TransportCredentials
	max     int64
	live    *atomic.Int64
	refused func(reason, from string)
}

func (c *guardedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	from := conn.RemoteAddr().String()
	if c.live.Add(1) > c.max {
		c.live.Add(-1)
		c.refused(RefusedConnections, from)
		return nil, nil, fmt.Errorf("remote listener: %d connections held already", c.max)
	}
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.live.Add(-1)
		c.refused(RefusedTLS, from)
		return nil, nil, err
	}
	return &countedConn{Conn: out, live: c.live}, info, nil
}

func (c *guardedCreds) Clone() credentials.TransportCredentials {
	return &guardedCreds{TransportCredentials: c.TransportCredentials.Clone(), max: c.max, live: c.live, refused: c.refused}
}

// countedConn gives its place back when it closes, once.
type countedConn struct {
	net.Conn
	live *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.live.Add(-1) })
	return c.Conn.Close()
}

// leaf is the node's certificate, nil without TLS: the names in it are names of the node's (see names).
func (f TLSFiles) leaf() (*x509.Certificate, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("remote TLS certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("remote TLS certificate %s: %w", f.Cert, err)
	}
	return leaf, nil
}
