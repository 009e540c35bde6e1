package fleet

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/internal/adapters/ratelimit"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/core/resilience"
	"github.com/conclave-ai/conclave/messages"
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

// CallOf is the provider call a job asks for: its conversation, tools, output format and parameters
// (Ask), or else its system message and prompt.
func CallOf(job *messages.Job) providers.Call {
	call := providers.Call{RequestID: job.RequestId, KeyID: job.KeyId, JobID: job.JobId, Kind: job.Kind, Model: job.Model, UpstreamModel: job.UpstreamModel,
		Provider: job.Provider, MaxTokens: int(job.MaxTokens), Task: job.Task, Candidates: job.Candidates,
		Category: job.Category, Attempt: int(job.Attempt)}
	ask := job.GetAsk()
	if turns := ask.GetMessages(); len(turns) > 0 {
		call.Messages = make([]providers.Message, len(turns))
		for i, m := range turns {
			call.Messages[i] = messageOf(m)
		}
	} else {
		if job.System != "" {
			call.Messages = append(call.Messages, providers.Message{Role: "system", Content: job.System})
		}
		call.Messages = append(call.Messages, providers.Message{Role: "user", Content: job.Prompt})
	}
	if call.Task == "" {
		call.Task = job.Prompt
	}
	call.Params = ParamsOf(ask.GetSampling())
	if call.Params.Temperature == nil {
		call.Params.Temperature = job.Temperature
	}
	for _, t := range ask.GetTools() {
		call.Tools = append(call.Tools, providers.Tool{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(t.Parameters), Strict: t.Strict,
			CacheControl: t.CacheControl})
	}
	if c := ask.GetToolChoice(); c != nil {
		call.ToolChoice = &providers.ToolChoice{Mode: c.Mode, Name: c.Name}
	}
	switch f := ask.GetResponseFormat(); {
	case f != nil && f.Type != "" && f.Type != providers.FormatText:
		call.ResponseFormat = &providers.ResponseFormat{Type: f.Type, Name: f.Name, Schema: json.RawMessage(f.Schema), Strict: f.Strict}
	case job.ResponseSchema != "":
		call.ResponseFormat = &providers.ResponseFormat{Type: providers.FormatJSONSchema, Name: job.ResponseName, Schema: json.RawMessage(job.ResponseSchema), Strict: true}
	}
	return call
}

// JobOf is the job of a call, with the deadline it must meet: what travels to an agent, which makes
// the same call of it (CallOf).
func JobOf(call providers.Call, deadline time.Time) *messages.Job {
	job := &messages.Job{RequestId: call.RequestID, KeyId: call.KeyID, JobId: call.JobID, Kind: call.Kind, Model: call.Model, UpstreamModel: call.UpstreamModel,
		Provider: call.Provider, MaxTokens: int32(call.MaxTokens), Task: call.Task, Candidates: call.Candidates,
		Category: call.Category, Attempt: int32(call.Attempt), Deadline: timestamppb.New(deadline)}
	ask := &messages.Ask{Sampling: samplingOf(call.Params)}
	for _, m := range call.Messages {
		ask.Messages = append(ask.Messages, chatMessageOf(m))
	}
	for _, t := range call.Tools {
		ask.Tools = append(ask.Tools, &messages.Tool{Name: t.Name, Description: t.Description, Parameters: string(t.Parameters), Strict: t.Strict,
			CacheControl: t.CacheControl})
	}
	if c := call.ToolChoice; c != nil {
		ask.ToolChoice = &messages.ToolChoice{Mode: c.Mode, Name: c.Name}
	}
	if f := call.ResponseFormat; f != nil {
		ask.ResponseFormat = &messages.OutputFormat{Type: f.Type, Name: f.Name, Schema: string(f.Schema), Strict: f.Strict}
	}
	job.Ask = ask
	return job
}

// messageOf and chatMessageOf convert a turn between its message and its call form.
func messageOf(m *messages.ChatMessage) providers.Message {
	out := providers.Message{Role: m.Role, ToolCallID: m.ToolCallId, Name: m.Name, CacheControl: m.CacheControl}
	if len(m.Content) == 1 && m.Content[0].Type == messages.PartText {
		// A lone text's cache mark is its turn's: the turn has no other block.
		out.Content, out.CacheControl = m.Content[0].Text, cmp.Or(m.Content[0].CacheControl, m.CacheControl)
	} else {
		for _, p := range m.Content {
			out.Parts = append(out.Parts, providers.Part{Type: p.Type, Text: p.Text, ImageURL: p.ImageUrl, Detail: p.Detail, CacheControl: p.CacheControl})
		}
	}
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, providers.ToolCall{ID: c.Id, Name: c.Name, Arguments: c.Arguments})
	}
	return out
}

func chatMessageOf(m providers.Message) *messages.ChatMessage {
	out := &messages.ChatMessage{Role: m.Role, ToolCallId: m.ToolCallID, Name: m.Name, CacheControl: m.CacheControl}
	if m.Parts == nil {
		out.Content = []*messages.ContentPart{{Type: messages.PartText, Text: m.Content}}
	}
	for _, p := range m.Parts {
		out.Content = append(out.Content, &messages.ContentPart{Type: p.Type, Text: p.Text, ImageUrl: p.ImageURL, Detail: p.Detail, CacheControl: p.CacheControl})
	}
	out.ToolCalls = ToolCallsOf(m.ToolCalls)
	return out
}

