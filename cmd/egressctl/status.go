package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"

	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/internal/version"
)

// statusReport is one screen about egressd on this node: the agent (from its metrics) and what
// the kernel holds. What could not be read is said in Unread, not fatal: a node whose agent is
// down is exactly when status is run.
type statusReport struct {
	EgressctlVersion string `json:"egressctlVersion"`
	// AgentVersion comes from the agent's metrics.
	AgentVersion string `json:"agentVersion,omitempty"`
	// SyncErrors are the agent's failed sync steps since it started, by feature (the compile
	// of an API, or the apply), those without any left out.
	SyncErrors []featureErrors `json:"syncErrors"`
	// Objects are the API objects the agent's last sync programmed, by kind; Failing those it
	// failed to program, with the kind of reason (invalid, dataplane; the error is in the
	// object's status and the agent's log).
	Objects []objectCount   `json:"objects"`
	Failing []failingObject `json:"failing"`
	// FirewallRules and QoSRules are the rules the classifier holds.
	FirewallRules int `json:"firewallRules"`
	QoSRules      int `json:"qosRules"`
	// SteeredPaths are the objects whose paths steer local pods, with their pod addresses.
	SteeredPaths []steeredPath   `json:"steeredPaths"`
	BFDSessions  []bfdSession    `json:"bfdSessions"`
	EgressIPs    []hostedAddress `json:"egressIPs"`
	Unread       []string        `json:"unread,omitempty"`
}

type featureErrors struct {
	Feature string `json:"feature"`
	Errors  int    `json:"errors"`
}

type objectCount struct {
	Kind    string `json:"kind"`
	Applied int    `json:"applied"`
	Failed  int    `json:"failed"`
}

type failingObject struct {
	Kind   string `json:"kind"`
	Object string `json:"object"`
	Reason string `json:"reason"`
}

type steeredPath struct {
	pathOf
	Mark         string `json:"mark"`
	PodAddresses int    `json:"podAddresses"`
}

func readStatus(o options) statusReport {
	r := statusReport{EgressctlVersion: version.String(), SyncErrors: []featureErrors{}, Objects: []objectCount{}, Failing: []failingObject{},
		SteeredPaths: []steeredPath{}, BFDSessions: []bfdSession{}, EgressIPs: []hostedAddress{}}
	unread := func(what string, err error) { r.Unread = append(r.Unread, fmt.Sprintf("%s: %v", what, err)) }
	if families, err := scrape(context.Background(), o.metricsAddress); err != nil {
		unread("the agent's metrics at "+o.metricsAddress, err)
	} else {
		r.fromMetrics(families)
		if r.BFDSessions, err = readBFDSessions(families); err != nil {
			unread("BFD sessions", err)
		}
	}
	if in, err := classifier.Inspect(o.pinRoot); err != nil {
		unread("classifier", err)
	} else {
		defer in.Close()
		for qos, n := range map[bool]*int{false: &r.FirewallRules, true: &r.QoSRules} {
			rules, err := in.Rules(qos)
			if err != nil {
				unread("classifier rules", err)
			}
			*n = len(rules)
		}
	}
	if hosted, err := readHosted(); err != nil {
		unread("egress IPs", err)
	} else {
		r.EgressIPs = hosted
	}
	return r
}

