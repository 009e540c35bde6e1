package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Modes of a worker host.
const (
	// ModeAgent keeps one session per host running `conclave worker`, with every job over it.
	ModeAgent = "agent"
	// ModeExec runs one `conclave worker` per job.
	ModeExec = "exec"
)

// Health is a transport's connection to its host.
type Health string

// Healths of a transport.
const (
	Connected    Health = "connected"
	Reconnecting Health = "reconnecting"
	Down         Health = "down"
)

// Router says how a host calls a provider: its wire format, base URL and key (providers.Registry).
type Router interface {
	Route(provider string) (kind, baseURL string, key secret.String, ok bool)
	Price(model string, u providers.Usage) (money.USD, bool)
}

// SSHOptions configure the SSH transports of a fleet.
type SSHOptions struct {
	// HostKeys verifies the hosts' keys (KnownHosts reads a known_hosts file); nil is refused unless
	// InsecureIgnoreHostKey, which is for development only.
	HostKeys              ssh.HostKeyCallback
	InsecureIgnoreHostKey bool
	Router                Router
	// Setup is sent to every agent first (the simulated provider's configuration).
	Setup *messages.AgentSetup
	Log   *zap.Logger
	// Timeouts of dial, handshake and session open (5 s each when zero), and the keepalive interval
	// (15 s; a keepalive unanswered for as long drops the connection).
	DialTimeout, HandshakeTimeout, SessionTimeout, KeepAlive time.Duration
}

