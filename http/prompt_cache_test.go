// The fuzzing build (make fuzz, -tags fuzz) leaves this file out, as keys_test.go.

//go:build !fuzz

package httpapi_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/conclave-ai/conclave/internal/adapters/providers/providertest"
	"github.com/conclave-ai/conclave/internal/core/money"
	"github.com/conclave-ai/conclave/internal/platform/config"
)

// TestCachedInputIsRecordedAndPricedInEveryWireFormat asks a model of each wire format whose upstream
// read 2,000 of the call's 3,500 input tokens from its prompt cache (and, in Anthropic's, wrote 1,000
// more to it): the answer reports them as its door does, the record keeps them, and the call is
// charged each kind of token at its price (price_cache_read, price_cache_write), to the nano-dollar;
// the key's spend is the sum and the books balance in PostgreSQL.
func TestCachedInputIsRecordedAndPricedInEveryWireFormat(t *testing.T) {
	db := newDatabase(t)
	cached := config.ProviderModel{Context: 32768, PriceIn: price("0.8"), PriceOut: price("4"), PriceCacheRead: price("0.08"),
		PriceCacheWrite: price("1"), Capabilities: []string{"chat"}}
	model := func(id string) []config.ProviderModel { m := cached; m.ID = id; return []config.ProviderModel{m} }
	u := newUpstreams(t, func(c *config.Config) {
		withAdmin(c)
		withDatabase(db.url, filepath.Join(t.TempDir(), "spool"))(c)
		local, anthropic, gemini := c.Providers["local"], c.Providers["anthropic"], c.Providers["gemini"]
		local.Models = append(local.Models, model("qwen-cache")...)
		anthropic.Models, gemini.Models = model("claude-cache"), model("gemini-cache")
		c.Providers["local"], c.Providers["anthropic"], c.Providers["gemini"] = local, anthropic, gemini
	})
	k := u.createKey(map[string]any{"name": "cached", "budget_usd": 1})
	var spent money.USD
	for _, tc := range []struct {
		format, model string
		upstream      *providertest.Server
		written       int32
		// cost: 1,500 or 500 plain input tokens at $0.80, 2,000 read at $0.08, 1,000 written at $1.00
		// and 100 output tokens at $4, per million.
		cost money.USD
	}{
		{"OpenAI's", "qwen-cache", u.local, 0, 1_760_000},
		{"Anthropic's", "claude-cache", u.anthropic, 1000, 1_960_000},
		{"Gemini's", "gemini-cache", u.gemini, 0, 1_760_000},
	} {
		t.Run(tc.format, func(t *testing.T) {
			tc.upstream.Queue(providertest.Response{Text: "Nitrogen.", InputTokens: 3500, CacheRead: 2000, CacheWrite: 1000, OutputTokens: 100})
			resp, raw := u.as(k.Key, http.MethodPost, "/v1/chat/completions", map[string]any{"model": tc.model,
				"messages": []map[string]any{{"role": "user", "content": mcq}}})
			var answer struct {
				ID    string `json:"id"`
				Usage struct {
					PromptTokens        int `json:"prompt_tokens"`
					PromptTokensDetails struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &answer) != nil || answer.Usage.PromptTokens != 3500 ||
				answer.Usage.PromptTokensDetails.CachedTokens != 2000 {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
			rec := u.execution(answer.ID)
			r := rec.Results[0]
			if u := r.GetUsage(); u.GetInputTokens() != 3500 || u.GetCacheReadTokens() != 2000 || u.GetCacheWriteTokens() != tc.written || u.GetOutputTokens() != 100 {
				t.Fatalf("the record's usage %+v", u)
			}
			if money.USD(r.CostNanos) != tc.cost || money.USD(rec.CostNanos) != tc.cost {
				t.Fatalf("charged %s (record %s), want %s", money.USD(r.CostNanos), money.USD(rec.CostNanos), tc.cost)
			}
			spent += tc.cost
		})
	}
	var shown createdKey
	u.do(http.MethodGet, "/admin/keys/"+k.ID, nil, &shown)
	if shown.Spend.SpendUSD != spent {
		t.Fatalf("the key spent %s, its calls cost %s", shown.Spend.SpendUSD, spent)
	}
	checkBooks(t, db)
}
