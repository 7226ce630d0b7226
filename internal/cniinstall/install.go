// Package cniinstall puts egressd-cni at the end of the node's primary CNI network
// configuration, and keeps it there, as Istio's and Cilium's CNI installers do: the binary (and
// the helper it runs for EgressRouter pods) is copied into the host's CNI bin directory and the
// entry appended to the configuration the runtime uses (the first file of the configuration
// directory in name order). A primary CNI that rewrites its file gets the entry appended
// again. Uninstall removes both.
package cniinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/fsnotify/fsnotify"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// PluginType is egressd-cni's "type" in a configuration list, and its binary's name.
const PluginType = "egressd-cni"

// DefaultStatusFile is where the DaemonSet's init container (egressd install-cni) says whether
// it installed the binary: in the agent's runtime directory, shared with it.
const DefaultStatusFile = "/run/egressd/install-cni.status"

// installed is the status file's content after a successful install.
const installed = "installed"

// Installer keeps egressd-cni in the node's CNI chain.
type Installer struct {
	// Binary is the egressd-cni executable to install (in the agent's image).
	Binary string
	// BinDir and ConfDir are the host's CNI directories (as mounted in the agent's container).
	// Without BinDir the binary is installed by someone else (the DaemonSet's init container,
	// InstallBinary), so that the agent needs no write access to the host's plugins.
	BinDir, ConfDir string
	// StatusFile is where the init container says whether it installed the binary (absent:
	// there is none). When it failed the plugin is not chained (a chained plugin the runtime
	// cannot find fails every new pod); when it succeeded, a failure to install the binary
	// from BinDir (a leftover flag, the directory no longer mounted) does not stop chaining.
	StatusFile string
	// Entry is egressd-cni's entry in the chain, e.g. {"type":"egressd-cni","socket":...}.
	Entry map[string]any
	Log   *slog.Logger
}

// Run installs the binary, then appends the entry to the primary configuration and keeps it
// there until ctx ends: at every change of the configuration directory, and every minute.
// It leaves the chain as it is when it returns: an agent restarting (an upgrade) must not open
// a window in which pods start without policy; Uninstall is the uninstaller's step.
func (in *Installer) Run(ctx context.Context) error {
	status, err := os.ReadFile(in.StatusFile)
	byInit := err == nil && in.StatusFile != ""
	if s := strings.TrimSpace(string(status)); byInit && s != installed {
		return fmt.Errorf("the init container could not install the binary (%s): %s", in.StatusFile, s)
	}
	if in.BinDir != "" {
		if err := InstallBinary(in.Binary, in.BinDir, in.Log); err != nil && !byInit {
			return err
		} else if err != nil {
			in.Log.Warn("the init container installed egressd-cni; --cni-bin-dir is not needed", "err", err)
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", in.ConfDir, err)
	}
	defer w.Close()
	if err := w.Add(in.ConfDir); err != nil {
		return fmt.Errorf("watch %s: %w", in.ConfDir, err)
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	var last string
	var churn churn
	for {
		file, err := in.ensure()
		switch {
		case err != nil && err.Error() != last:
			in.Log.Error("egressd-cni not chained", "dir", in.ConfDir, "err", err)
			last = err.Error()
		case err == nil && file != "":
			last = ""
			if pause := churn.wrote(time.Now()); pause > 0 {
				in.Log.Error("the primary CNI keeps rewriting its configuration without egressd-cni: chaining it again less often, new pods meanwhile are programmed from the API only",
					"file", file, "rewrites", churnWrites, "within", churnWindow, "next", pause,
					"fix", "have the primary CNI keep egressd-cni in its chain (docs/features/egressd-cni.md, installation; Cilium: cni.exclusive=false and cni.customConf)")
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(pause):
				}
				drain(w.Events)
				continue
			}
			in.Log.Info("egressd-cni chained", "file", file)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-w.Events:
			// A rewrite comes as several events: let it finish.
			time.Sleep(100 * time.Millisecond)
			drain(w.Events)
		case err := <-w.Errors:
			in.Log.Error("watching the CNI configuration directory", "dir", in.ConfDir, "err", err)
		}
	}
}

// A primary CNI that writes its configuration again whenever it differs from its own (Cilium's
// agent does, unless told otherwise) would have the installer and itself rewrite the file
// forever. churnWrites chainings within churnWindow start a fight: from then on each chaining
// waits, churnPause doubling up to churnPauseMax, until none comes for churnWindow past the
// last pause.
var (
	churnWrites   = 5
	churnWindow   = time.Minute
	churnPause    = 10 * time.Second
	churnPauseMax = 5 * time.Minute
)

// churn follows the installer's recent chainings.
type churn struct {
	writes []time.Time // within churnWindow, before a fight
	last   time.Time
	pause  time.Duration // the last wait; 0: no fight
}

// wrote records a chaining at now and returns how long to wait before the next (0: none).
func (c *churn) wrote(now time.Time) time.Duration {
	if !c.last.IsZero() && now.Sub(c.last) > churnWindow+c.pause {
		c.writes, c.pause = nil, 0 // a quiet window: the fight, if any, is over
	}
	c.last = now
	if c.pause == 0 {
		c.writes = append(c.writes, now)
		for now.Sub(c.writes[0]) > churnWindow {
			c.writes = c.writes[1:]
		}
		if len(c.writes) < churnWrites {
			return 0
		}
	}
	c.pause = min(max(2*c.pause, churnPause), churnPauseMax)
	return c.pause
}

func drain(c <-chan fsnotify.Event) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// InstallBinary copies the egressd-cni executable binary, and egressd-cni-router from its
// directory (cniapi.RouterHelper, which it runs for router pods), into binDir unless the same
// bytes are there already; the rename makes each new file appear whole to a runtime executing
// the plugin meanwhile. The helper goes first: a plugin installed finds the helper it runs. A
// helper missing beside binary (an image of its own) is logged and the plugin installed all
// the same: only router pods need it, and they fail naming it; every other pod keeps its
// policy from the first packet.
func InstallBinary(binary, binDir string, log *slog.Logger) error {
	helper := filepath.Join(filepath.Dir(binary), cniapi.RouterHelper)
	if _, err := os.Stat(helper); errors.Is(err, os.ErrNotExist) {
		log.Warn(cniapi.RouterHelper+" is not beside "+PluginType+": EgressRouter pods will fail their CNI ADD on this node", "path", helper)
	} else if err := installFile(helper, binDir, cniapi.RouterHelper, log); err != nil {
		return err
	}
	return installFile(binary, binDir, PluginType, log)
}

func installFile(src, binDir, name string, log *slog.Logger) error {
	content, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("%s binary: %w", name, err)
	}
	dst := filepath.Join(binDir, name)
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, content) {
		log.Info(name+" already installed", "path", dst)
		return nil
	}
	if err := writeAtomic(dst, content, 0o755, nil); err != nil {
		return fmt.Errorf("install %s into %s: %w", name, binDir, err)
	}
	log.Info(name+" installed", "path", dst)
	return nil
}

