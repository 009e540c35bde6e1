package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSFiles are the PEM files of a node's TLS: its certificate and key, and the CA that signs its peers'
// certificates. Every node both listens (for requests, or for answers) and dials (to send them), so
// its one certificate serves both ways and should allow server and client authentication. With a CA,
// TLS is mutual: a peer without a certificate the CA signed cannot connect, and the peers' servers are
// checked against it too; without one, peers' servers are checked against the system's roots.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// credentials returns the gRPC options of a node with these files: its server's and its dialer's.
// refused, when set, hears of every failed server handshake.
func (f TLSFiles) credentials(refused func(reason, from string)) (server []grpc.ServerOption, dial []grpc.DialOption, err error) {
	if !f.Enabled() {
		return nil, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
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
	var creds credentials.TransportCredentials = credentials.NewTLS(serverCfg)
	if refused != nil {
		creds = countedHandshakes{TransportCredentials: creds, refused: refused}
	}
	return []grpc.ServerOption{grpc.Creds(creds)}, []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(clientCfg))}, nil
}

// countedHandshakes reports the server handshakes that fail: a peer without the right certificate is
// refused like a message without the right authentication.
type countedHandshakes struct {
	credentials.TransportCredentials
	refused func(reason, from string)
}

func (c countedHandshakes) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.refused(RefusedTLS, conn.RemoteAddr().String())
	}
	return out, info, err
}

func (c countedHandshakes) Clone() credentials.TransportCredentials {
	return countedHandshakes{TransportCredentials: c.TransportCredentials.Clone(), refused: c.refused}
}
