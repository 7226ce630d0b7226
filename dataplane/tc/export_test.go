package tc

import "maps"

// Recheck lets a test make Attach look for other programs at every call.
var Recheck = &recheck

// Sync makes the attachers' attachments exactly want, as the agent's attach phase does:
// interface by interface, each attacher in turn.
func Sync(want map[string]int, attachers ...*Attacher) map[string]error {
	errs := map[string]error{}
	for _, a := range attachers {
		maps.Copy(errs, a.Detach(want))
	}
	for name, idx := range want {
		q := &Qdisc{}
		for _, a := range attachers {
			if _, err := a.Attach(name, idx, q); err != nil {
				errs[name] = err
			}
		}
	}
	return errs
}