// fromMetrics fills in what the agent exports about itself and its objects.
func (r *statusReport) fromMetrics(families map[string]*dto.MetricFamily) {
	for _, s := range samples(families, metricBuildInfo) {
		r.AgentVersion = s.labels["version"]
	}
	for _, s := range samples(families, metricSyncErrors) {
		if s.value > 0 {
			r.SyncErrors = append(r.SyncErrors, featureErrors{Feature: s.labels["feature"], Errors: int(s.value)})
		}
	}
	slices.SortFunc(r.SyncErrors, func(a, b featureErrors) int { return cmp.Compare(a.Feature, b.Feature) })
	counts := map[string]*objectCount{}
	for _, s := range samples(families, metricObjects) {
		kind := s.labels["kind"]
		c, ok := counts[kind]
		if !ok {
			c = &objectCount{Kind: kind}
			counts[kind] = c
		}
		if s.labels["result"] == "failed" {
			c.Failed += int(s.value)
		} else {
			c.Applied += int(s.value)
		}
	}
	for _, c := range counts {
		r.Objects = append(r.Objects, *c)
	}
	slices.SortFunc(r.Objects, func(a, b objectCount) int { return cmp.Compare(a.Kind, b.Kind) })
	for _, s := range samples(families, metricObjectFailure) {
		r.Failing = append(r.Failing, failingObject{Kind: s.labels["kind"], Object: s.labels["object"], Reason: s.labels["reason"]})
	}
	slices.SortFunc(r.Failing, func(a, b failingObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object))
	})
	for _, s := range samples(families, metricSteeredPaths) {
		r.SteeredPaths = append(r.SteeredPaths, steeredPath{pathOf: pathOf{s.labels["kind"], s.labels["object"]},
			Mark: s.labels["mark"], PodAddresses: int(s.value)})
	}
	slices.SortFunc(r.SteeredPaths, func(a, b steeredPath) int { return cmp.Compare(a.Mark, b.Mark) })
}

func (r statusReport) writeText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	agent := "unknown (metrics not read)"
	if r.AgentVersion != "" {
		agent = r.AgentVersion
	}
	fmt.Fprintf(w, "egressctl:\t%s\n", r.EgressctlVersion)
	fmt.Fprintf(w, "agent:\t%s\n", agent)
	if r.AgentVersion != "" {
		syncErrors := "none since the agent started"
		if len(r.SyncErrors) > 0 {
			e := make([]string, len(r.SyncErrors))
			for i, f := range r.SyncErrors {
				e[i] = fmt.Sprintf("%s %d", f.Feature, f.Errors)
			}
			syncErrors = strings.Join(e, ", ") + " since the agent started"
		}
		fmt.Fprintf(w, "sync errors:\t%s\n", syncErrors)
	}
	fmt.Fprintf(w, "classifier:\t%d EgressFirewall rules, %d EgressQoS rules\n", r.FirewallRules, r.QoSRules)
	hosted := "none"
	if len(r.EgressIPs) > 0 {
		h := make([]string, len(r.EgressIPs))
		for i, a := range r.EgressIPs {
			h[i] = a.Address.String() + " on " + a.Interface
		}
		hosted = strings.Join(h, ", ")
	}
	fmt.Fprintf(w, "egress IPs hosted:\t%s\n", hosted)
	if err := w.Flush(); err != nil {
		return err
	}
	section := func(title string, empty bool) bool {
		fmt.Fprintln(out)
		if empty {
			fmt.Fprintln(out, title+": none")
		}
		return !empty
	}
	if section("objects", len(r.Objects) == 0) {
		w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KIND\tAPPLIED\tFAILED")
		for _, c := range r.Objects {
			fmt.Fprintf(w, "%s\t%d\t%d\n", c.Kind, c.Applied, c.Failed)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(r.Failing) > 0 {
		fmt.Fprintln(out)
		w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "FAILING\tOBJECT\tREASON (the error: the object's status, the agent's log)")
		for _, f := range r.Failing {
			fmt.Fprintf(w, "%s\t%s\t%s\n", f.Kind, f.Object, f.Reason)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if section("steered paths", len(r.SteeredPaths) == 0) {
		w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "STEERED PATH\tMARK\tLOCAL POD ADDRESSES")
		for _, p := range r.SteeredPaths {
			fmt.Fprintf(w, "%s\t%s\t%d\n", p.pathOf, p.Mark, p.PodAddresses)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if section("BFD sessions", len(r.BFDSessions) == 0) {
		if err := writeBFDSessions(out, r.BFDSessions); err != nil {
			return err
		}
	}
	if len(r.Unread) > 0 {
		fmt.Fprintln(out)
	}
	for _, u := range r.Unread {
		fmt.Fprintln(out, "not read: "+u)
	}
	return nil
}
