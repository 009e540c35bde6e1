package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/conclave-ai/conclave/internal/core/money"
)

const keysUsage = `Usage: conclave keys COMMAND [flags]

Manages the API keys of a running Conclave through its admin API (the admin token is
CONCLAVE_API_TOKEN; the server CONCLAVE_SERVER, http://127.0.0.1:5000 by default).

  create --name NAME [key flags]     make a key; its secret is printed this once only
  list [--json]                      every key, revoked ones included: a table, or the JSON
  show ID                            one key, its spend and its limits in use
  update ID [key flags]              change what the flags give
  revoke ID                          refuse the key from now on, on every controller
  spend ID [--since T] [--until T] [--group-by model|day]
                                     what the key spent, from the records

Key flags:
  --name NAME              a name for people and metrics
  --team ID                the team the key belongs to, held to the team's limits too ("none" to leave it)
  --budget-usd N           the most the key may spend in a period ("none" to remove the budget)
  --budget-period P        1d, 7d, 30d, or "" for the key's whole life
  --budget-alerts S        shares of the budget told when crossed, once per period: 0.5,0.8,1 ("default": 0.8,1)
  --rpm N, --tpm N         requests and tokens per minute (0: no limit)
  --max-concurrency N      requests at once (0: no limit)
  --cache-ttl-seconds N    keep the key's answers in the exact answer cache this long (0: no cache)
  --models GLOBS           comma-separated globs over model ids: openai/*,conclave/* ("" for every model)
  --expires-at T           RFC 3339 time the key stops working ("never" to remove it)
  --metadata JSON          a JSON object kept with the key

Common flags: --server URL, --token TOKEN, --json (list: the admin API's JSON)
`

const teamsUsage = `Usage: conclave teams COMMAND [flags]

Manages the teams of a running Conclave through its admin API (as conclave keys does keys). A team
holds every request of its keys to its own limits and budget too, whichever is tighter.

  create --name NAME [team flags]    make a team
  list [--json]                      every team: a table, or the JSON
  show ID                            one team, its spend and its limits in use
  update ID [team flags]             change what the flags give
  delete ID                          delete a team no key that is not revoked belongs to
  spend ID [--since T] [--until T] [--group-by model|day]
                                     what the team's keys spent, by model or day

Team flags: --name, --budget-usd, --budget-period, --budget-alerts, --rpm, --tpm, --max-concurrency,
--models and --metadata, as for keys (see conclave keys --help). A key joins a team with
conclave keys update KEY --team TEAM.

Common flags: --server URL, --token TOKEN, --json (list: the admin API's JSON)
`

// resource is what `conclave keys` and `conclave teams` manage: its admin API path and its commands.
type resource struct {
	name, usage, path string
	flags             []string
	commands          map[string]func(context.Context, *keysInvocation) error
	table             func(io.Writer, []byte) error
}

var (
	keysResource = &resource{name: "keys", usage: keysUsage, path: "/admin/keys", flags: keyFlags, table: keyTable}
	// A team's flags are a key's but its team, its cache and its expiry.
	teamsResource = &resource{name: "teams", usage: teamsUsage, path: "/admin/teams", table: teamTable,
		flags: []string{"name", "budget-usd", "budget-period", "budget-alerts", "rpm", "tpm", "max-concurrency", "models", "metadata"}}
)

func init() {
	keysResource.commands = map[string]func(context.Context, *keysInvocation) error{"create": create, "update": update, "list": list, "show": show,
		"revoke": remove, "spend": spend}
	teamsResource.commands = map[string]func(context.Context, *keysInvocation) error{"create": create, "update": update, "list": list, "show": show,
		"delete": remove, "spend": spend}
}

// adminCommand runs `conclave keys ...` or `conclave teams ...` against a running server's admin API.
func adminCommand(ctx context.Context, res *resource, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, res.usage)
		return errors.New(res.name + " needs a command")
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, res.usage)
		return nil
	}
	k, err := parseKeysCommand(res, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, res.usage)
		return nil
	} else if err != nil {
		return err
	}
	run, ok := res.commands[k.cmd]
	if !ok {
		fmt.Fprint(stderr, res.usage)
		return fmt.Errorf("unknown %s command %q", res.name, k.cmd)
	}
	return run(ctx, k)
}

// keysInvocation is one `conclave keys` or `conclave teams` command as its arguments give it.
type keysInvocation struct {
	res *resource
	cmd string
	// positional are the arguments that are not flags: the key id, for the commands that take one.
	positional []string
	// fields are the key flags, and given names those given.
	fields map[string]*string
	given  map[string]bool
	// since, until and groupBy are the flags of spend; json asks list for JSON.
	since, until, groupBy string
	json                  bool
	client                adminClient
	stderr                io.Writer
}

// keyFlags are the flags that set a key's fields.
var keyFlags = []string{"name", "team", "budget-usd", "budget-period", "budget-alerts", "rpm", "tpm", "max-concurrency", "cache-ttl-seconds", "models", "expires-at",
	"metadata"}

