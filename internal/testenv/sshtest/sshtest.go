// Package sshtest gives tests SSH servers on loopback: an in-process one whose sessions run a handler,
// and the real OpenSSH sshd (the services script installs it), started with a throwaway
// configuration whose authorized_keys forces the command that runs the project's own worker binary.
// Tests skip with a message where sshd cannot run.
package sshtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/testenv"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"gopkg.in/yaml.v3"
)

// Key is a key pair with its private key written to a file only its owner reads.
type Key struct {
	Signer ssh.Signer
	File   string
}

// NewKey makes an ed25519 key in dir.
func NewKey(t testing.TB, dir, name string) Key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, name)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Signer: signer, File: file}
}

// Authorized is the key's authorized_keys line, without options.
func (k Key) Authorized() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.Signer.PublicKey())))
}

// KnownHosts writes a known_hosts file saying key is the host key of addr.
func KnownHosts(t testing.TB, dir, addr string, key ssh.PublicKey) string {
	t.Helper()
	file := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(file, []byte(knownhosts.Line([]string{knownhosts.Normalize(addr)}, key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// Handler runs one exec request's session: its input, output and the command asked for.
type Handler func(command string, stdin io.Reader, stdout io.Writer)

// Server is an in-process SSH server on loopback.
type Server struct {
	Addr    string
	HostKey Key
	// MaxSessions, when positive, refuses a session while that many are open, as sshd does ("no more
	// sessions"), a session counting until its command has ended.
	MaxSessions atomic.Int32
	// Refused counts the sessions refused.
	Refused atomic.Int32
	open    atomic.Int32
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

// NewServer starts a server that takes client's key and runs handler for every exec request.
func NewServer(t testing.TB, client Key, handler Handler) *Server {
	t.Helper()
	s := &Server{HostKey: NewKey(t, t.TempDir(), "host")}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), client.Signer.PublicKey().Marshal()) {
			return &ssh.Permissions{}, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	cfg.AddHostKey(s.HostKey.Signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln, s.Addr = ln, ln.Addr().String()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c, cfg, handler) }()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(c net.Conn, cfg *ssh.ServerConfig, handler Handler) {
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		if max := s.MaxSessions.Load(); max > 0 && s.open.Load() >= max {
			s.Refused.Add(1)
			nc.Reject(ssh.ConnectionFailed, "no more sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			continue
		}
		s.open.Add(1)
		go func() {
			defer s.open.Add(-1)
			defer ch.Close()
			for req := range requests {
				if req.Type != "exec" {
					req.Reply(false, nil)
					continue
				}
				var payload struct{ Command string }
				ssh.Unmarshal(req.Payload, &payload)
				req.Reply(true, nil)
				go func() {
					handler(payload.Command, ch, ch)
					ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
					ch.Close()
				}()
			}
		}()
	}
}

// Drop closes every connection, as a host that went away.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// Close stops the server.
func (s *Server) Close() {
	s.ln.Close()
	s.Drop()
	s.wg.Wait()
}

// Silent listens and accepts but never speaks: a handshake that never completes.
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// Refused is an address where nothing listens.
func Refused(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// BuildConclave builds the project's binary into dir and returns its path.
func BuildConclave(t testing.TB, dir string) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "conclave")
	build := exec.Command("go", "build", "-o", bin, "./cmd/conclave")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build conclave: %v\n%s", err, out)
	}
	return bin
}

// SSHD is a real OpenSSH server on loopback whose one authorized key runs a forced command.
type SSHD struct {
	Addr       string
	User       string
	Client     Key
	KnownHosts string
	HostKey    Key
	cmd        *exec.Cmd
	path       string
	dir        string
	config     string
}

// StartSSHD starts sshd on a free loopback port; the client key's sessions run command whatever
// they ask for, as authorized_keys forces it.
func StartSSHD(t testing.TB, command string) *SSHD {
	t.Helper()
	path, err := exec.LookPath("sshd")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/sshd"); e != nil {
			testenv.Missing(t, "sshd is not installed (run scripts/services.sh)")
		}
		path = "/usr/sbin/sshd"
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if u.Uid == "0" {
		os.MkdirAll("/run/sshd", 0o755) // its privilege separation directory
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	d := &SSHD{User: u.Username, Client: NewKey(t, dir, "client"), HostKey: NewKey(t, dir, "host_ed25519"), dir: dir}
	authorized := fmt.Sprintf("command=%q,restrict %s\n", command, d.Client.Authorized())
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorized), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Addr = Refused(t)
	host, port, _ := net.SplitHostPort(d.Addr)
	d.config = filepath.Join(dir, "sshd_config")
	cfg := strings.Join([]string{
		"Port " + port, "ListenAddress " + host, "HostKey " + d.HostKey.File, "PidFile " + filepath.Join(dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"), "StrictModes no", "UsePAM no", "PasswordAuthentication no",
		"KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "MaxSessions 10",
		"LogLevel ERROR", "ClientAliveInterval 0",
		// Debian's bash sources the account's ~/.bashrc for a command run by sshd when it is the first
		// shell level; a test machine's dotfiles (a pyenv rehash waiting up to 60 s on a lock left by a
		// killed session) must not decide how long a test host takes to start its worker.
		"SetEnv SHLVL=1", "",
	}, "\n")
	if err := os.WriteFile(d.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.KnownHosts = KnownHosts(t, dir, d.Addr, d.HostKey.Signer.PublicKey())
	d.path = path
	if err := d.start(); err != nil {
		testenv.Missing(t, "sshd does not start: %v", err)
	}
	t.Cleanup(d.Kill)
	return d
}

// start runs sshd on the configuration and waits until it listens.
func (d *SSHD) start() error {
	d.cmd = exec.Command(d.path, "-D", "-e", "-f", d.config)
	var stderr bytes.Buffer
	d.cmd.Stderr = &stderr
	d.cmd.WaitDelay = time.Second // a session child holding its stderr cannot stall Kill
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("sshd does not start: %w", err)
	}
	for i := 0; ; i++ {
		if c, err := net.DialTimeout("tcp", d.Addr, 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		if i > 100 {
			return fmt.Errorf("sshd is not listening on %s: %s", d.Addr, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart starts a killed sshd again on the same address, keys and configuration: the host is back.
func (d *SSHD) Restart() error {
	d.Kill()
	return d.start()
}

// Freeze stops sshd and every session it runs (SIGSTOP): the host stays reachable by TCP but silent,
// as a hung machine. Thaw lets it go on.
func (d *SSHD) Freeze() { d.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen host (SIGCONT).
func (d *SSHD) Thaw() { d.signal(syscall.SIGCONT) }

func (d *SSHD) signal(sig syscall.Signal) {
	if d.cmd.Process == nil || d.cmd.ProcessState != nil {
		return
	}
	for _, pid := range append(descendants(d.cmd.Process.Pid), d.cmd.Process.Pid) {
		syscall.Kill(pid, sig)
	}
}

// Port returns the server's port.
func (d *SSHD) Port() int {
	_, p, _ := net.SplitHostPort(d.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Kill kills sshd and every session it runs, as a host that died. Its per-connection processes
// start sessions of their own, so they are found by parentage, not by process group.
func (d *SSHD) Kill() {
	if d.cmd.Process == nil || d.cmd.ProcessState != nil {
		return // never started, or already killed
	}
	d.signal(syscall.SIGKILL)
	d.cmd.Wait()
}

// descendants lists the processes below pid, read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil {
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// FleetHost is a worker host of a fleet file: a real sshd, or an address where a fault waits.
type FleetHost struct {
	Name, Mode string
	SSHD       *SSHD
	Addr       string // for a host that is not a real sshd
	Slots      int    // 8 when zero
}

// WriteFleet writes a fleet file naming hosts, all reached with the key file, beside a known_hosts file
// joining the known ones, and returns the fleet file's path.
func WriteFleet(t testing.TB, known []string, hosts []FleetHost, key string) string {
	t.Helper()
	dir := t.TempDir()
	var lines []string
	for _, k := range known {
		raw, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(string(raw)))
	}
	f := fleet.File{KnownHosts: filepath.Join(dir, "known_hosts")}
	if err := os.WriteFile(f.KnownHosts, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		addr, user := h.Addr, "conclave"
		if h.SSHD != nil {
			addr, user = h.SSHD.Addr, h.SSHD.User
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		slots := h.Slots
		if slots == 0 {
			slots = 8
		}
		f.Hosts = append(f.Hosts, fleet.Host{Name: h.Name, Address: host, Port: p, User: user, KeyFile: key, Tier: 1, Slots: slots, Mode: h.Mode})
	}
	raw, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
