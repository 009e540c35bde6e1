package resilience

import "testing"

func TestBlame(t *testing.T) {
	tests := []struct {
		desc string
		call Call
		want Verdict
	}{
		{"an answer", Call{}, Verdict{Provider: Success, Model: Success, Host: Success, Arm: Judged}},
		{"an empty answer is a poor answer", Call{Kind: EmptyAnswer}, Verdict{Provider: Success, Model: Success, Host: Success, Arm: Penalty}},
		{"a timeout after the full budget is the model's", Call{Kind: UpstreamTimeout, FullBudget: true},
			Verdict{Model: Failure, Host: Success, Arm: Penalty}},
		{"a timeout cut by a shorter deadline blames nobody", Call{Kind: UpstreamTimeout}, Verdict{Host: Success}},
		{"a 5xx of unknown scope is the model's", Call{Kind: ProviderUnavailable}, Verdict{Model: Failure, Host: Success, Arm: Penalty}},
		{"a 5xx of the model", Call{Kind: ProviderUnavailable, Scope: ScopeModel}, Verdict{Model: Failure, Host: Success, Arm: Penalty}},
		{"a 5xx of the whole provider", Call{Kind: ProviderUnavailable, Scope: ScopeProvider}, Verdict{Provider: Failure, Host: Success}},
		{"a connection error is the provider's", Call{Kind: ProviderUnreachable}, Verdict{Provider: Failure, Host: Success}},
		{"a refused connection is the provider's, never the model's", Call{Kind: ConnectionRefused, Scope: ScopeProvider},
			Verdict{Provider: Failure, Host: Success}},
		{"a bad key is the provider's, until the key changes", Call{Kind: InvalidAPIKey}, Verdict{Provider: Failure, Host: Success, DisableProvider: true}},
		{"an account without credits too", Call{Kind: PaymentRequired}, Verdict{Provider: Failure, Host: Success, DisableProvider: true}},
		{"a model not found leaves the pool", Call{Kind: ModelNotFound}, Verdict{Host: Success, Arm: Penalty, RemoveModel: true}},
		{"a 429 blocks the model", Call{Kind: RateLimited}, Verdict{Host: Success, BlockModel: true}},
		{"a provider's 429 blocks the provider", Call{Kind: RateLimited, Scope: ScopeProvider}, Verdict{Host: Success, BlockProvider: true}},
		{"a refused request blames nobody", Call{Kind: MalformedRequest}, Verdict{Host: Success}},
		{"a refused host is the host's", Call{Kind: SSHRefused}, Verdict{Host: Failure}},
		{"a host timeout is the host's", Call{Kind: HostTimeout, FullBudget: true}, Verdict{Host: Failure}},
		{"an open worker breaker blames nobody", Call{Kind: WorkerUnavailable}, Verdict{}},
		{"a cancelled call blames nobody", Call{Kind: Cancelled}, Verdict{}},
		{"a call never sent blames nobody", Call{Kind: NotSent}, Verdict{}},
		{"Conclave's own fault blames nobody", Call{Kind: Internal}, Verdict{}},
		{"an unknown kind blames nobody", Call{Kind: "gremlins", Scope: ScopeProvider}, Verdict{}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if got := Blame(tt.call); got != tt.want {
				t.Fatalf("Blame(%+v) = %+v, want %+v", tt.call, got, tt.want)
			}
		})
	}
}

func TestSpread(t *testing.T) {
	tests := []struct {
		desc   string
		events []string // a model's fault, or "+" for a success
		want   []bool
	}{
		{"one model failing alone never spreads", []string{"a", "a", "a", "a", "a", "a"}, []bool{false, false, false, false, false, false}},
		{"faults across models spread at the threshold", []string{"a", "b", "a", "c"}, []bool{false, false, true, true}},
		{"a success ends the run", []string{"a", "b", "+", "a", "b", "c"}, []bool{false, false, false, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := NewSpread(3)
			var got []bool
			for _, e := range tt.events {
				if e == "+" {
					s.Success()
					got = append(got, false)
					continue
				}
				got = append(got, s.Fault(e))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("events %v: %v, want %v", tt.events, got, tt.want)
				}
			}
		})
	}
	var zero Spread
	if zero.Fault("a") || zero.Fault("b") || zero.Fault("c") {
		t.Fatal("the zero Spread reported a spread")
	}
}
