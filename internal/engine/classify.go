package engine

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/conclave-ai/conclave/internal/core/classify"
	"github.com/conclave-ai/conclave/messages"
	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// modelClassifier asks a model (config classify.model) for the category of a task the local
// classifier is unsure of, within a time budget, and keeps its answers by the task's hash. The call is
// a direct call of Conclave's own: it has a record of its own (metadata purpose: classify, client
// request id: the request it classified for) and is charged to no key.
type modelClassifier struct {
	model  string
	budget time.Duration
	local  *classify.Classifier
	cache  *lru.Cache[[sha256.Size]byte, classify.Category]
	log    *zap.Logger
}

func newModelClassifier(model string, budget time.Duration, size int, local *classify.Classifier, log *zap.Logger) (*modelClassifier, error) {
	if model == "" {
		return nil, nil
	}
	cache, err := lru.New[[sha256.Size]byte, classify.Category](size)
	if err != nil {
		return nil, err
	}
	return &modelClassifier{model: model, budget: budget, local: local, cache: cache, log: log}, nil
}

// classifyPurpose marks the records of classifying calls.
var classifyPurpose = &structpb.Struct{Fields: map[string]*structpb.Value{"purpose": structpb.NewStringValue("classify")}}

// hint sets req's classified category when the request leaves classification to Conclave and the
// local classifier is unsure: from the cache, or from the model within the budget. Otherwise, or when
// the model fails or answers no category, req is left as it was and the local answer stands.
func (e *Engine) hint(ctx context.Context, req *messages.RouteRequest) {
	mc := e.classifying
	if mc == nil || req.Category != "" || req.Direct {
		return
	}
	local := mc.local.Classify(req.Task)
	if !local.LowConfidence {
		return
	}
	sum := sha256.Sum256([]byte(req.Task))
	if c, ok := mc.cache.Get(sum); ok {
		req.ClassifiedCategory, req.ClassifiedBy = string(c), mc.model
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, mc.budget)
	defer cancel()
	budget := mc.budget.Seconds()
	// Its tokens serve the caller's request: they are charged to the caller's key, as its calls are.
	call := &messages.RouteRequest{
		RequestId: uuid.NewString(), ClientRequestId: req.RequestId, KeyId: req.KeyId, Task: classify.ModelPrompt(req.Task),
		Models: []string{mc.model}, Direct: true, TimeoutSeconds: &budget, Metadata: classifyPurpose,
		Ask: &messages.Ask{Sampling: &messages.Sampling{Temperature: proto.Float64(0), MaxTokens: proto.Int32(16)}},
	}
	exec, err := e.route(ctx, call, nil)
	fields := []zap.Field{zap.String("request_id", req.RequestId), zap.String("model", mc.model), zap.String("local", string(local.Best)),
		zap.Float64("confidence", local.Confidence), zap.Duration("took", time.Since(start))}
	switch {
	case err != nil:
		e.log.Warn("the classifying model did not answer", append(fields, zap.String("event", "classify_model_failed"), zap.Error(err))...)
	case exec.Error != nil:
		e.log.Warn("the classifying model did not answer", append(fields, zap.String("event", "classify_model_failed"),
			zap.String("code", exec.Error.Code), zap.String("call_id", exec.RequestId))...)
	default:
		c, ok := classify.ParseModelAnswer(exec.Answer)
		if !ok {
			e.log.Warn("the classifying model named no category", append(fields, zap.String("event", "classify_model_failed"),
				zap.String("code", "no_category"), zap.String("call_id", exec.RequestId))...)
			return
		}
		mc.cache.Add(sum, c)
		req.ClassifiedCategory, req.ClassifiedBy = string(c), mc.model
		if ce := e.log.Check(zap.DebugLevel, "task classified by a model"); ce != nil {
			ce.Write(append(fields, zap.String("event", "classified_by_model"), zap.String("category", string(c)), zap.String("call_id", exec.RequestId))...)
		}
	}
}