// parseKeysCommand reads a command's flags, which may come before or after the key id. For --help it
// returns flag.ErrHelp.
func parseKeysCommand(res *resource, args []string, stdout, stderr io.Writer) (*keysInvocation, error) {
	k := &keysInvocation{res: res, cmd: args[0], fields: map[string]*string{}, given: map[string]bool{}, stderr: stderr}
	fs := flag.NewFlagSet(res.name+" "+k.cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	server := fs.String("server", envOr("CONCLAVE_SERVER", "http://127.0.0.1:5000"), "")
	token := fs.String("token", os.Getenv("CONCLAVE_API_TOKEN"), "")
	for _, name := range res.flags {
		k.fields[name] = fs.String(name, "", "")
	}
	since, until, groupBy := fs.String("since", "", ""), fs.String("until", "", ""), fs.String("group-by", "", "")
	asJSON := fs.Bool("json", false, "")
	for rest := args[1:]; ; {
		if err := fs.Parse(rest); errors.Is(err, flag.ErrHelp) {
			return nil, err
		} else if err != nil {
			return nil, fmt.Errorf("%w (see conclave %s --help)", err, res.name)
		}
		if fs.NArg() == 0 {
			break
		}
		k.positional, rest = append(k.positional, fs.Arg(0)), fs.Args()[1:]
	}
	fs.Visit(func(f *flag.Flag) { k.given[f.Name] = true })
	k.since, k.until, k.groupBy, k.json = *since, *until, *groupBy, *asJSON
	k.client = adminClient{server: strings.TrimRight(*server, "/"), token: *token, stdout: stdout}
	return k, nil
}

// id is the path of the one key or team the command was given.
func (k *keysInvocation) id() (string, error) {
	if len(k.positional) != 1 {
		return "", fmt.Errorf("%s %s needs one id (see conclave %s --help)", k.res.name, k.cmd, k.res.name)
	}
	return k.res.path + "/" + url.PathEscape(k.positional[0]), nil
}

// create makes a key or team; a key's secret is in the answer printed, this once only.
func create(ctx context.Context, k *keysInvocation) error {
	body, err := keyBody(k.fields, k.given)
	if err != nil {
		return err
	}
	if len(k.positional) > 0 {
		return errors.New(k.res.name + " create takes no id")
	}
	if err := k.client.do(ctx, http.MethodPost, k.res.path, body, http.StatusCreated); err != nil {
		return err
	}
	if k.res == keysResource {
		fmt.Fprintln(k.stderr, "the key's secret is above; it is not kept and cannot be shown again")
	}
	return nil
}

// update changes what the flags given say.
func update(ctx context.Context, k *keysInvocation) error {
	body, err := keyBody(k.fields, k.given)
	if err != nil {
		return err
	}
	path, err := k.id()
	if err != nil {
		return err
	}
	return k.client.do(ctx, http.MethodPatch, path, body, http.StatusOK)
}

// list prints every key (revoked ones included) or team: a table, or with --json the admin API's answer.
func list(ctx context.Context, k *keysInvocation) error {
	if len(k.positional) > 0 {
		return errors.New(k.res.name + " list takes no id")
	}
	if k.json {
		return k.client.do(ctx, http.MethodGet, k.res.path, nil, http.StatusOK)
	}
	raw, err := k.client.call(ctx, http.MethodGet, k.res.path, nil, http.StatusOK)
	if err != nil {
		return err
	}
	return k.res.table(k.client.stdout, raw)
}

// listedKey is what the table shows of a key or team.
type listedKey struct {
	ID             string     `json:"id"`
	Name           string     `json:"name"`
	TeamID         *string    `json:"team_id"`
	Status         string     `json:"status"`
	BudgetUSD      *money.USD `json:"budget_usd"`
	BudgetPeriod   string     `json:"budget_period"`
	RPM            int        `json:"rpm"`
	TPM            int        `json:"tpm"`
	MaxConcurrency int        `json:"max_concurrency"`
	Models         []string   `json:"models"`
	ExpiresAt      *time.Time `json:"expires_at"`
	LastUsedAt     *time.Time `json:"last_used_at"`
	Spend          struct {
		SpendUSD money.USD `json:"spend_usd"`
	} `json:"spend"`
}

// keyTable writes the keys of GET /admin/keys as a table, one line each; a limit of 0 and an absent
// team, budget or expiry are "-".
func keyTable(w io.Writer, raw []byte) error {
	var list struct {
		Keys []listedKey `json:"keys"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("GET /admin/keys: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTEAM\tSTATUS\tSPENT\tBUDGET\tPERIOD\tRPM\tTPM\tCONCURRENCY\tMODELS\tEXPIRES\tLAST USED")
	for _, k := range list.Keys {
		team := "-"
		if k.TeamID != nil {
			team = *k.TeamID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, team, k.allowance(), when(k.ExpiresAt), when(k.LastUsedAt))
	}
	return tw.Flush()
}

// teamTable writes the teams of GET /admin/teams as a table, one line each.
func teamTable(w io.Writer, raw []byte) error {
	var list struct {
		Teams []listedKey `json:"teams"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("GET /admin/teams: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tSPENT\tBUDGET\tPERIOD\tRPM\tTPM\tCONCURRENCY\tMODELS")
	for _, t := range list.Teams {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.Name, t.allowance())
	}
	return tw.Flush()
}

// allowance is the status, spend, budget, limits and models of a table's line, tab-separated.
func (k listedKey) allowance() string {
	dash := func(n int) string {
		if n == 0 {
			return "-"
		}
		return strconv.Itoa(n)
	}
	budget, period, models := "-", k.BudgetPeriod, strings.Join(k.Models, ",")
	if k.BudgetUSD != nil {
		budget = "$" + k.BudgetUSD.String()
	}
	if period == "" {
		period = "life"
	}
	if models == "" {
		models = "*"
	}
	return strings.Join([]string{k.Status, "$" + k.Spend.SpendUSD.String(), budget, period, dash(k.RPM), dash(k.TPM), dash(k.MaxConcurrency), models}, "\t")
}

// when is a table's time: RFC 3339 in UTC, or "-".
func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// show prints one key or team, its spend and its limits in use.
func show(ctx context.Context, k *keysInvocation) error {
	path, err := k.id()
	if err != nil {
		return err
	}
	return k.client.do(ctx, http.MethodGet, path, nil, http.StatusOK)
}

// remove revokes a key, or deletes a team.
func remove(ctx context.Context, k *keysInvocation) error {
	path, err := k.id()
	if err != nil {
		return err
	}
	return k.client.do(ctx, http.MethodDelete, path, nil, http.StatusOK)
}

// spend prints what a key or team spent: since and until a time, grouped as asked.
func spend(ctx context.Context, k *keysInvocation) error {
	path, err := k.id()
	if err != nil {
		return err
	}
	q := url.Values{}
	for name, v := range map[string]string{"since": k.since, "until": k.until, "group_by": k.groupBy} {
		if v != "" {
			q.Set(name, v)
		}
	}
	path += "/spend"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return k.client.do(ctx, http.MethodGet, path, nil, http.StatusOK)
}

// keyBody is the JSON of the key flags given; the server judges their values and lists what is wrong.
func keyBody(fields map[string]*string, given map[string]bool) (map[string]any, error) {
	body := map[string]any{}
	for flagName, v := range fields {
		if !given[flagName] {
			continue
		}
		name := strings.ReplaceAll(flagName, "-", "_")
		switch flagName {
		case "budget-usd":
			if *v == "none" {
				body[name] = nil
			} else if b, err := money.Parse(*v); err == nil {
				body[name] = b // an exact decimal, as given
			} else {
				return nil, fmt.Errorf("--budget-usd %q is not a decimal number of dollars (or none): %w", *v, err)
			}
		case "rpm", "tpm", "max-concurrency", "cache-ttl-seconds":
			n, err := strconv.Atoi(*v)
			if err != nil {
				return nil, fmt.Errorf("--%s %q is not a whole number", flagName, *v)
			}
			body[name] = n
		case "budget-alerts":
			if *v == "default" {
				body[name] = nil
				continue
			}
			shares := []float64{}
			for _, f := range strings.Split(*v, ",") {
				x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
				if err != nil {
					return nil, fmt.Errorf("--budget-alerts %q is not a list of shares such as 0.8,1 (or default)", *v)
				}
				shares = append(shares, x)
			}
			body[name] = shares
		case "models":
			globs := []string{}
			for _, g := range strings.Split(*v, ",") {
				if g = strings.TrimSpace(g); g != "" {
					globs = append(globs, g)
				}
			}
			body[name] = globs
		case "team":
			name = "team_id"
			if *v == "none" {
				body[name] = nil
			} else {
				body[name] = *v
			}
		case "expires-at":
			if *v == "never" {
				body[name] = nil
			} else {
				body[name] = *v
			}
		case "metadata":
			var m json.RawMessage
			if err := json.Unmarshal([]byte(*v), &m); err != nil {
				return nil, fmt.Errorf("--metadata is not JSON: %v", err)
			}
			body[name] = m
		default:
			body[name] = *v
		}
	}
	return body, nil
}

// adminClient calls the admin API and prints its answers.
type adminClient struct {
	server, token string
	stdout        io.Writer
}

// do calls the admin API and prints its answer, indented.
func (c adminClient) do(ctx context.Context, method, path string, body any, want int) error {
	raw, err := c.call(ctx, method, path, body, want)
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(append(indented(raw), '\n'))
	return err
}

// indented is a JSON answer indented, or as it came when it is not JSON.
func indented(raw []byte) []byte {
	var pretty bytes.Buffer
	if json.Indent(&pretty, raw, "", "  ") != nil {
		return raw
	}
	return pretty.Bytes()
}

// call calls the admin API and returns its answer, or an error with the answer when its status is
// not want.
func (c adminClient) call(ctx context.Context, method, path string, body any, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return nil, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s\n%s", method, path, resp.Status, indented(raw))
	}
	return raw, nil
}
