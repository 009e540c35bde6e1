// Command conclave is the Conclave control plane: `conclave serve` runs it, `conclave migrate` and
// `conclave records` tend its PostgreSQL, `conclave keys` and `conclave teams` its API keys and teams,
// `conclave version` says which build this is.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	httpapi "github.com/conclave-ai/conclave/http"
	"github.com/conclave-ai/conclave/internal/adapters/remotedoor"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/logging"
	"github.com/conclave-ai/conclave/internal/platform/tracing"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `Conclave routes each task to several language models, merges their answers by consensus and learns
which models to ask.

Usage:
  conclave serve [flags]     run the control plane (the embedded default needs no configuration)
  conclave route [flags] "TASK"
                             send a task to a running Conclave and watch each model answer
  conclave eval [flags]      measure routing quality on replayed benchmark answers (report in reports/eval)
  conclave worker            the agent on a worker host (started over SSH by a controller)
  conclave migrate up|down|status
                             apply or undo the PostgreSQL schema at DATABASE_URL
  conclave records prune --older-than 30d
                             delete old execution records from PostgreSQL
  conclave keys create|list|show|update|revoke|spend
                             manage the API keys of a running Conclave (its admin API)
  conclave teams create|list|show|update|delete|spend
                             manage its teams: groups of keys held to limits and a budget of their own
  conclave books check [--since 30d]
                             check that keys' spend, the journal of calls and the records agree (exit 1 if not)
  conclave version           print the version (also --version)
  conclave help              show this text (also --help)

"conclave serve --help" and "conclave eval --help" list each command's flags with their defaults and
environment variables.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "worker" { // the agent on a worker host speaks frames on stdin and stdout
		if err := worker(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "conclave worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "conclave:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "eval":
		return evaluate(ctx, args[1:], stdout, stderr)
	case "route":
		return routeCommand(ctx, args[1:], os.Stdin, stdout, stderr)
	case "worker":
		return worker(ctx, args[1:], strings.NewReader(""), stdout, stderr)
	case "migrate":
		return migrate(ctx, args[1:], stdout, stderr)
	case "records":
		return records(ctx, args[1:], stdout, stderr)
	case "keys":
		return adminCommand(ctx, keysResource, args[1:], stdout, stderr)
	case "teams":
		return adminCommand(ctx, teamsResource, args[1:], stdout, stderr)
	case "books":
		return booksCommand(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// isHelp reports whether a command's first argument asks for its help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

func versionString() string {
	v := "conclave " + version
	if info, ok := debug.ReadBuildInfo(); ok {
		v += " " + info.GoVersion
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				v += " " + s.Value
			}
		}
	}
	return v
}

// serve runs the control plane until ctx is cancelled (SIGINT or SIGTERM), then shuts down gracefully.
// It prints the address it listens on to stdout, whatever the log level; logs go to logOut.
func serve(ctx context.Context, args []string, stdout, logOut io.Writer) error {
	cfg, err := config.Load(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		config.PrintUsage(stdout)
		return nil
	}
	if err != nil {
		return err
	}
	tuneGC(os.Getenv)
	out := logging.Buffer(logOut)
	defer out.Stop()
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat, out)
	if err != nil {
		return err
	}
	log = log.With(zap.String("node_id", cfg.NodeID)) // every line says which controller wrote it

	// Traces go where the OTEL_* variables say; without an endpoint there is no tracer at all.
	traces, err := tracing.New(ctx, tracing.Options{Log: log, Version: version, NodeID: cfg.NodeID})
	if err != nil {
		return err
	}
	// Last: the spans of the requests that finished during the shutdown are exported too.
	defer exportLastSpans(traces, log)
	eng, err := engine.New(engine.Options{Config: cfg, Log: log, Tracing: traces})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = eng.Shutdown(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	// A client that trickles its request, or never reads its answer, holds a connection only so long;
	// and only so many connections are held at once.
	ln = netutil.LimitListener(ln, cfg.MaxConnections)
	srv := apiServer(cfg, eng, log, traces)
	// abandon gives up the start once the listener is open.
	abandon := func(err error) error {
		_ = ln.Close()
		_ = eng.Shutdown(context.Background())
		return err
	}
	// The debug address is out before the API's: whoever waits for the one line finds both.
	if cfg.DebugListen != "" {
		dbg, err := debugServer(cfg.DebugListen, stdout, log)
		if err != nil {
			return abandon(err)
		}
		defer dbg.Close()
	}
	if cfg.Remote.Listen != "" {
		ep, err := remoteDoor(cfg, eng, stdout, log)
		if err != nil {
			return abandon(err)
		}
		defer ep.Stop()
	}
	announce(stdout, ln, cfg, eng, log)
	return serveUntilDone(ctx, srv, ln, eng, cfg.ShutdownTimeout(), log)
}

// exportLastSpans exports the spans still held, within a few seconds; what it cannot export is
// logged.
func exportLastSpans(traces *tracing.Tracing, log *zap.Logger) {
	tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := traces.Shutdown(tctx); err != nil {
		log.Warn("spans not exported at shutdown", zap.String("event", "trace_export_failed"), zap.Error(err))
	}
}

// apiServer is the HTTP server of the API, with the timeouts and bounds the configuration sets.
func apiServer(cfg config.Config, eng *engine.Engine, log *zap.Logger, traces *tracing.Tracing) *http.Server {
	return &http.Server{
		Handler: httpapi.New(eng, httpapi.Options{Token: cfg.APIToken, Keys: eng.Keys(), MaxBodyBytes: cfg.MaxBodyBytes, Log: log,
			EvalReport: cfg.EvalReport, Tracing: traces}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.ReadTimeout(),
		WriteTimeout:      cfg.WriteTimeout(),
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// remoteDoor opens the remote listener the configuration asks for, warning when it is reachable beyond
// loopback without some of its protections, and prints its address.
func remoteDoor(cfg config.Config, eng *engine.Engine, stdout io.Writer, log *zap.Logger) (*remotedoor.Listener, error) {
	r := cfg.Remote
	if exposed := r.Exposed(cfg.APIToken.Set()); len(exposed) > 0 {
		// Without the token or TLS only when remote.insecure says so; without client certificates, anyone may connect.
		log.Warn("the remote listener is reachable beyond loopback without some of its protections",
			zap.String("event", "remote_insecure"), zap.String("address", r.Listen), zap.Strings("without", exposed))
	}
	opts := remotedoor.Options{Addr: r.Listen, Token: cfg.APIToken, Log: log, Refused: eng.Metrics().RemoteRefused,
		TLS: remotedoor.TLSFiles{Cert: r.TLSCert, Key: r.TLSKey, CA: r.TLSCA}, RedisPrefix: cfg.RedisPrefix}
	if shared := eng.Redis(); shared != nil {
		// The controllers sharing Redis take a captured request once between them, not once each.
		opts.Redis = shared
	}
	ep, err := remotedoor.Listen(eng, opts)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "remote endpoint on %s\n", ep.Addr())
	return ep, nil
}

// announce logs and prints where the API listens, then each live provider.
func announce(stdout io.Writer, ln net.Listener, cfg config.Config, eng *engine.Engine, log *zap.Logger) {
	log.Info("conclave listening", zap.String("event", "server_listening"), zap.String("address", "http://"+ln.Addr().String()),
		zap.Bool("auth", cfg.APIToken.Set()), zap.String("version", version))
	fmt.Fprintf(stdout, "conclave listening on http://%s\n", ln.Addr())
	for _, p := range eng.LiveProviders() {
		fmt.Fprintf(stdout, "  provider %-12s %-10s %4d models  %s\n", p.Name, p.Kind, p.Models, p.BaseURL)
	}
}

// serveUntilDone serves the API on ln until the server fails or ctx ends, then shuts down within
// timeout: the server stops accepting connections while the requests in flight finish, and the engine
// answers those still running near the end with 503, keeps their records, flushes them and stops the
// actors.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, eng *engine.Engine, timeout time.Duration, log *zap.Logger) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		_ = eng.Shutdown(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		log.Info("shutting down", zap.String("event", "shutdown"), zap.String("cause", context.Cause(ctx).Error()))
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Shutdown(sctx) }()
	err := eng.Shutdown(sctx)
	select {
	case serr := <-stopped:
		err = errors.Join(err, serr)
	case <-time.After(time.Second): // a handler still writing its 503: give it a moment, then close
		err = errors.Join(err, srv.Close())
	}
	<-served
	return err
}

// ServerGCPercent is the garbage collector's target for conclave serve unless GOGC says otherwise: the
// heap may grow to five times what is live before a collection. A server's live heap is small next to
// its churn (a request allocates tens of kilobytes and keeps a record of a few), so collecting at twice
// the live heap, Go's default, spent a tenth of the CPU marking the same records again.
// ServerMemoryLimit, unless GOMEMLIMIT says otherwise, makes collections come sooner once the heap
// nears it: a full memory store (256 MiB of records) does not let the heap grow five times over.
const (
	ServerGCPercent   = 400
	ServerMemoryLimit = 1 << 30
)

// tuneGC sets ServerGCPercent and ServerMemoryLimit unless the environment sets GOGC or GOMEMLIMIT.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(ServerGCPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(ServerMemoryLimit)
	}
}

// debugServer serves pprof on its own listener, apart from the API and its token: the configuration
// keeps it on loopback, and it is off unless asked for.
func debugServer(addr string, stdout io.Writer, log *zap.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("debug listener serving pprof", zap.String("event", "debug_listening"), zap.String("address", "http://"+ln.Addr().String()))
	fmt.Fprintf(stdout, "pprof on http://%s/debug/pprof/\n", ln.Addr())
	return srv, nil
}
