// flowlake-routing: the BMP collector (issue 33). Routers send BMP (RFC 7854; Loc-RIB,
// RFC 9069) to --listen; each session (named by its source address) fills one routing
// table, IPv4 and IPv6 unicast, that answers lookups over the Unix socket --socket
// (api.go). `flowlake up` starts it when [routing] enabled = true (collectors/routing/
// service.py passes the settings); docs/guide/routing.md describes it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(map[string]string(p)) }
func (p pairs) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" || val == "" {
		return fmt.Errorf("%q: expected EXPORTER=ROUTER", v)
	}
	p[k] = val
	return nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("flowlake-routing: ")
	listen := flag.String("listen", "127.0.0.1:10179", "BMP listen address (host:port)")
	socket := flag.String("socket", "", "Unix socket of the lookup/status interface")
	maxRoutes := flag.Int("max-routes", 5000000, "paths per router (all peers and RIB views) before its session is cut off; 0 = no bound")
	holdDown := flag.Duration("hold-down", time.Minute, "a router cut off for --max-routes is refused this long")
	routerFor := pairs{}
	flag.Var(routerFor, "router-for", "EXPORTER=ROUTER: flows of EXPORTER use ROUTER's table (repeatable)")
	flag.Parse()
	if *socket == "" {
		log.Fatal("--socket is required")
	}

	c := newCollector(*maxRoutes, *holdDown)
	c.routerFor = routerFor
	c.listenAddr = *listen

	bmpLn, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("cannot listen for BMP on %s: %v ([routing] bmp_bind / bmp_port)", *listen, err)
	}
	_ = os.Remove(*socket)
	apiLn, err := net.Listen("unix", *socket)
	if err != nil {
		log.Fatalf("cannot open the lookup socket %s: %v", *socket, err)
	}
	log.Printf("listening for BMP on %s, lookups on %s, at most %d paths per router", bmpLn.Addr(), *socket, *maxRoutes)
	go c.serveAPI(apiLn)
	go func() {
		for {
			conn, err := bmpLn.Accept()
			if err != nil {
				log.Printf("BMP listener: %v", err)
				return
			}
			go c.serve(conn)
		}
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	log.Printf("%v: stopping", s)
	bmpLn.Close()
	apiLn.Close()
	_ = os.Remove(*socket)
}
