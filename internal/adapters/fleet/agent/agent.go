// Package agent is the worker agent (`conclave worker`) that runs on a worker host behind SSH: it reads
// jobs from its input as length-prefixed frames, calls their providers with the adapters of package
// providers (the simulated provider included, so a fleet can be tried without keys), and writes each
// result back, many jobs at once; a cancel frame stops a job nobody waits for. Keys arrive inside the
// jobs and live only in memory: nothing the agent logs or returns carries one.
package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/core/catalog"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/internal/platform/secret"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
)

// DefaultJobTimeout bounds a job that arrives without a deadline.
const DefaultJobTimeout = 10 * time.Minute

// Agent runs jobs. It is safe for one Serve at a time.
type Agent struct {
	Version string
	Log     *zap.Logger

	mu       sync.Mutex
	client   *http.Client
	adapters map[string]providers.Backend // by kind and provider
	sim      *providers.Sim
}

// New returns an agent.
func New(version string, log *zap.Logger) *Agent {
	if log == nil {
		log = zap.NewNop()
	}
	return &Agent{Version: version, Log: log, client: providers.NewHTTPClient(), adapters: map[string]providers.Backend{}}
}

// Serve reads frames from in and writes results to out until in ends or ctx does. At the end of its
// input it waits for the jobs that still run (one exec per job ends its input after the job), and at
// the end of ctx it cancels them.
func (a *Agent) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	w := &writer{w: out}
	if err := w.write(&messages.AgentFrame{Body: &messages.AgentFrame_Hello{Hello: &messages.AgentHello{Version: a.Version}}}); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	ctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	var wg sync.WaitGroup
	var mu sync.Mutex
	running := map[string]context.CancelFunc{}
	r := bufio.NewReaderSize(in, 64<<10)
	var readErr error
	for {
		f, err := fleet.ReadFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = fmt.Errorf("agent: %w", err)
			}
			break
		}
		switch b := f.Body.(type) {
		case *messages.AgentFrame_Setup:
			if err := a.setup(b.Setup); err != nil {
				a.Log.Warn("agent setup refused", zap.String("event", "agent_setup_failed"), zap.Error(err))
			}
		case *messages.AgentFrame_Job:
			job := b.Job.GetJob()
			if job == nil {
				continue
			}
			jctx, cancel := a.jobContext(ctx, job)
			mu.Lock()
			running[job.JobId] = cancel
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					cancel()
					mu.Lock()
					delete(running, job.JobId)
					mu.Unlock()
				}()
				var onDelta func(providers.Delta)
				if job.Stream { // each piece goes out as it comes, before the result
					onDelta = func(d providers.Delta) {
						_ = w.write(&messages.AgentFrame{Body: &messages.AgentFrame_Delta{Delta: fleet.DeltaOf(job.RequestId, job.JobId, d)}})
					}
				}
				res := a.run(jctx, b.Job, onDelta)
				if err := w.write(&messages.AgentFrame{Body: &messages.AgentFrame_Result{Result: res}}); err != nil {
					a.Log.Warn("agent could not return a result", zap.String("event", "agent_write_failed"), zap.String("job_id", job.JobId), zap.Error(err))
				}
			})
		case *messages.AgentFrame_Cancel:
			mu.Lock()
			if cancel, ok := running[b.Cancel.GetJobId()]; ok {
				cancel()
			}
			mu.Unlock()
		}
	}
	wg.Wait()
	return readErr
}

// jobContext is a job's deadline: its own, cut by its timeout from now.
func (a *Agent) jobContext(ctx context.Context, job *messages.Job) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(DefaultJobTimeout)
	if job.Deadline != nil {
		deadline = job.Deadline.AsTime()
	}
	if t := time.Duration(job.TimeoutSeconds * float64(time.Second)); t > 0 && time.Now().Add(t).Before(deadline) {
		deadline = time.Now().Add(t)
	}
	return context.WithDeadline(ctx, deadline)
}

// setup configures the simulated provider.
func (a *Agent) setup(s *messages.AgentSetup) error {
	var cfg providers.SimConfig
	if s.GetSim() != "" {
		if err := json.Unmarshal([]byte(s.GetSim()), &cfg); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	cat, err := catalog.Embedded()
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.sim = providers.NewSim(cat.All(), cfg)
	a.mu.Unlock()
	return nil
}

// backend returns the adapter of a job's provider.
func (a *Agent) backend(kind, provider string) (providers.Backend, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if kind == providers.KindSimulated {
		if a.sim == nil {
			cat, err := catalog.Embedded()
			if err != nil {
				return nil, err
			}
			a.sim = providers.NewSim(cat.All(), providers.SimConfig{})
		}
		return a.sim, nil
	}
	key := kind + "/" + provider
	if b, ok := a.adapters[key]; ok {
		return b, nil
	}
	b, err := providers.NewAdapter(kind, provider, a.client)
	if err != nil {
		return nil, err
	}
	a.adapters[key] = b
	return b, nil
}

// run calls a job's provider, streaming to onDelta when it is set, and returns its result.
func (a *Agent) run(ctx context.Context, j *messages.AgentJob, onDelta func(providers.Delta)) *messages.JobResult {
	job := j.GetJob()
	res := &messages.JobResult{JobId: job.JobId, RequestId: job.RequestId, Kind: job.Kind, Model: job.Model, Provider: job.Provider, Attempt: job.Attempt}
	b, err := a.backend(j.GetKind(), job.Provider)
	if err != nil {
		return fleet.ResultOf(res, providers.Reply{}, &resilience.Error{Kind: resilience.Internal, Provider: job.Provider, Model: job.Model, Err: err}, 0)
	}
	call := fleet.CallOf(job)
	call.BaseURL, call.Key = j.GetBaseUrl(), secret.String(j.GetApiKey())
	began := time.Now()
	reply, err := safely(ctx, b, call, onDelta)
	reply.Latency = time.Since(began)
	return fleet.ResultOf(res, reply, err, reply.Latency)
}

// safely calls a backend (streaming when onDelta is set), turning a panic into an internal error.
func safely(ctx context.Context, b providers.Backend, call providers.Call, onDelta func(providers.Delta)) (reply providers.Reply, err error) {
	defer func() {
		if v := recover(); v != nil {
			reply, err = providers.Reply{}, &resilience.Error{Kind: resilience.Internal, Model: call.Model, Err: fmt.Errorf("panic in the call: %v", v)}
		}
	}()
	if onDelta != nil {
		return providers.Stream(ctx, b, call, onDelta)
	}
	return b.Complete(ctx, call)
}

// writer serialises frames onto one output.
type writer struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *writer) write(f *messages.AgentFrame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fleet.WriteFrame(w.w, f)
}
