package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// readConf reads a configuration and its permissions, which its rewrite keeps.
func readConf(file string) ([]byte, os.FileMode, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, 0, err
	}
	return raw, fi.Mode().Perm(), nil
}

// errChanged: the file changed between its read and the rename of its edit.
var errChanged = errors.New("changed while it was edited")

// beforeCompare runs right before unchanged reads the file again (tests write there).
var beforeCompare = func() {}

// unchanged is a check that file still holds raw, as read for the edit: the primary CNI may
// have written it meanwhile, and its new content must not be lost under an edit of the old.
// (A write between this check and the rename is still lost: only a lock the primary CNI took
// too would close that window, which is microseconds wide.)
func unchanged(file string, raw []byte) func() error {
	return func() error {
		beforeCompare()
		cur, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if !bytes.Equal(cur, raw) {
			return fmt.Errorf("%s: %w", file, errChanged)
		}
		return nil
	}
}

func writeJSON(file string, v any, mode os.FileMode, check func() error) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(file, append(b, '\n'), mode, check)
}

// writeAtomic writes through a temporary file in the same directory, named so that no runtime
// reads it as a configuration, then renames it into place once check (nil: none) passes. The
// file and the directory are synced: a node that loses power keeps the old file or the new one,
// never an empty one.
func writeAtomic(file string, data []byte, mode os.FileMode, check func() error) error {
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, ".egressd-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := io.Copy(tmp, bytes.NewReader(data)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