// KnownHosts reads a known_hosts file.
func KnownHosts(path string) (ssh.HostKeyCallback, error) {
	cb, err := knownhosts.New(path)
	if err != nil {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	return cb, nil
}

// reconnect backoff: 1 s, doubling, at most 30 s.
const (
	minRedial = time.Second
	maxRedial = 30 * time.Second
)

// SSH runs jobs on one worker host over SSH: through a persistent agent session (many jobs at once,
// each with an id) or one exec per job. It dials on first use, redials with backoff after a failure,
// keeps the connection alive, and reports its health. It is safe for concurrent use.
type SSH struct {
	host   Host
	o      SSHOptions
	config *ssh.ClientConfig
	log    *zap.Logger
	// sessions bounds the sessions open at once below the server's MaxSessions.
	sessions chan struct{}

	mu       sync.Mutex
	client   *ssh.Client
	agent    *agentConn
	dialing  chan struct{} // closed when the dial in progress ends
	starting chan struct{} // closed when the agent session being started is up, or failed
	nextDial time.Time
	backoff  time.Duration
	lastErr  error
	health   Health
	onHealth func(Health, error)
	closed   bool
}

// NewSSH returns the transport of a host; it connects on first use.
func NewSSH(h Host, o SSHOptions) (*SSH, error) {
	raw, err := os.ReadFile(h.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("host %s: key_file: %w", h.Name, err)
	}
	signer, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("host %s: key_file %s is not a private key without a passphrase: %v", h.Name, h.KeyFile, err)
	}
	hostKeys := o.HostKeys
	if hostKeys == nil {
		if !o.InsecureIgnoreHostKey {
			return nil, fmt.Errorf("host %s: no known_hosts to verify its key against", h.Name)
		}
		hostKeys = ssh.InsecureIgnoreHostKey()
	}
	for _, d := range []*time.Duration{&o.DialTimeout, &o.HandshakeTimeout, &o.SessionTimeout} {
		if *d <= 0 {
			*d = 5 * time.Second
		}
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	cfg := &ssh.ClientConfig{User: h.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hostKeys, Timeout: o.DialTimeout}
	return &SSH{host: h, o: o, config: cfg, log: o.Log.With(zap.String("worker", h.Name)), sessions: make(chan struct{}, h.MaxSessions),
		health: Reconnecting, backoff: minRedial}, nil
}

// OnHealth registers who hears of health changes (the worker actor).
func (t *SSH) OnHealth(f func(Health, error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onHealth = f
}

func (t *SSH) setHealth(h Health, err error) {
	t.mu.Lock()
	changed, f := t.health != h, t.onHealth
	t.health = h
	t.mu.Unlock()
	if changed && f != nil {
		f(h, err)
	}
}

// hostError classifies a failure of the host itself: refused (or its key refused) is ssh_refused, a
// silence host_timeout; both are the host's, never the provider's.
func (t *SSH) hostError(err error, what string) error {
	kind := resilience.SSHRefused
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		kind = resilience.HostTimeout
	}
	var ke *knownhosts.KeyError
	switch {
	case errors.As(err, &ke) && len(ke.Want) > 0:
		err = fmt.Errorf("its host key changed: it is not the key known_hosts has for %s", t.addr())
	case errors.As(err, &ke):
		err = fmt.Errorf("its host key is unknown: known_hosts has no key for %s", t.addr())
	case errors.Is(err, syscall.ECONNREFUSED):
		err = errors.New("connection refused")
	}
	return &resilience.Error{Kind: kind, Scope: resilience.ScopeUnknown, Err: fmt.Errorf("worker %s: %s: %w", t.host.Name, what, err)}
}

func (t *SSH) addr() string { return net.JoinHostPort(t.host.Address, strconv.Itoa(t.host.Port)) }

// connect returns the host's client, dialing when there is none (one dial at a time; after a failure,
// not again before the backoff has passed).
func (t *SSH) connect(ctx context.Context) (*ssh.Client, error) {
	for {
		t.mu.Lock()
		switch {
		case t.closed:
			t.mu.Unlock()
			return nil, t.hostError(errors.New("the transport is closed"), "connect")
		case t.client != nil:
			c := t.client
			t.mu.Unlock()
			return c, nil
		case t.dialing != nil:
			wait := t.dialing
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case time.Now().Before(t.nextDial):
			err := t.lastErr
			t.mu.Unlock()
			return nil, err
		}
		done := make(chan struct{})
		t.dialing = done
		t.mu.Unlock()
		c, err := t.dial(ctx)
		t.mu.Lock()
		t.dialing = nil
		close(done)
		if err != nil {
			t.lastErr, t.nextDial = err, time.Now().Add(t.backoff)
			t.backoff = min(2*t.backoff, maxRedial)
			t.mu.Unlock()
			t.log.Warn("worker host unreachable", zap.String("event", "host_unreachable"), zap.String("address", t.addr()), zap.Error(err))
			t.setHealth(Down, err)
			return nil, err
		}
		t.client, t.backoff, t.lastErr = c, minRedial, nil
		t.mu.Unlock()
		t.log.Info("worker host connected", zap.String("event", "host_connected"), zap.String("address", t.addr()), zap.String("mode", t.host.Mode))
		t.setHealth(Connected, nil)
		go t.keepAlive(c)
		return c, nil
	}
}

// dial opens a connection with deadlines on the dial and the handshake.
func (t *SSH) dial(ctx context.Context) (*ssh.Client, error) {
	d := net.Dialer{Timeout: t.o.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", t.addr())
	if err != nil {
		return nil, t.hostError(err, "dial")
	}
	conn.SetDeadline(time.Now().Add(t.o.HandshakeTimeout))
	cc, chans, reqs, err := ssh.NewClientConn(conn, t.addr(), t.config)
	if err != nil {
		conn.Close()
		return nil, t.hostError(err, "handshake")
	}
	conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// keepAlive asks the server for a reply every interval; one that does not come within the interval
// drops the connection, and the next job redials.
func (t *SSH) keepAlive(c *ssh.Client) {
	tick := time.NewTicker(t.o.KeepAlive)
	defer tick.Stop()
	closed := make(chan struct{})
	go func() { c.Wait(); close(closed) }()
	for {
		select {
		case <-closed:
			t.drop(c, t.hostError(io.EOF, "connection closed"))
			return
		case <-tick.C:
		}
		answered := make(chan error, 1)
		go func() { _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); answered <- err }()
		select {
		case err := <-answered:
			if err == nil {
				continue
			}
			t.drop(c, t.hostError(err, "keepalive"))
		case <-time.After(t.o.KeepAlive):
			t.drop(c, t.hostError(context.DeadlineExceeded, "keepalive unanswered"))
		case <-closed:
			return
		}
	}
}

// drop forgets a connection that failed; its jobs fail as the host's fault.
func (t *SSH) drop(c *ssh.Client, why error) {
	t.mu.Lock()
	current := t.client == c
	if current {
		t.client = nil
		if t.agent != nil && t.agent.client == c {
			t.agent = nil
		}
	}
	closed := t.closed
	t.mu.Unlock()
	c.Close()
	if current && !closed {
		t.log.Warn("worker host connection lost", zap.String("event", "host_connection_lost"), zap.Error(why))
		t.setHealth(Reconnecting, why)
	}
}

// openSession opens a session within the session timeout and a slot under MaxSessions. A session the
// server refuses (it still counts sessions whose command is ending) is asked for again, a little later
// each time, until the session timeout: the connection itself is fine, and dropping it would fail
// every job on it.
func (t *SSH) openSession(ctx context.Context, c *ssh.Client) (*ssh.Session, func(), error) {
	select {
	case t.sessions <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release := func() { <-t.sessions }
	type opened struct {
		s   *ssh.Session
		err error
	}
	timeout := time.NewTimer(t.o.SessionTimeout)
	defer timeout.Stop()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		ch := make(chan opened, 1)
		go func() { s, err := c.NewSession(); ch <- opened{s, err} }()
		var refused error
		select {
		case o := <-ch:
			var oce *ssh.OpenChannelError
			if o.err == nil {
				return o.s, release, nil
			}
			if !errors.As(o.err, &oce) {
				release()
				t.drop(c, o.err)
				return nil, nil, t.hostError(o.err, "session")
			}
			refused = o.err
		case <-timeout.C:
			release()
			t.drop(c, context.DeadlineExceeded)
			return nil, nil, t.hostError(context.DeadlineExceeded, "session open")
		case <-ctx.Done():
			release()
			return nil, nil, ctx.Err()
		}
		select {
		case <-time.After(wait):
		case <-timeout.C:
			release()
			return nil, nil, t.hostError(refused, "session")
		case <-ctx.Done():
			release()
			return nil, nil, ctx.Err()
		}
	}
}

// Run implements Transport.
func (t *SSH) Run(ctx context.Context, call providers.Call) (providers.Reply, error) {
	return t.call(ctx, call, nil)
}

// Stream implements Streamer: the agent streams the call and sends each piece back before its result.
func (t *SSH) Stream(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	return t.call(ctx, call, onDelta)
}

// call runs a call on the host's agent, streaming to onDelta when it is set.
func (t *SSH) call(ctx context.Context, call providers.Call, onDelta func(providers.Delta)) (providers.Reply, error) {
	kind, base, key, ok := t.o.Router.Route(call.Provider)
	if !ok {
		return providers.Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: call.Provider, Model: call.Model,
			Err: fmt.Errorf("provider %s cannot be called from a worker host", call.Provider)}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Minute)
	}
	job := &messages.AgentJob{Job: JobOf(call, deadline), Kind: kind, BaseUrl: base, ApiKey: key.Reveal()}
	job.Job.Stream = onDelta != nil
	var res *messages.JobResult
	var err error
	if t.host.Mode == ModeExec {
		res, err = t.runExec(ctx, job, onDelta)
	} else {
		res, err = t.runAgent(ctx, job, onDelta)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The job ran out of time before its agent had it, or its agent said nothing past its deadline:
		// the host's fault, never the provider's (an agent that ran out of time calling says so itself).
		err = &resilience.Error{Kind: resilience.HostTimeout, Err: fmt.Errorf("worker %s: the host did not answer the job in time", t.host.Name)}
	}
	if err != nil {
		return providers.Reply{}, err
	}
	reply, err := ReplyOf(res)
	if cost, ok := t.o.Router.Price(call.Model, reply.Usage); ok {
		reply.Cost = cost
	}
	return reply, err
}

