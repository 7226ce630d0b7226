package classifier

import (
	"errors"
	"testing"
)

// TestListedWritesUntilWrittenInFull: a list is written when it differs from the last one
// written in full, and after a failed write (which may have left the map half changed) also
// when it is that one; not while it stays. The caller's slice may change afterwards.
func TestListedWritesUntilWrittenInFull(t *testing.T) {
	var l listed[int]
	writes := 0
	fail := false
	write := func() error {
		writes++
		if fail {
			return errors.New("refused")
		}
		return nil
	}
	for _, step := range []struct {
		name   string
		list   []int
		fail   bool
		writes int
	}{
		{"first (nothing written yet)", []int{1, 2}, false, 1},
		{"the same", []int{1, 2}, false, 1},
		{"nil for empty, first time", nil, false, 2},
		{"empty again", []int{}, false, 2},
		{"changed, refused", []int{3}, true, 3},
		{"back to the list written before the refusal", []int{}, false, 4},
		{"changed again", []int{3}, false, 5},
		{"the same once written", []int{3}, false, 5},
	} {
		fail = step.fail
		err := l.write(step.list, write)
		if (err != nil) != step.fail || writes != step.writes {
			t.Fatalf("%s: err %v, %d writes; want failure %v, %d writes", step.name, err, writes, step.fail, step.writes)
		}
	}
	mine := []int{5, 6}
	if err := l.write(mine, write); err != nil || writes != 6 {
		t.Fatalf("changed: %d writes (%v), want 6", writes, err)
	}
	mine[0] = 9 // the caller's slice, changed after it was written
	if err := l.write([]int{5, 6}, write); err != nil || writes != 6 {
		t.Fatalf("the list written, after the caller changed its slice: %d writes (%v), want 6", writes, err)
	}
}
