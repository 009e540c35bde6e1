package actors

import (
	"fmt"
	"github.com/conclave-ai/conclave/internal/arms"
	"strings"
	"sync"
	"testing"

	"github.com/conclave-ai/conclave/internal/core/accuracy"
	"github.com/conclave-ai/conclave/internal/core/bandit"
	"github.com/conclave-ai/conclave/internal/core/catalog"
)

func candidateIDs(b *arms.Board, category string) string {
	buf := b.Candidates(category)
	defer b.Release(buf)
	var ids []string
	for _, c := range *buf {
		ids = append(ids, c.Model)
	}
	return strings.Join(ids, ",")
}

func TestTheBoardFollowsTheModelSet(t *testing.T) {
	a, b, c := catalog.Model{ID: "a", Provider: "p"}, catalog.Model{ID: "b", Provider: "p"}, catalog.Model{ID: "c", Provider: "p"}
	board := arms.NewBoard([]catalog.Model{a, b}, []string{"general"}, bandit.DefaultPrior, 0)
	learned := bandit.NewArm("b", "general", bandit.DefaultPrior).Update(1, bandit.UpdateConfig{})
	board.Publish(learned)

	board.SetModels([]catalog.Model{a, c})
	if got := candidateIDs(board, "general"); got != "a,c" {
		t.Fatalf("candidates %s after b left and c joined", got)
	}
	if arm := board.Arm("general", "c"); arm.Alpha != bandit.DefaultPrior.Alpha || arm.Beta != bandit.DefaultPrior.Beta {
		t.Fatalf("a new model's arm %+v is not at the prior", arm)
	}
	// A late reward for the model that left is kept for its return.
	board.Publish(learned.Update(1, bandit.UpdateConfig{}))
	board.SetModels([]catalog.Model{a, b, c})
	buf := board.Candidates("general")
	defer board.Release(buf)
	if got := (*buf)[1]; got.Model != "b" || got.Pulls != 2 {
		t.Fatalf("b came back as %+v", got)
	}
}

// An embeddings model answers no task: it has no arm, so no selection sees it.
func TestTheBoardLeavesEmbeddingsModelsOut(t *testing.T) {
	models := []catalog.Model{{ID: "a", Provider: "p"}, {ID: "e", Provider: "p", Capabilities: []string{catalog.Embeddings}}}
	board := arms.NewBoard(models, []string{"general"}, bandit.DefaultPrior, 0)
	if got := candidateIDs(board, "general"); got != "a" {
		t.Fatalf("candidates %s", got)
	}
	board.SetModels(append(models, catalog.Model{ID: "b", Provider: "p"}))
	if got := candidateIDs(board, "general"); got != "a,b" || len(board.Models()) != 2 {
		t.Fatalf("candidates %s, models %v", got, board.Models())
	}
	if len(models) != 2 || models[1].ID != "e" {
		t.Fatalf("the caller's models changed: %v", models)
	}
}

func TestTheBoardChangesUnderReaders(t *testing.T) {
	models := []catalog.Model{{ID: "a", Provider: "p"}, {ID: "b", Provider: "p"}}
	board := arms.NewBoard(models, []string{"general"}, bandit.DefaultPrior, arms.DefaultSharing)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 500 {
				buf := board.Candidates("general")
				board.Release(buf)
				board.Publish(bandit.NewArm("a", "general", bandit.DefaultPrior))
			}
		})
	}
	for i := range 200 {
		board.SetModels(models[:1+i%2])
	}
	wg.Wait()
}

func TestTheBoardAnchorsOnlyWhatTruthAnchored(t *testing.T) {
	board := arms.NewBoard([]catalog.Model{{ID: "a", Provider: "p"}}, []string{"general"}, bandit.DefaultPrior, 0)
	if board.Anchored("general", "a") {
		t.Fatal("anchored without an estimator")
	}
	est := accuracy.New(accuracy.Config{})
	votes := []accuracy.Vote{{Model: "a", Group: 0}, {Model: "b", Group: 1}}
	for i := range accuracy.LabelSharing {
		id := fmt.Sprint(i)
		est.ObserveRequest("general", id, votes)
		est.Confirm("general", id, votes, []bool{true, false})
	}
	board.SetEstimates(est.View())
	if !board.Anchored("general", "a") || board.Anchored("code_review", "a") || board.Anchored("general", "c") {
		t.Fatal("anchored where no truth was given, or not where it was")
	}
}
