package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/conclave-ai/conclave/messages"
	"github.com/julienschmidt/httprouter"
)

// feedback handles POST /executions/:id/feedback: a caller who learned the truth about an execution
// reports it, as {"answer": "<the correct answer>"} or {"scores": {"<model>": 0.0-1.0}}, and the models
// that answered are rewarded by it, once per execution.
func (s *Server) feedback(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	body, ok := s.readJSON(w, r)
	if !ok {
		return
	}
	var in struct {
		Answer *string            `json:"answer"`
		Scores map[string]float64 `json:"scores"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "malformed_request", "the body must be {\"answer\": string} or {\"scores\": {model: number}}",
			[]*messages.Problem{{Field: "body", Message: err.Error()}})
		return
	}
	if (in.Answer == nil) == (len(in.Scores) == 0) {
		writeError(w, http.StatusBadRequest, "malformed_request", "give exactly one of answer and scores",
			[]*messages.Problem{{Field: "answer", Message: "exactly one of answer and scores is required"}})
		return
	}
	id := p.ByName("id")
	res, err := s.engine.Feedback(r.Context(), &messages.RecordFeedback{RequestId: id, Answer: in.Answer, Scores: in.Scores})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
		return
	}
	if res.Status != http.StatusOK {
		code := map[int32]string{400: "malformed_request", 404: "not_found", 409: "conflict", 503: "unavailable"}[res.Status]
		writeError(w, int(res.Status), code, res.Message, nil)
		return
	}
	type update struct {
		Model    string  `json:"model"`
		Category string  `json:"category"`
		Reward   float64 `json:"reward"`
		Reason   string  `json:"reason"`
	}
	out := struct {
		RequestID string   `json:"request_id"`
		Updates   []update `json:"updates"`
	}{RequestID: id, Updates: make([]update, len(res.Updates))}
	for i, u := range res.Updates {
		out.Updates[i] = update{Model: u.Model, Category: u.Category, Reward: u.Reward, Reason: u.Reason}
	}
	writeJSON(w, http.StatusOK, out)
}
