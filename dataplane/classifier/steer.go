package classifier

import "fmt"

// checkMark accepts a pod's routing mark if it lies within the mark mask (0: none).
func (c *Classifier) checkMark(mark uint32) error {
	if mark&^c.markMask != 0 {
		return fmt.Errorf("mark %#x outside the mark mask %#x", mark, c.markMask)
	}
	return nil
}
