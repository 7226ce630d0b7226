package kernel

import (
	"log/slog"
	"time"

	"github.com/egressd/egressd/dataplane"
	"github.com/egressd/egressd/dataplane/classifier"
	"github.com/egressd/egressd/dataplane/nft"
)

// serveACLLogs logs the verdicts of the EgressFirewall rules whose namespace asks for ACL
// logging, as the classifier reports them and as nftables drops them after DNAT, until done
// closes (the classifier's reader ends with its maps).
func serveACLLogs(c *classifier.Classifier, t *nft.Table, o classifier.Options, done <-chan struct{}, log *slog.Logger) {
	go func() {
		if err := c.ServeACLLog(log); err != nil {
			log.Error("ACL logging stopped", "err", err)
		}
	}()
	aclLog := o.ACLLog
	if aclLog == nil {
		aclLog = dataplane.StderrACLLog
	}
	go t.ServeACLLog(aclLog, o.ACLLogRate, time.Second, done)
}
