package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/egressd/egressd/test/spawn"
	"github.com/egressd/egressd/test/toolbuild"
)

// kwokLabel marks the nodes kwok plays; the lab's nodes, whose agents are real, lack it.
const kwokLabel, kwokValue = "type", "kwok"

// kwokConfig raises kwok's pod and node workers from 4: 150,000 pods made Running by 4
// workers would take longer than the rest of the run.
const kwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 8
`

// startKwok builds kwok (test/tools/kwok, once) and runs it against kubeconfig, managing the
// nodes labelled kwokLabel, with its log in dir/kwok.log. It dies with this process; a failure
// to run the pods shows in the end of its log, which the harness prints.
func startKwok(log io.Writer, dir, kubeconfig string) (*exec.Cmd, error) {
	bin, err := toolbuild.Cached(log, "kwok", []string{"stages/main.go"}, "sigs.k8s.io/kwok/cmd/kwok", "./stages")
	if err != nil {
		return nil, err
	}
	stages, err := exec.Command(filepath.Join(bin, "stages")).Output()
	if err != nil {
		return nil, fmt.Errorf("kwok stages: %w", err)
	}
	config := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(config, append([]byte(kwokConfig), stages...), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "kwok.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "kwok"),
		"--kubeconfig", kubeconfig,
		"--config", config,
		"--manage-nodes-with-label-selector", kwokLabel+"="+kwokValue,
		// No node Leases: no egressd process reads them, and 5,000 renewed every 10 s would
		// load the API server of a 2-core machine more than everything measured.
		"--node-lease-duration-seconds", "0")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := spawn.Start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start kwok: %w", err)
	}
	return cmd, nil
}

// kwokLogTail is the end of kwok's log, for a failure message.
func kwokLogTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "kwok.log"))
	if i := len(b) - 2000; i > 0 {
		b = b[i:]
	}
	return string(bytes.TrimSpace(b))
}
