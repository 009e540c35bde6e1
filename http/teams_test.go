// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as keys_test.go.

//go:build !fuzz

package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conclave-ai/conclave/internal/adapters/alerts"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/engine"
	"github.com/conclave-ai/conclave/internal/platform/config"
)

// createdTeam is a team as the admin API shows it.
type createdTeam struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Status       string     `json:"status"`
	BudgetUSD    *money.USD `json:"budget_usd"`
	BudgetPeriod string     `json:"budget_period"`
	RPM          int        `json:"rpm"`
	Models       []string   `json:"models"`
	Spend        struct {
		SpendUSD money.USD `json:"spend_usd"`
		TotalUSD money.USD `json:"total_usd"`
	} `json:"spend"`
	Usage struct {
		Requests int `json:"requests"`
	} `json:"usage"`
}

func (tb *testbed) createTeam(body map[string]any) createdTeam {
	tb.t.Helper()
	var team createdTeam
	resp, raw := tb.do(http.MethodPost, "/admin/teams", body, &team)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/admin/teams/"+team.ID {
		tb.t.Fatalf("POST /admin/teams: %d %s", resp.StatusCode, raw)
	}
	return team
}

func (tb *testbed) team(id string) createdTeam {
	tb.t.Helper()
	var team createdTeam
	if resp, raw := tb.do(http.MethodGet, "/admin/teams/"+id, nil, &team); resp.StatusCode != http.StatusOK {
		tb.t.Fatalf("GET /admin/teams/%s: %d %s", id, resp.StatusCode, raw)
	}
	return team
}

func (tb *testbed) key(id string) createdKey {
	tb.t.Helper()
	var k createdKey
	if resp, raw := tb.do(http.MethodGet, "/admin/keys/"+id, nil, &k); resp.StatusCode != http.StatusOK {
		tb.t.Fatalf("GET /admin/keys/%s: %d %s", id, resp.StatusCode, raw)
	}
	return k
}

// teamSpendIs checks a team's spend by model and by day: its total, one model (budgetModel) and one
// day (today), and at least the requests answered (refused ones count too).
func teamSpendIs(tb *testbed, id string, total money.USD, answered int) {
	tb.t.Helper()
	for _, by := range []string{"model", "day"} {
		var spend struct {
			TeamID   string    `json:"team_id"`
			TotalUSD money.USD `json:"total_usd"`
			Groups   []struct {
				Model    string `json:"model"`
				Day      string `json:"day"`
				Requests int    `json:"requests"`
			} `json:"groups"`
		}
		tb.do(http.MethodGet, "/admin/teams/"+id+"/spend?group_by="+by, nil, &spend)
		if spend.TeamID != id || spend.TotalUSD != total || len(spend.Groups) != 1 || spend.Groups[0].Requests < answered ||
			(by == "model" && spend.Groups[0].Model != budgetModel) || (by == "day" && spend.Groups[0].Day != time.Now().UTC().Format(time.DateOnly)) {
			tb.t.Fatalf("spend by %s: %+v, want $%s and %d requests", by, spend, total, answered)
		}
	}
}