// agentConn is the persistent session of a host's agent.
type agentConn struct {
	client  *ssh.Client
	session *ssh.Session
	stdin   io.WriteCloser
	writeMu sync.Mutex
	mu      sync.Mutex
	pending map[string]chan *messages.JobResult
	// streams hear the pieces of the streamed jobs pending, by job id.
	streams map[string]func(providers.Delta)
	done    chan struct{}
	err     error
}

func (a *agentConn) send(f *messages.AgentFrame) error {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	return WriteFrame(a.stdin, f)
}

// agentSession returns the host's agent session, starting one when there is none (one start at a time).
func (t *SSH) agentSession(ctx context.Context) (*agentConn, error) {
	for {
		t.mu.Lock()
		switch {
		case t.agent != nil:
			a := t.agent
			t.mu.Unlock()
			return a, nil
		case t.starting != nil:
			wait := t.starting
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		t.starting = done
		t.mu.Unlock()
		a, err := t.startSession(ctx)
		t.mu.Lock()
		t.starting = nil
		close(done)
		if err == nil {
			t.agent = a
		}
		t.mu.Unlock()
		return a, err
	}
}

// startSession connects when needed and starts the agent on a new session.
func (t *SSH) startSession(ctx context.Context) (*agentConn, error) {
	c, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	s, release, err := t.openSession(ctx, c)
	if err != nil && ctx.Err() == nil {
		// The connection may have died before anyone noticed (openSession dropped it): dial once more.
		if c, err = t.connect(ctx); err != nil {
			return nil, err
		}
		s, release, err = t.openSession(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	return t.startAgent(c, s, release)
}

// startAgent starts `conclave worker` on a session, sends the setup and waits for the agent's hello.
func (t *SSH) startAgent(c *ssh.Client, s *ssh.Session, release func()) (*agentConn, error) {
	// abandon ends a session that did not become an agent, and says at which step it failed.
	abandon := func(err error, step string) (*agentConn, error) {
		s.Close()
		release()
		return nil, t.hostError(err, step)
	}
	stdin, err1 := s.StdinPipe()
	stdout, err2 := s.StdoutPipe()
	if err := errors.Join(err1, err2); err != nil {
		return abandon(err, "session pipes")
	}
	if err := s.Start(t.host.Command); err != nil {
		return abandon(err, "start the agent")
	}
	a := &agentConn{client: c, session: s, stdin: stdin, pending: map[string]chan *messages.JobResult{}, streams: map[string]func(providers.Delta){},
		done: make(chan struct{})}
	hello := make(chan error, 1)
	go t.readAgent(a, bufio.NewReaderSize(stdout, 64<<10), hello, release)
	if t.o.Setup != nil {
		if err := a.send(&messages.AgentFrame{Body: &messages.AgentFrame_Setup{Setup: t.o.Setup}}); err != nil {
			return abandon(err, "agent setup")
		}
	}
	select {
	case err := <-hello:
		if err != nil {
			return abandon(err, "agent hello")
		}
	case <-time.After(t.o.SessionTimeout):
		return abandon(context.DeadlineExceeded, "agent hello")
	}
	return a, nil
}

// readAgent reads an agent session's frames: the hello first, whose outcome it tells on hello, then
// the jobs' pieces and results. When the session ends, every job waiting on it fails, and the
// session, its slot and the connection are let go.
func (t *SSH) readAgent(a *agentConn, r *bufio.Reader, hello chan<- error, release func()) {
	first, err := ReadFrame(r)
	if err == nil && first.GetHello() == nil {
		err = errors.New("the agent did not say hello")
	}
	hello <- err
	if err != nil {
		return
	}
	for {
		f, err := ReadFrame(r)
		if err != nil {
			err = t.hostError(err, "agent session ended")
			a.fail(err)
			a.session.Close()
			release()
			t.drop(a.client, err) // the connection went with it, most likely; the next job dials again
			return
		}
		a.deliver(f)
	}
}

// deliver hands a frame from the agent to its job: a piece to the job's stream, a result to the job
// waiting for it, which is then no longer pending.
func (a *agentConn) deliver(f *messages.AgentFrame) {
	if d := f.GetDelta(); d != nil {
		a.mu.Lock()
		onDelta := a.streams[d.JobId]
		a.mu.Unlock()
		if onDelta != nil {
			onDelta(PieceOf(d))
		}
	}
	if res := f.GetResult(); res != nil {
		a.mu.Lock()
		ch := a.pending[res.JobId]
		delete(a.pending, res.JobId)
		delete(a.streams, res.JobId)
		a.mu.Unlock()
		if ch != nil {
			ch <- res
		}
	}
}

// fail ends the session: every job waiting on it fails with err.
func (a *agentConn) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	a.err = err
	close(a.done)
}

func (t *SSH) runAgent(ctx context.Context, job *messages.AgentJob, onDelta func(providers.Delta)) (*messages.JobResult, error) {
	a, err := t.agentSession(ctx)
	if err != nil {
		return nil, err
	}
	id := job.Job.JobId
	ch := make(chan *messages.JobResult, 1)
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		t.forgetAgent(a)
		return nil, a.err
	}
	a.pending[id] = ch
	if onDelta != nil {
		a.streams[id] = onDelta
	}
	a.mu.Unlock()
	forget := func() {
		a.mu.Lock()
		delete(a.pending, id)
		delete(a.streams, id)
		a.mu.Unlock()
	}
	if err := a.send(&messages.AgentFrame{Body: &messages.AgentFrame_Job{Job: job}}); err != nil {
		forget()
		t.forgetAgent(a)
		return nil, t.hostError(err, "send the job")
	}
	select {
	case res := <-ch:
		return res, nil
	case <-a.done:
		forget()
		t.forgetAgent(a)
		return nil, a.err
	case <-ctx.Done():
		// The agent has the same deadline and says itself whether the provider ran out of time, so a
		// deadline is not a cancellation; a job nobody waits for any more is cancelled at once.
		cancelJob := func() {
			_ = a.send(&messages.AgentFrame{Body: &messages.AgentFrame_Cancel{Cancel: &messages.CancelJob{JobId: id}}})
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancelJob()
		}
		select {
		case res := <-ch:
			return res, nil
		case <-time.After(AgentGrace):
			cancelJob()
			forget()
			return nil, ctx.Err()
		case <-a.done:
			forget()
			return nil, ctx.Err()
		}
	}
}

// closeExec closes an exec session and frees its slot once its agent has exited (AgentGrace at most,
// then it is killed): the server counts a session until its command has exited, after the answer, and
// more sessions would otherwise be asked for than it allows. A session whose agent never started
// ends at once.
func closeExec(s *ssh.Session, release func()) {
	exited := make(chan struct{})
	go func() { _ = s.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(AgentGrace):
		_ = s.Signal(ssh.SIGKILL)
	}
	s.Close()
	release()
}

// AgentGrace is how long past a job's deadline, or its cancellation, its agent has to answer.
const AgentGrace = 500 * time.Millisecond

// forgetAgent drops a session that ended, so the next job starts another.
func (t *SSH) forgetAgent(a *agentConn) {
	t.mu.Lock()
	if t.agent == a {
		t.agent = nil
	}
	t.mu.Unlock()
	a.session.Close()
}

// runExec runs one job in a session of its own: the agent reads it, answers and ends.
func (t *SSH) runExec(ctx context.Context, job *messages.AgentJob, onDelta func(providers.Delta)) (*messages.JobResult, error) {
	c, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	s, release, err := t.openSession(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() { go closeExec(s, release) }()
	stdin, err1 := s.StdinPipe()
	stdout, err2 := s.StdoutPipe()
	if err := errors.Join(err1, err2); err != nil {
		return nil, t.hostError(err, "session pipes")
	}
	if err := s.Start(t.host.Command); err != nil {
		return nil, t.hostError(err, "start the agent")
	}
	ch := make(chan execAnswer, 1)
	go t.readExec(stdout, onDelta, ch)
	if err := t.sendExec(stdin, job); err != nil {
		return nil, err
	}
	stdin.Close()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-ctx.Done():
		select {
		case a := <-ch: // the agent ran out of time too, and said so
			return a.res, a.err
		case <-time.After(AgentGrace):
			s.Signal(ssh.SIGKILL)
			return nil, ctx.Err()
		}
	}
}

// execAnswer is how an exec session ended: the job's result, or why there is none.
type execAnswer struct {
	res *messages.JobResult
	err error
}

// readExec reads an exec session's frames, passing the job's pieces to onDelta (when set), and tells
// on ch the result, or the error that ended the session before one came.
func (t *SSH) readExec(stdout io.Reader, onDelta func(providers.Delta), ch chan<- execAnswer) {
	r := bufio.NewReader(stdout)
	for {
		f, err := ReadFrame(r)
		if err != nil {
			ch <- execAnswer{err: t.hostError(err, "the agent ended without a result")}
			return
		}
		if d := f.GetDelta(); d != nil && onDelta != nil {
			onDelta(PieceOf(d))
		}
		if res := f.GetResult(); res != nil {
			ch <- execAnswer{res: res}
			return
		}
	}
}

// sendExec writes an exec session's input: the setup, when there is one, then the job.
func (t *SSH) sendExec(stdin io.Writer, job *messages.AgentJob) error {
	var frames []*messages.AgentFrame
	if t.o.Setup != nil {
		frames = append(frames, &messages.AgentFrame{Body: &messages.AgentFrame_Setup{Setup: t.o.Setup}})
	}
	frames = append(frames, &messages.AgentFrame{Body: &messages.AgentFrame_Job{Job: job}})
	for _, f := range frames {
		if err := WriteFrame(stdin, f); err != nil {
			return t.hostError(err, "send the job")
		}
	}
	return nil
}

// Close implements Transport: the session and the connection end.
func (t *SSH) Close() error {
	t.mu.Lock()
	t.closed = true
	c, a := t.client, t.agent
	t.client, t.agent = nil, nil
	t.mu.Unlock()
	if a != nil {
		a.stdin.Close()
		a.session.Close()
	}
	if c != nil {
		// The agent session's end may have closed the connection first (its reader drops it).
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("worker %s: close: %w", t.host.Name, err)
		}
	}
	return nil
}
