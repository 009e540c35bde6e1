package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/platform/config"
	"github.com/conclave-ai/conclave/internal/platform/secret"
)

func TestHeadHealthz(t *testing.T) {
	tb := newTestbed(t, nil)
	resp, err := http.Head(tb.srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /healthz: %d", resp.StatusCode)
	}
}

// Without a token, a page elsewhere cannot drive the API from a browser, and a name rebound to the
// loopback cannot read it.
func TestTheLoopbackDefaultServesOnlyLocalNamesAndPages(t *testing.T) {
	tb := newTestbed(t, nil)
	tests := []struct {
		desc, host, origin string
		status             int
	}{
		{"the loopback address", "", "", http.StatusOK},
		{"localhost", "localhost:5000", "", http.StatusOK},
		{"a local page", "", "http://localhost:3000", http.StatusOK},
		{"a rebound name", "attacker.example:5000", "", http.StatusForbidden},
		{"a foreign page", "", "https://attacker.example", http.StatusForbidden},
		{"an opaque origin", "", "null", http.StatusForbidden},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodPost, tb.srv.URL+"/route-thompson", strings.NewReader(`{"task": "hi"}`))
		req.Header.Set("Content-Type", "application/json")
		if tt.host != "" {
			req.Host = tt.host
		}
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s: %d, want %d", tt.desc, resp.StatusCode, tt.status)
		}
	}
	// With a token, any name may be served: the token is the guard.
	tok := newTestbed(t, func(c *config.Config) { c.APIToken = secret.String("any-name-token-0123456") })
	req, _ := http.NewRequest(http.MethodGet, tok.srv.URL+"/healthz", nil)
	req.Host = "conclave.internal:5000"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a named host with a token: %d", resp.StatusCode)
	}
}
