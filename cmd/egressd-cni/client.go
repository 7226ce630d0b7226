package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/egressd/egressd/nodeagent/cniserver/cniapi"
)

// The plugin speaks HTTP/1.0 to egressd's socket itself, one request per connection: the server
// ends its answer by closing (never chunks it). A plugin process runs once per pod on a busy
// node, and net/http's client was a fifth of its CPU time (package initialisation, transport
// goroutines): 3.0 ms against 2.4 ms per ADD here.

// unreachable is egressd not answering (no socket, refused, hung up).
type unreachable struct{ err error }

func (u unreachable) Error() string { return "egressd does not answer: " + u.err.Error() }

// call sends one request to egressd, retrying while it does not answer, until the deadline.
func call(ctx context.Context, socket, method, path string, body any) error {
	_, err := exchange(ctx, socket, method, path, body)
	return err
}

// exchange is call returning egressd's answer.
func exchange(ctx context.Context, socket, method, path string, body any) (*cniapi.Response, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	for {
		status, answer, err := roundTrip(ctx, socket, method, path, payload)
		if err == nil {
			var r cniapi.Response
			jerr := json.Unmarshal(answer, &r)
			if status/100 == 2 && jerr == nil {
				return &r, nil
			}
			if status/100 == 2 {
				return nil, types.NewError(types.ErrInternal, "egressd-cni: egressd's answer does not decode", jerr.Error())
			}
			if jerr != nil || r.Error == "" {
				return nil, types.NewError(types.ErrInternal, fmt.Sprintf("egressd-cni: egressd answered %d", status), string(answer))
			}
			return nil, types.NewError(r.Code, "egressd-cni: "+r.Error, "")
		}
		// Not there (restarting), refused, or it hung up mid-call: try again until the deadline.
		select {
		case <-ctx.Done():
			return nil, unreachable{err}
		case <-time.After(retryEvery):
		}
	}
}

// roundTrip sends one request and returns the answer's status code and body. An answer that
// is cut short (fewer bytes than its Content-Length) or framed otherwise than by its length or
// the end of the connection is an error: the caller tries again.
func roundTrip(ctx context.Context, socket, method, path string, payload []byte) (int, []byte, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", socket)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(d); err != nil {
			return 0, nil, err
		}
	}
	head := fmt.Sprintf("%s %s HTTP/1.0\r\nHost: egressd\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		method, path, len(payload))
	if _, err := conn.Write(append([]byte(head), payload...)); err != nil {
		return 0, nil, err
	}
	answer, err := io.ReadAll(io.LimitReader(conn, maxAnswer+1))
	if err != nil {
		return 0, nil, err
	}
	if len(answer) > maxAnswer {
		return 0, nil, fmt.Errorf("answer over %d bytes", maxAnswer)
	}
	// "HTTP/1.x 200 OK\r\n" headers "\r\n\r\n" body
	header, body, ok := bytes.Cut(answer, []byte("\r\n\r\n"))
	lines := bytes.Split(header, []byte("\r\n"))
	fields := bytes.Fields(lines[0])
	if !ok || len(fields) < 2 || !bytes.HasPrefix(fields[0], []byte("HTTP/")) {
		return 0, nil, fmt.Errorf("malformed answer %q", truncate(answer))
	}
	status, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, nil, fmt.Errorf("malformed status line %q", lines[0])
	}
	for _, l := range lines[1:] {
		name, value, _ := bytes.Cut(l, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 || n > len(body) {
				return 0, nil, fmt.Errorf("answer of %d bytes, %q announced", len(body), value)
			}
			body = body[:n]
		case bytes.EqualFold(name, []byte("Transfer-Encoding")) && !bytes.EqualFold(value, []byte("identity")):
			return 0, nil, fmt.Errorf("answer in transfer encoding %q", value)
		}
	}
	return status, body, nil
}

// maxAnswer bounds an answer of egressd (an EgressRouter's configuration is the largest).
const maxAnswer = 1 << 20

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}
