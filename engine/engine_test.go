package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/config"
	"github.com/conclave-ai/conclave/messages"
	"github.com/conclave-ai/conclave/providers"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestSmoke(t *testing.T) {
	cfg := config.Default()
	cfg.Sim.LatencyScale = 0
	cfg.Sim.Faults = providers.Fault{}
	e, err := New(Options{Config: cfg, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	for i := 0; i < 3; i++ {
		exec, err := e.Route(context.Background(), &messages.RouteRequest{RequestId: fmt.Sprint("r", i), Task: "Review this Go function for bugs: func f() {}", ReceivedAt: timestamppb.New(time.Now())})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("status %d answer %.60q results %d decision %v phases %v", exec.StatusCode, exec.Answer, len(exec.Results), exec.Decision, exec.Phases)
	}
}

