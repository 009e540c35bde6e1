package engine

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/conclave-ai/conclave/internal/adapters/fleet"
	"github.com/conclave-ai/conclave/internal/adapters/providers"
	"github.com/conclave-ai/conclave/messages"
	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
)

// sshTransports makes a transport per host of the fleet file: jobs reach them over SSH, with the
// provider's base URL and key from this controller's configuration.
func (e *Engine) sshTransports(f fleet.File, registry *providers.Registry) (func(fleet.WorkerSpec) fleet.Transport, error) {
	var hostKeys ssh.HostKeyCallback
	switch {
	case f.KnownHosts != "":
		cb, err := fleet.KnownHosts(f.KnownHosts)
		if err != nil {
			return nil, err
		}
		hostKeys = cb
	case !e.cfg.DevInsecureHostKeys:
		return nil, errors.New("fleet: known_hosts is required to verify the hosts' keys (dev_insecure_host_keys skips it, for development only)")
	default:
		e.log.Warn("host keys are not verified: development only", zap.String("event", "host_keys_unverified"))
	}
	sim, err := json.Marshal(e.cfg.Sim)
	if err != nil {
		return nil, err
	}
	byName := map[string]fleet.Transport{}
	for _, h := range f.Hosts {
		t, err := fleet.NewSSH(h, fleet.SSHOptions{HostKeys: hostKeys, InsecureIgnoreHostKey: e.cfg.DevInsecureHostKeys, Router: registry,
			Setup: &messages.AgentSetup{Sim: string(sim)}, Log: e.log})
		if err != nil {
			for _, t := range e.transports {
				t.Close()
			}
			return nil, fmt.Errorf("fleet: %w", err)
		}
		byName[h.Name] = t
		e.transports = append(e.transports, t)
	}
	e.log.Info("worker hosts over SSH", zap.String("event", "fleet_loaded"), zap.Int("hosts", len(f.Hosts)), zap.String("known_hosts", f.KnownHosts))
	return func(w fleet.WorkerSpec) fleet.Transport { return byName[w.Name] }, nil
}
