package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The plugin's HTTP/1.0 client takes an answer framed by its length or by the end of the
// connection, and refuses one cut short or chunked (the caller tries again).
func TestRoundTripFraming(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		status       int
		body         string // "" with status 0: an error
	}{
		{"length", "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 200, "{}"},
		{"end of connection", "HTTP/1.0 503 Service Unavailable\r\n\r\n{\"error\":\"x\"}", 503, `{"error":"x"}`},
		{"bytes past the length", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}junk", 200, "{}"},
		{"cut short", "HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n{}", 0, ""},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 0, ""},
		{"not HTTP", "{}", 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			socket := filepath.Join(t.TempDir(), "s.sock")
			l, err := net.Listen("unix", socket)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := make(chan string, 1)
			go func() {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				buf := make([]byte, 4096)
				n, _ := conn.Read(buf)
				got <- string(buf[:n])
				_, _ = io.WriteString(conn, c.answer)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			status, body, err := roundTrip(ctx, socket, "POST", "/v1/add", []byte(`{"a":1}`))
			if c.status == 0 {
				if err == nil {
					t.Errorf("answer %q taken: %d %q", c.answer, status, body)
				}
				return
			}
			if err != nil || status != c.status || string(body) != c.body {
				t.Errorf("got %d %q %v, want %d %q", status, body, err, c.status, c.body)
			}
			req := <-got
			if !strings.HasPrefix(req, "POST /v1/add HTTP/1.0\r\n") || !strings.Contains(req, "Content-Length: 7\r\n") || !strings.HasSuffix(req, "\r\n\r\n{\"a\":1}") {
				t.Errorf("request %q", req)
			}
		})
	}
}