// TestTheAdminAPIKeepsTeams: a team is made, read, listed, changed and deleted; its body is judged
// field by field; a key joins a team that exists, and a team is kept while a usable key belongs to it.
func TestTheAdminAPIKeepsTeams(t *testing.T) {
	tb := newTestbed(t, withAdmin)
	if resp, raw := tb.do(http.MethodPost, "/admin/teams", map[string]any{"budget_usd": -1, "rpm": "x", "expires_at": "2030-01-01T00:00:00Z"}, nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(raw), `"name"`) || !strings.Contains(string(raw), `"budget_usd"`) || !strings.Contains(string(raw), `"rpm"`) ||
		!strings.Contains(string(raw), `"expires_at"`) {
		t.Fatalf("a bad team: %d %s", resp.StatusCode, raw)
	}
	team := tb.createTeam(map[string]any{"name": "research", "budget_usd": 10, "budget_period": "30d", "rpm": 60, "models": []string{"openai/*"}})
	if team.Name != "research" || *team.BudgetUSD != 10*money.Dollar || team.BudgetPeriod != "30d" || team.RPM != 60 || team.Status != "active" {
		t.Fatalf("created %+v", team)
	}
	var changed createdTeam
	if resp, raw := tb.do(http.MethodPatch, "/admin/teams/"+team.ID, map[string]any{"rpm": nil, "budget_usd": nil}, &changed); resp.StatusCode != http.StatusOK ||
		changed.RPM != 0 || changed.BudgetUSD != nil || changed.Name != "research" {
		t.Fatalf("changed %d %s", resp.StatusCode, raw)
	}
	var list struct {
		Teams []createdTeam `json:"teams"`
	}
	if tb.do(http.MethodGet, "/admin/teams", nil, &list); len(list.Teams) != 1 || list.Teams[0].ID != team.ID {
		t.Fatalf("listed %+v", list)
	}
	if resp, raw := tb.do(http.MethodPost, "/admin/keys", map[string]any{"name": "lost", "team_id": "team_nobody"}, nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(raw), "team_id") {
		t.Fatalf("a key in a team that is not there: %d %s", resp.StatusCode, raw)
	}
	k := tb.createKey(map[string]any{"name": "member", "team_id": team.ID})
	if resp, raw := tb.do(http.MethodDelete, "/admin/teams/"+team.ID, nil, nil); resp.StatusCode != http.StatusConflict || errorCode(t, raw) != "team_in_use" ||
		!strings.Contains(string(raw), k.ID) {
		t.Fatalf("a team a key belongs to: %d %s", resp.StatusCode, raw)
	}
	var moved struct {
		TeamID *string `json:"team_id"`
	}
	if resp, raw := tb.do(http.MethodPatch, "/admin/keys/"+k.ID, map[string]any{"team_id": nil}, &moved); resp.StatusCode != http.StatusOK || moved.TeamID != nil {
		t.Fatalf("the key leaves the team: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := tb.do(http.MethodDelete, "/admin/teams/"+team.ID, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := tb.do(http.MethodGet, "/admin/teams/"+team.ID, nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a deleted team: %d", resp.StatusCode)
	}
	if resp, _ := tb.as(k.Key, http.MethodGet, "/admin/teams", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a key reads the teams: %d", resp.StatusCode)
	}
}

// TestATeamHoldsItsKeysTogether, on the embedded default: two keys of a team spend the team's budget
// together, each within its own; the team's spend is theirs, by model and by day; the team's crossing
// of a budget alert is told with its team_id; and the team's models bound what its keys call and see.
func TestATeamHoldsItsKeysTogether(t *testing.T) {
	var mu sync.Mutex
	var told []alerts.Alert
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var a alerts.Alert
		_ = json.Unmarshal(body, &a)
		mu.Lock()
		told = append(told, a)
		mu.Unlock()
	}))
	defer hook.Close()
	tb := newTestbed(t, func(c *config.Config) {
		withAdmin(c)
		c.Alerts = config.Alerts{WebhookURL: hook.URL}
	}, func(_ *config.Config, o *engine.Options) { o.BudgetCheck = 20 * time.Millisecond })
	budget := money.Dollar / 4000
	team := tb.createTeam(map[string]any{"name": "nightly", "budget_usd": budget, "budget_period": "1d", "budget_alerts": []float64{0.5},
		"models": []string{"openai/*"}})
	a := tb.createKey(map[string]any{"name": "a", "team_id": team.ID, "budget_usd": 1})
	b := tb.createKey(map[string]any{"name": "b", "team_id": team.ID})
	answered := 0
	for i := 0; ; i++ {
		k := []createdKey{a, b}[i%2]
		status, _, _, raw := directCall(tb, k.Key)
		if status == http.StatusTooManyRequests {
			if errorCode(t, raw) != "budget_exceeded" || !strings.Contains(errorMessage(t, raw), "team") {
				t.Fatalf("the refusal names the team: %s", raw)
			}
			if status, _, _, raw := directCall(tb, []createdKey{a, b}[(i+1)%2].Key); status != http.StatusTooManyRequests || errorCode(t, raw) != "budget_exceeded" {
				t.Fatalf("the other key, after the team's budget: %d %s", status, raw)
			}
			break
		}
		if status != http.StatusOK || i == 200 {
			t.Fatalf("request %d: %d %s", i, status, raw)
		}
		answered++
	}
	shown, ka, kb := tb.team(team.ID), tb.key(a.ID), tb.key(b.ID)
	if answered < 2 || shown.Spend.SpendUSD > budget || shown.Spend.SpendUSD != ka.Spend.SpendUSD+kb.Spend.SpendUSD || ka.Spend.SpendUSD == 0 ||
		kb.Spend.SpendUSD == 0 {
		t.Fatalf("%d answered; the team spent %s of %s, its keys %s and %s", answered, shown.Spend.SpendUSD, budget, ka.Spend.SpendUSD, kb.Spend.SpendUSD)
	}
	teamSpendIs(tb, team.ID, shown.Spend.SpendUSD, answered)
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(told) > 0 })
	mu.Lock()
	if a := told[0]; a.TeamID != team.ID || a.KeyID != "" || a.Threshold != 0.5 || a.BudgetUSD != budget {
		t.Errorf("the team's alert: %+v", a)
	}
	mu.Unlock()

	// The team's models bound its keys', which allow every model.
	calls := tb.modelCalls()
	resp, raw := tb.as(a.Key, http.MethodPost, "/v1/chat/completions", map[string]any{"model": groqModels[0],
		"messages": []map[string]any{{"role": "user", "content": mcq}}})
	if resp.StatusCode != http.StatusForbidden || errorCode(t, raw) != "model_not_allowed" || !strings.Contains(string(raw), "team's models") {
		t.Fatalf("a model outside the team's: %d %s", resp.StatusCode, raw)
	}
	if tb.modelCalls() != calls {
		t.Fatal("a refused model was called")
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_, raw = tb.as(b.Key, http.MethodGet, "/v1/models", nil)
	if json.Unmarshal(raw, &list); len(list.Data) == 0 {
		t.Fatalf("no models: %s", raw)
	}
	for _, m := range list.Data {
		if !strings.HasPrefix(m.ID, "openai/") {
			t.Errorf("a key of an openai/* team sees %s", m.ID)
		}
	}
}

