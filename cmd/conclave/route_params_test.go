package main

import (
	"io"
	"testing"

	"github.com/conclave-ai/conclave/messages"
	"google.golang.org/protobuf/proto"
)

// --parameters and --strict-parameters reach the request over HTTP as the API names them, and over a
// remote message as its ask's sampling.
func TestRouteParametersFlags(t *testing.T) {
	f64 := func(v float64) *float64 { return &v }
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		desc   string
		args   []string
		strict bool
		want   *messages.Sampling
		err    bool
	}{
		{"parameters and strictness", []string{"--parameters", `{"temperature": 0.1, "max_tokens": 5, "stop": "END"}`, "--strict-parameters"}, true,
			&messages.Sampling{Temperature: f64(0.1), MaxTokens: i32(5), Stop: []string{"END"}}, false},
		{"the newer name of the output limit", []string{"--parameters", `{"max_completion_tokens": 9, "stop": ["a", "b"]}`}, false,
			&messages.Sampling{MaxTokens: i32(9), Stop: []string{"a", "b"}}, false},
		{"none", nil, false, nil, false},
		{"parameters that are no object", []string{"--parameters", `[1]`}, false, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			f := newRouteFlags(io.Discard)
			if err := f.fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			body, err := f.body("Summarise the plan")
			if (err != nil) != tt.err {
				t.Fatalf("error %v", err)
			}
			if err != nil {
				return
			}
			if _, has := body["parameters"]; has != (tt.want != nil) || (body["strict_parameters"] == true) != tt.strict {
				t.Fatalf("body %v", body)
			}
			req, err := routeRequestOf(body)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(req.GetAsk().GetSampling(), tt.want) || req.StrictParameters != tt.strict || req.Task != "Summarise the plan" {
				t.Fatalf("remote request %v", req)
			}
		})
	}
}
