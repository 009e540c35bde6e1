package fleet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conclave-ai/conclave/internal/testenv"
	"gopkg.in/yaml.v3"
)

// The compose deployment's key script writes a fleet file that loads, with a known_hosts entry and a
// forced-command authorized_keys line for every host.
func TestTheDeploymentsKeysMakeAFleet(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		testenv.Missing(t, "ssh-keygen is not installed (run scripts/services.sh)")
	}
	dir := t.TempDir()
	out, err := exec.Command("../../../deploy/keys.sh", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("keys.sh: %v: %s", err, out)
	}
	f, err := LoadFile(filepath.Join(dir, "fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Hosts) != 3 || f.KnownHosts != "/keys/known_hosts" || f.Hosts[0].Tier != 1 || f.Hosts[1].Tier != 2 {
		t.Fatalf("fleet %+v", f)
	}
	known, _ := os.ReadFile(filepath.Join(dir, "known_hosts"))
	auth, _ := os.ReadFile(filepath.Join(dir, "authorized_keys"))
	for _, h := range f.Hosts {
		if !strings.Contains(string(known), "["+h.Address+"]:2222 ssh-ed25519 ") {
			t.Fatalf("known_hosts lacks %s: %s", h.Name, known)
		}
	}
	if !strings.HasPrefix(string(auth), `command="/usr/local/bin/conclave worker",restrict ssh-ed25519 `) {
		t.Fatalf("authorized_keys %s", auth)
	}
	if st, err := os.Stat(filepath.Join(dir, "controller")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the controller's key: %v %v", st.Mode(), err)
	}
}

// The compose file parses, and its controllers get every service they need by the names the
// configuration reads.
func TestTheComposeFileNamesWhatControllersRead(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"postgres", "redis", "migrate", "controller-1", "controller-2", "balancer", "worker-1", "worker-2", "worker-3"} {
		if _, ok := compose.Services[name]; !ok {
			t.Fatalf("no service %s", name)
		}
	}
	for _, c := range []string{"controller-1", "controller-2"} {
		env := compose.Services[c].Environment
		for _, k := range []string{"DATABASE_URL", "REDIS_URL", "CONCLAVE_FLEET", "CONCLAVE_LISTEN", "CONCLAVE_REMOTE", "CONCLAVE_API_TOKEN", "CONCLAVE_NODE_ID"} {
			if env[k] == "" {
				t.Errorf("%s has no %s", c, k)
			}
		}
	}
	if compose.Services["controller-1"].Environment["CONCLAVE_NODE_ID"] == compose.Services["controller-2"].Environment["CONCLAVE_NODE_ID"] {
		t.Error("the controllers share a node id")
	}
}