// TestControllersShareTeams: two controllers sharing PostgreSQL and Redis hold a team's keys to its
// limits and budget together, whichever controller each request reaches; a change of the team on one
// reaches the other; and the books balance, teams included.
func TestControllersShareTeams(t *testing.T) {
	a, b, db := sharedControllers(t)

	// The team's requests per minute count its keys' requests on both controllers.
	limited := a.createTeam(map[string]any{"name": "shared-rpm", "rpm": 3})
	k1 := a.createKey(map[string]any{"name": "one", "team_id": limited.ID})
	k2 := b.createKey(map[string]any{"name": "two", "team_id": limited.ID})
	for i, c := range []struct {
		tb  *testbed
		key string
	}{{a, k1.Key}, {b, k2.Key}, {b, k1.Key}} {
		if resp, raw := c.tb.as(c.key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq, "workers": 1, "min_responses": 1}); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, raw)
		}
	}
	resp, raw := a.as(k2.Key, http.MethodPost, "/route-thompson", map[string]any{"task": mcq})
	if resp.StatusCode != http.StatusTooManyRequests || errorCode(t, raw) != "rate_limit_exceeded" || !strings.Contains(errorMessage(t, raw), "team's limit of 3 requests per minute") {
		t.Fatalf("the fourth request of the team: %d %s", resp.StatusCode, raw)
	}
	if u := b.team(limited.ID).Usage.Requests; u != 3 {
		t.Errorf("the team's requests in use: %d", u)
	}

	// One team budget over two keys and two controllers: the team never spends past it.
	budget := money.Dollar / 4000
	team := b.createTeam(map[string]any{"name": "shared-budget", "budget_usd": budget})
	x := a.createKey(map[string]any{"name": "x", "team_id": team.ID})
	y := b.createKey(map[string]any{"name": "y", "team_id": team.ID, "budget_usd": 1})
	answered := 0
	for i := 0; ; i++ {
		tb, k := []*testbed{a, b}[i%2], []createdKey{x, y, y, x}[i%4]
		status, _, _, raw := directCall(tb, k.Key)
		if status == http.StatusTooManyRequests && errorCode(t, raw) == "budget_exceeded" {
			break
		}
		if status != http.StatusOK || i == 200 {
			t.Fatalf("request %d: %d %s", i, status, raw)
		}
		answered++
	}
	var spent createdTeam
	waitFor(t, func() bool {
		spent = a.team(team.ID)
		if spent.Spend.SpendUSD > budget {
			t.Fatalf("the team spent %s of %s", spent.Spend.SpendUSD, budget)
		}
		return spent.Spend.SpendUSD == a.key(x.ID).Spend.SpendUSD+a.key(y.ID).Spend.SpendUSD
	})
	if answered < 2 || spent.Spend.SpendUSD == 0 {
		t.Fatalf("%d answered, the team spent %s", answered, spent.Spend.SpendUSD)
	}
	t.Logf("two keys on two controllers: %d calls answered, the team spent $%s of $%s", answered, spent.Spend.SpendUSD, budget)
	teamSpendIs(b, team.ID, spent.Spend.SpendUSD, answered)

	// The team's budget raised on a reaches b: its keys are served there again.
	if resp, raw := a.do(http.MethodPatch, "/admin/teams/"+team.ID, map[string]any{"budget_usd": 1}, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("raise: %d %s", resp.StatusCode, raw)
	}
	raised := time.Now()
	waitFor(t, func() bool { status, _, _, _ := directCall(b, x.Key); return status == http.StatusOK })
	t.Logf("the raised budget served on the other controller after %v", time.Since(raised).Round(time.Millisecond))
	checkBooks(t, db)
}
