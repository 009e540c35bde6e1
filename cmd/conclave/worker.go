package main

import (
	"context"
	"fmt"
	"io"

	"github.com/conclave-ai/conclave/internal/adapters/fleet/agent"
	"github.com/conclave-ai/conclave/internal/platform/logging"
)

const workerUsage = `Usage: conclave worker

Runs the worker agent on a worker host: it reads jobs from standard input and writes their results to
standard output as length-prefixed frames, calling each job's provider (keys come inside the jobs and
are never logged). A controller starts it over SSH, best as the forced command of its key in
authorized_keys:

  command="/usr/local/bin/conclave worker",restrict ssh-ed25519 AAAA... conclave-controller

Logs (warnings and errors) go to standard error.
`

func worker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if isHelp(args[0]) {
			fmt.Fprint(stdout, workerUsage)
			return nil
		}
		fmt.Fprint(stderr, workerUsage)
		return fmt.Errorf("conclave worker takes no arguments")
	}
	log, err := logging.New("warn", "json", stderr)
	if err != nil {
		return err
	}
	defer log.Sync()
	return agent.New(versionString(), log).Serve(ctx, stdin, stdout)
}
