package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// The keys command drives the admin API of a running server: a key made, used with conclave route,
// listed, changed, revoked; bad arguments are refused before anything is sent.
func TestKeysCommand(t *testing.T) {
	const admin = "admin-token-0123456789"
	t.Setenv("CONCLAVE_API_TOKEN", admin)
	_, addr := serving(t, "--sim-latency-scale", "0")
	keys := func(args ...string) (map[string]any, error) {
		var out, errs bytes.Buffer
		err := run(context.Background(), append([]string{"keys"}, append(args, "--server", addr)...), &out, &errs)
		var v map[string]any
		if err == nil {
			if jerr := json.Unmarshal(out.Bytes(), &v); jerr != nil {
				t.Fatalf("keys %v printed %s", args, out.String())
			}
		}
		return v, err
	}
	created, err := keys("create", "--name", "nightly", "--rpm", "5", "--budget-usd", "2.5", "--budget-period", "7d", "--models", "openai/*, conclave/*",
		"--metadata", `{"owner":"data"}`)
	if err != nil {
		t.Fatal(err)
	}
	id, secret := created["id"].(string), created["key"].(string)
	if !strings.HasPrefix(secret, "ck-") || created["rpm"] != 5.0 || created["budget_usd"] != 2.5 || len(created["models"].([]any)) != 2 {
		t.Fatalf("created %v", created)
	}
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"route", "--json", "--server", addr, "--token", secret, "--workers", "1", "--min-responses", "1",
		"Which is larger? A) 2 B) 3"}, &out, &errs); err != nil {
		t.Fatalf("route with the key: %v %s", err, errs.String())
	}
	updated, err := keys("update", id, "--rpm", "0", "--budget-usd", "none", "--expires-at", "2030-01-01T00:00:00Z")
	if err != nil || updated["rpm"] != 0.0 || updated["budget_usd"] != nil || updated["expires_at"] != "2030-01-01T00:00:00Z" {
		t.Fatalf("updated %v, %v", updated, err)
	}
	if shown, err := keys("show", id); err != nil || shown["name"] != "nightly" || shown["last_used_at"] == nil {
		t.Fatalf("shown %v, %v", shown, err)
	}
	var table, errs2 bytes.Buffer
	if err := run(context.Background(), []string{"keys", "list", "--server", addr}, &table, &errs2); err != nil {
		t.Fatalf("keys list: %v %s", err, errs2.String())
	}
	if lines := strings.Split(strings.TrimSpace(table.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") ||
		!strings.Contains(lines[0], "STATUS") || !strings.HasPrefix(lines[1], id+" ") || !strings.Contains(lines[1], " nightly ") ||
		!strings.Contains(lines[1], " active ") || strings.Contains(table.String(), "ck-") {
		t.Fatalf("keys list printed\n%s", table.String())
	}
	if list, err := keys("list", "--json"); err != nil || len(list["keys"].([]any)) != 1 || strings.Contains(list["keys"].([]any)[0].(map[string]any)["id"].(string), "ck-") {
		t.Fatalf("list %v, %v", list, err)
	}
	if spend, err := keys("spend", id, "--group-by", "day"); err != nil || spend["group_by"] != "day" {
		t.Fatalf("spend %v, %v", spend, err)
	}
	if revoked, err := keys("revoke", id); err != nil || revoked["status"] != "revoked" {
		t.Fatalf("revoked %v, %v", revoked, err)
	}
	if err := run(context.Background(), []string{"route", "--server", addr, "--token", secret, "Which is larger? A) 2 B) 3"}, &out, &errs); err == nil ||
		!strings.Contains(err.Error(), "401") {
		t.Fatalf("route with the revoked key: %v", err)
	}
	for _, bad := range [][]string{{"create", "--rpm", "x"}, {"create", "--budget-usd", "lots"}, {"show"}, {"revoke", "a", "b"}, {"sideways"},
		{"create", "--metadata", "{"}, {"create", "--rpm", "-1"}, {"show", "key_unknown"}} {
		if _, err := keys(bad...); err == nil {
			t.Errorf("keys %v: accepted", bad)
		}
	}
	if _, err := keys("list", "--token", "wrong-token-0123456789"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong admin token: %v", err)
	}
}

// The teams command drives the admin API's teams: a team made, a key joined to it, listed as a table,
// its spend read, and deleted only once its key is revoked.
func TestTeamsCommand(t *testing.T) {
	const admin = "admin-token-0123456789"
	t.Setenv("CONCLAVE_API_TOKEN", admin)
	_, addr := serving(t, "--sim-latency-scale", "0")
	cli := func(args ...string) (map[string]any, string, error) {
		var out, errs bytes.Buffer
		err := run(context.Background(), append(args, "--server", addr), &out, &errs)
		var v map[string]any
		_ = json.Unmarshal(out.Bytes(), &v)
		return v, out.String(), err
	}
	team, _, err := cli("teams", "create", "--name", "research", "--budget-usd", "10", "--budget-period", "30d", "--max-concurrency", "4",
		"--models", "openai/*,conclave/*")
	if err != nil || team["name"] != "research" || team["budget_usd"] != 10.0 || team["max_concurrency"] != 4.0 {
		t.Fatalf("created %v, %v", team, err)
	}
	teamID := team["id"].(string)
	key, _, err := cli("keys", "create", "--name", "analyst", "--team", teamID)
	if err != nil || key["team_id"] != teamID {
		t.Fatalf("a key in the team: %v, %v", key, err)
	}
	if _, _, err := cli("keys", "create", "--name", "stray", "--team", "team_nobody"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a key in no team that exists: %v", err)
	}
	if _, table, err := cli("teams", "list"); err != nil || !strings.Contains(table, "CONCURRENCY") || !strings.Contains(table, teamID+"  research  active") {
		t.Fatalf("teams list: %v\n%s", err, table)
	}
	if _, table, err := cli("keys", "list"); err != nil || !strings.Contains(table, " TEAM ") || !strings.Contains(table, " "+teamID+" ") {
		t.Fatalf("keys list shows the team: %v\n%s", err, table)
	}
	if spend, _, err := cli("teams", "spend", teamID, "--group-by", "day"); err != nil || spend["team_id"] != teamID || spend["group_by"] != "day" {
		t.Fatalf("spend %v, %v", spend, err)
	}
	if _, _, err := cli("teams", "delete", teamID); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("a team with a usable key is kept: %v", err)
	}
	if _, _, err := cli("keys", "revoke", key["id"].(string)); err != nil {
		t.Fatal(err)
	}
	if gone, _, err := cli("teams", "delete", teamID); err != nil || gone["status"] != "deleted" {
		t.Fatalf("deleted %v, %v", gone, err)
	}
	if _, _, err := cli("teams", "show", teamID); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a deleted team: %v", err)
	}
}