// WriteStatus writes the init container's outcome (err nil: installed) to the status file.
func WriteStatus(file string, err error) error {
	s := installed
	if err != nil {
		s = "failed: " + err.Error()
	}
	return writeAtomic(file, []byte(s+"\n"), 0o644, nil)
}

// editAttempts bounds the edits of a configuration that changes under each of them.
const editAttempts = 3

// ensure appends the entry to the primary configuration unless it is its last plugin already;
// it returns the file it wrote, "" when nothing changed. An edit of a file the primary CNI
// rewrote meanwhile is not renamed over it: the edit starts again from the new content.
func (in *Installer) ensure() (string, error) {
	for range editAttempts {
		out, err := in.ensureOnce()
		if !errors.Is(err, errChanged) {
			return out, err
		}
	}
	return "", fmt.Errorf("CNI configuration in %s changed under each of %d edits", in.ConfDir, editAttempts)
}

func (in *Installer) ensureOnce() (string, error) {
	file, err := primary(in.ConfDir)
	if err != nil {
		return "", err
	}
	raw, mode, err := readConf(file)
	if err != nil {
		return "", err
	}
	conf, err := chain(file, raw, in.Entry)
	if err != nil || conf == nil {
		return "", err
	}
	out := file
	if !isList(file) { // a single plugin's .conf: the chain needs a list
		out = strings.TrimSuffix(file, filepath.Ext(file)) + ".conflist"
	}
	if err := writeJSON(out, conf, mode, unchanged(file, raw)); err != nil {
		return "", err
	}
	if out != file {
		if err := os.Remove(file); err != nil {
			return "", fmt.Errorf("remove %s, now %s: %w", file, out, err)
		}
	}
	return out, nil
}

