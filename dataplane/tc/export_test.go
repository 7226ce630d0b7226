package tc

// Recheck lets a test make Attach look for other programs at every call.
var Recheck = &recheck

// Sync makes a the program's attachments exactly want, as the agent's attach phase does.
func (a *Attacher) Sync(want map[string]int) map[string]error {
	errs := a.Detach(want)
	for name, idx := range want {
		if _, err := a.Attach(name, idx); err != nil {
			errs[name] = err
		}
	}
	return errs
}
