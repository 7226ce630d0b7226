// Command labpod is the program of the real node's test pods: it sends numbered UDP datagrams
// to each target at a fixed interval for a while, prints how many it sent to each, and then
// waits to be stopped, so that an external host's count can be compared with what left.
//
//	labpod [-every 20ms] [-for 60s] HOST:PORT...
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	every := flag.Duration("every", 20*time.Millisecond, "interval between datagrams to each target")
	dur := flag.Duration("for", time.Minute, "how long to send")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: labpod [-every D] [-for D] HOST:PORT...")
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for _, target := range flag.Args() {
		conn, err := net.Dial("udp", target)
		if err != nil {
			fmt.Fprintf(os.Stderr, "labpod: %s: %v\n", target, err)
			os.Exit(1)
		}
		fmt.Printf("streaming %s from %s every %s for %s\n", target, conn.LocalAddr(), *every, *dur)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent, failed := stream(conn, *every, *dur)
			fmt.Printf("sent %s %d failed %d\n", target, sent, failed)
		}()
	}
	wg.Wait()
	fmt.Println("done")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}

// stream sends numbered datagrams on conn until d has passed; failed counts send errors.
func stream(conn net.Conn, every, d time.Duration) (sent, failed int) {
	t := time.NewTicker(every)
	defer t.Stop()
	end := time.Now().Add(d)
	for seq := 0; time.Now().Before(end); seq++ {
		if _, err := fmt.Fprintf(conn, "labpod %d", seq); err != nil {
			failed++
		} else {
			sent++
		}
		<-t.C
	}
	return sent, failed
}