// ToolCallsOf is the message form of a reply's tool calls.
func ToolCallsOf(calls []providers.ToolCall) []*messages.ToolCall {
	var out []*messages.ToolCall
	for _, c := range calls {
		out = append(out, &messages.ToolCall{Id: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return out
}

// ParamsOf and samplingOf convert the caller's parameters between their message and their call form.
func ParamsOf(s *messages.Sampling) providers.Params {
	if s == nil {
		return providers.Params{}
	}
	p := providers.Params{Temperature: s.Temperature, TopP: s.TopP, Stop: s.Stop, Seed: s.Seed, PresencePenalty: s.PresencePenalty,
		FrequencyPenalty: s.FrequencyPenalty, User: s.User, ParallelToolCalls: s.ParallelToolCalls, Logprobs: s.Logprobs}
	if s.TopLogprobs != nil {
		n := int(*s.TopLogprobs)
		p.TopLogprobs = &n
	}
	if len(s.LogitBias) > 0 {
		p.LogitBias = make(map[string]int, len(s.LogitBias))
		for k, v := range s.LogitBias {
			p.LogitBias[k] = int(v)
		}
	}
	return p
}

func samplingOf(p providers.Params) *messages.Sampling {
	s := &messages.Sampling{Temperature: p.Temperature, TopP: p.TopP, Stop: p.Stop, Seed: p.Seed, PresencePenalty: p.PresencePenalty,
		FrequencyPenalty: p.FrequencyPenalty, User: p.User, ParallelToolCalls: p.ParallelToolCalls, Logprobs: p.Logprobs}
	if p.TopLogprobs != nil {
		n := int32(*p.TopLogprobs)
		s.TopLogprobs = &n
	}
	if len(p.LogitBias) > 0 {
		s.LogitBias = make(map[string]int32, len(p.LogitBias))
		for k, v := range p.LogitBias {
			s.LogitBias[k] = int32(v)
		}
	}
	return s
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
		res.Ok, res.Text, res.ToolCalls = true, reply.Text, ToolCallsOf(reply.ToolCalls)
	}
	res.DroppedParameters, res.Logprobs = reply.Dropped, string(reply.Logprobs)
	if u := reply.Usage; u.InputTokens > 0 || u.OutputTokens > 0 {
		res.Usage = &messages.Usage{InputTokens: int32(u.InputTokens), OutputTokens: int32(u.OutputTokens), Estimated: u.Estimated,
			CacheReadTokens: int32(u.CacheReadTokens), CacheWriteTokens: int32(u.CacheWriteTokens)}
	}
	res.FinishReason, res.ServedModel, res.CostNanos, res.UpstreamRequestId = reply.FinishReason, reply.ServedModel, int64(reply.Cost), reply.UpstreamRequestID
	res.ProviderLatencyMs = ms(reply.Latency)
	return res
}

// ReplyOf is the reply, or the classified error, a result from an agent carries.
func ReplyOf(res *messages.JobResult) (providers.Reply, error) {
	reply := providers.Reply{Text: res.Text, FinishReason: res.FinishReason, ServedModel: res.ServedModel, Cost: money.USD(res.CostNanos),
		UpstreamRequestID: res.UpstreamRequestId, Latency: time.Duration(res.ProviderLatencyMs * float64(time.Millisecond)),
		Dropped: res.DroppedParameters}
	if res.Logprobs != "" {
		reply.Logprobs = json.RawMessage(res.Logprobs)
	}
	for _, c := range res.ToolCalls {
		reply.ToolCalls = append(reply.ToolCalls, providers.ToolCall{ID: c.Id, Name: c.Name, Arguments: c.Arguments})
	}
	if u := res.Usage; u != nil {
		reply.Usage = providers.Usage{InputTokens: int(u.InputTokens), OutputTokens: int(u.OutputTokens), Estimated: u.Estimated,
			CacheReadTokens: int(u.CacheReadTokens), CacheWriteTokens: int(u.CacheWriteTokens)}
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

// DeltaOf is the message of a streamed piece of a job's answer; PieceOf reads it back.
func DeltaOf(requestID, jobID string, p providers.Delta) *messages.Delta {
	d := &messages.Delta{RequestId: requestID, JobId: jobID, Text: p.Text}
	for _, c := range p.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, &messages.ToolCallDelta{Index: int32(c.Index), Id: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return d
}

// PieceOf is the piece a Delta carries.
func PieceOf(d *messages.Delta) providers.Delta {
	p := providers.Delta{Text: d.Text}
	for _, c := range d.ToolCalls {
		p.ToolCalls = append(p.ToolCalls, providers.ToolCallDelta{Index: int(c.Index), ID: c.Id, Name: c.Name, Arguments: c.Arguments})
	}
	return p
}
