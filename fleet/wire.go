package fleet

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"github.com/conclave-ai/conclave/ratelimit"
	"github.com/conclave-ai/conclave/resilience"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxFrameBytes bounds one frame between a controller and an agent.
const MaxFrameBytes = 64 << 20

// ErrFrameTooLarge is returned for a frame longer than MaxFrameBytes.
var ErrFrameTooLarge = errors.New("frame too large")

// WriteFrame writes one length-prefixed frame. Writers must not interleave frames.
func WriteFrame(w io.Writer, f *messages.AgentFrame) error {
	raw, err := proto.Marshal(f)
	if err != nil {
		return err
	}
	if len(raw) > MaxFrameBytes {
		return ErrFrameTooLarge
	}
	buf := make([]byte, 4+len(raw))
	binary.BigEndian.PutUint32(buf, uint32(len(raw)))
	copy(buf[4:], raw)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame.
func ReadFrame(r *bufio.Reader) (*messages.AgentFrame, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > MaxFrameBytes {
		return nil, ErrFrameTooLarge
	}
	// Read as the bytes come rather than allocating what the header claims: a peer announcing 64 MiB
	// and sending nothing costs nothing.
	raw, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, fmt.Errorf("frame cut short: %w", err)
	}
	if len(raw) != int(n) {
		return nil, fmt.Errorf("frame cut short: %w", io.ErrUnexpectedEOF)
	}
	f := &messages.AgentFrame{}
	if err := proto.Unmarshal(raw, f); err != nil {
		return nil, fmt.Errorf("frame: %w", err)
	}
	return f, nil
}

// CallOf is the provider call a job asks for.
func CallOf(job *messages.Job) providers.Call {
	call := providers.Call{RequestID: job.RequestId, JobID: job.JobId, Kind: job.Kind, Model: job.Model, UpstreamModel: job.UpstreamModel,
		Provider: job.Provider, MaxTokens: int(job.MaxTokens), Temperature: job.Temperature, Task: job.Task, Candidates: job.Candidates,
		Category: job.Category, Attempt: int(job.Attempt)}
	if job.System != "" {
		call.Messages = append(call.Messages, providers.Message{Role: "system", Content: job.System})
	}
	call.Messages = append(call.Messages, providers.Message{Role: "user", Content: job.Prompt})
	if call.Task == "" {
		call.Task = job.Prompt
	}
	if job.ResponseSchema != "" {
		call.ResponseFormat = &providers.ResponseFormat{Name: job.ResponseName, Schema: json.RawMessage(job.ResponseSchema)}
	}
	return call
}

// JobOf is the job of a call, with the deadline it must meet: what travels to an agent.
func JobOf(call providers.Call, deadline time.Time) *messages.Job {
	job := &messages.Job{RequestId: call.RequestID, JobId: call.JobID, Kind: call.Kind, Model: call.Model, UpstreamModel: call.UpstreamModel,
		Provider: call.Provider, MaxTokens: int32(call.MaxTokens), Temperature: call.Temperature, Task: call.Task, Candidates: call.Candidates,
		Category: call.Category, Attempt: int32(call.Attempt), Deadline: timestamppb.New(deadline)}
	for _, m := range call.Messages {
		switch m.Role {
		case "system":
			job.System = m.Content
		default:
			job.Prompt = m.Content
		}
	}
	if f := call.ResponseFormat; f != nil {
		job.ResponseSchema, job.ResponseName = string(f.Schema), f.Name
	}
	return job
}

// ResultOf fills a job's result from its call's reply or error.
func ResultOf(res *messages.JobResult, reply providers.Reply, err error, latency time.Duration) *messages.JobResult {
	res.LatencyMs = ms(latency)
	if reply.RateLimit != nil {
		res.RateLimit = RateLimitInfo(reply.RateLimit)
	}
	if err != nil {
		res.ErrorKind, res.ErrorMessage = string(ClassifyError(err)), err.Error()
		res.ErrorScope = resilience.ScopeOf(err).String()
		var re *resilience.Error
		if errors.As(err, &re) {
			res.HttpStatus = int32(re.Status)
			res.RetryAfterSeconds = re.RetryAfter.Seconds()
		}
	} else {
		res.Ok, res.Text = true, reply.Text
	}
	if u := reply.Usage; u.InputTokens > 0 || u.OutputTokens > 0 {
		res.Usage = &messages.Usage{InputTokens: int32(u.InputTokens), OutputTokens: int32(u.OutputTokens)}
	}
	res.FinishReason, res.ServedModel, res.Cost, res.UpstreamRequestId = reply.FinishReason, reply.ServedModel, reply.Cost, reply.UpstreamRequestID
	res.ProviderLatencyMs = ms(reply.Latency)
	return res
}

// ReplyOf is the reply, or the classified error, a result from an agent carries.
func ReplyOf(res *messages.JobResult) (providers.Reply, error) {
	reply := providers.Reply{Text: res.Text, FinishReason: res.FinishReason, ServedModel: res.ServedModel, Cost: res.Cost,
		UpstreamRequestID: res.UpstreamRequestId, Latency: time.Duration(res.ProviderLatencyMs * float64(time.Millisecond))}
	if u := res.Usage; u != nil {
		reply.Usage = providers.Usage{InputTokens: int(u.InputTokens), OutputTokens: int(u.OutputTokens)}
	}
	if rl := res.RateLimit; rl != nil {
		u := UpstreamOf(rl)
		reply.RateLimit = &u
	}
	if res.Ok {
		return reply, nil
	}
	return reply, &resilience.Error{Kind: resilience.Kind(res.ErrorKind), Scope: resilience.ParseScope(res.ErrorScope), Provider: res.Provider,
		Model: res.Model, Status: int(res.HttpStatus), RetryAfter: time.Duration(res.RetryAfterSeconds * float64(time.Second)),
		Err: errors.New(res.ErrorMessage)}
}

// RateLimitInfo is a provider's word on its limits as a message.
func RateLimitInfo(u *ratelimit.Upstream) *messages.RateLimitInfo {
	return &messages.RateLimitInfo{
		LimitRequests: u.LimitRequests, RemainingRequests: u.RemainingRequests,
		LimitTokens: u.LimitTokens, RemainingTokens: u.RemainingTokens,
		ResetRequestsSeconds: u.ResetRequests.Seconds(), ResetTokensSeconds: u.ResetTokens.Seconds(), PerModel: u.PerModel,
	}
}

// UpstreamOf reads a provider's word on its limits from a message.
func UpstreamOf(rl *messages.RateLimitInfo) ratelimit.Upstream {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return ratelimit.Upstream{
		RemainingRequests: rl.RemainingRequests, RemainingTokens: rl.RemainingTokens,
		LimitRequests: rl.LimitRequests, LimitTokens: rl.LimitTokens,
		ResetRequests: sec(rl.ResetRequestsSeconds), ResetTokens: sec(rl.ResetTokensSeconds), PerModel: rl.PerModel,
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