// chain is the configuration raw (of file) as a list whose last plugin is entry, the only
// egressd-cni of the list; nil when it is so already.
func chain(file string, raw []byte, entry map[string]any) (map[string]any, error) {
	conf, err := asList(file, raw)
	if err != nil {
		return nil, err
	}
	plugins, _ := conf["plugins"].([]any)
	e := normalize(entry)
	if n := len(plugins); n > 0 && reflect.DeepEqual(plugins[n-1], e) && count(plugins) == 1 {
		return nil, nil
	}
	conf["plugins"] = append(without(plugins), e)
	return conf, nil
}

// Uninstall removes egressd-cni from every configuration list of confDir and its binaries
// from binDir. Missing directories are fine: nothing was installed.
func Uninstall(binDir, confDir string) error {
	err := Unchain(confDir)
	for _, name := range []string{PluginType, cniapi.RouterHelper} {
		if rerr := os.Remove(filepath.Join(binDir, name)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// Unchain removes egressd-cni from every configuration list of confDir (a missing directory is
// fine) and leaves its binary: what an agent, which cannot write the host's plugins, can undo.
func Unchain(confDir string) error {
	var errs []error
	files, err := libcni.ConfFiles(confDir, []string{".conflist"})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, f := range files {
		errs = append(errs, unchain(f))
	}
	return errors.Join(errs...)
}

// unchain removes egressd-cni from the configuration list file, again from the new content
// when the file changes under the edit.
func unchain(file string) error {
	for range editAttempts {
		raw, mode, err := readConf(file)
		if err != nil {
			return err
		}
		var conf map[string]any
		if unmarshal(raw, &conf) != nil {
			return nil // not ours to judge
		}
		plugins, _ := conf["plugins"].([]any)
		if count(plugins) == 0 {
			return nil
		}
		conf["plugins"] = without(plugins)
		if err := writeJSON(file, conf, mode, unchanged(file, raw)); !errors.Is(err, errChanged) {
			return err
		}
	}
	return fmt.Errorf("CNI configuration %s changed under each of %d edits", file, editAttempts)
}

// primary is the configuration the runtime uses: the first file in name order (libcni's and
// containerd's rule).
func primary(dir string) (string, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no CNI configuration in %s yet (the primary CNI writes one)", dir)
	}
	return files[0], nil // ConfFiles sorts
}

func isList(file string) bool { return filepath.Ext(file) == ".conflist" }

// asList reads a configuration as a list, a single plugin's becoming a list of one.
func asList(file string, raw []byte) (map[string]any, error) {
	var conf map[string]any
	if err := unmarshal(raw, &conf); err != nil {
		return nil, fmt.Errorf("CNI configuration %s: %w", file, err)
	}
	if p, ok := conf["plugins"]; ok {
		if _, ok := p.([]any); !ok {
			return nil, fmt.Errorf("CNI configuration %s: plugins is not a list", file)
		}
		return conf, nil
	}
	if _, ok := conf["type"]; !ok {
		return nil, fmt.Errorf("CNI configuration %s has neither plugins nor a type", file)
	}
	// A list needs a name and a version the runtime reads as strings (libcni.ConfListFromConf's
	// defaults): absent from a single plugin's configuration, they are empty, not null.
	list := map[string]any{"cniVersion": "", "name": ""}
	for _, k := range []string{"cniVersion", "name"} {
		if v, ok := conf[k]; ok {
			list[k] = v
			delete(conf, k)
		}
	}
	list["plugins"] = []any{conf}
	return list, nil
}

// unmarshal is json.Unmarshal keeping numbers as written (json.Number): a configuration is
// written back with the numbers of the plugins egressd does not know unchanged, not rounded
// through float64.
func unmarshal(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("invalid data after the top-level value")
	}
	return nil
}

// normalize gives the entry the shape it has once read back from JSON, to compare them.
func normalize(entry map[string]any) any {
	b, _ := json.Marshal(entry) // a map of plain values always marshals
	var out any
	_ = unmarshal(b, &out)
	return out
}

// isOurs reports whether the runtime reads p as egressd-cni: libcni decodes the plugin into a
// struct, whose field "type" takes any case of the key ("Type", "TYPE"), the last one winning.
func isOurs(p any) bool {
	b, err := json.Marshal(p)
	var c struct {
		Type string `json:"type"`
	}
	return err == nil && json.Unmarshal(b, &c) == nil && c.Type == PluginType
}

func count(plugins []any) int {
	n := 0
	for _, p := range plugins {
		if isOurs(p) {
			n++
		}
	}
	return n
}

func without(plugins []any) []any {
	out := make([]any, 0, len(plugins))
	for _, p := range plugins {
		if !isOurs(p) {
			out = append(out, p)
		}
	}
	return out
}
