// Command waitgraph-front serves a waitgraph node's gRPC port natively, so that a call's gRPC
// machinery costs the node a few microseconds of compiled code instead of a Python coroutine's.
//
// A node (`waitgraph serve`, cluster/node/front.py) starts it as its child and owns it:
//
//   - Unary calls of the methods the node names in its HELLO (every unary method of AgentService
//     and OperatorService) are relayed: request bytes and metadata go to the node as a CALL frame
//     over the socket the node handed this process (fd 3), and the node's handler, the same one it
//     would run for the call itself, answers with an ANSWER frame: status, details, trailers and
//     response bytes. The node decodes, authenticates and answers everything; this process only
//     moves bytes, so there is one implementation of the API, in Python.
//   - Every other call (event streams, health, reflection, names nobody serves) is proxied, byte
//     for byte, to the node's own gRPC server on a Unix socket only the node's user can reach.
//
// It ignores SIGINT and SIGTERM: a stop is the node's to order (STOP: stop taking calls, let
// those in flight finish for the grace, exit), so Ctrl-C on a terminal or a service manager that
// signals the whole group drains the node in its order. When the node goes away without a STOP
// (killed), the relay closes and this process exits at once, freeing the port.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // clients may compress, as Python's gRPC server allows
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rawCodec moves messages as the bytes they are: the node decodes and encodes them.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type front struct {
	relay    *relay
	relayed  map[string]int
	upstream *grpc.ClientConn
}

func main() {
	listen := flag.String("listen", "", "host:port of the public gRPC port")
	upstream := flag.String("upstream", "", "the node's own gRPC server: a Unix socket path")
	relayFd := flag.Int("relay-fd", 3, "the socket the node relays unary calls over")
	tlsCert := flag.String("tls-cert", "", "PEM server certificate (enables TLS)")
	tlsKey := flag.String("tls-key", "", "PEM private key of -tls-cert")
	tlsClientCA := flag.String("tls-client-ca", "", "PEM CA bundle: require client certificates signed by it")
	maxRecv := flag.Int("max-recv-bytes", 4<<20, "largest request accepted (RESOURCE_EXHAUSTED beyond)")
	maxSend := flag.Int("max-send-bytes", 64<<20, "largest response sent")
	bindRetry := flag.Duration("bind-retry", 3*time.Second, "how long to retry a port still held (by a front that is exiting)")
	flag.Parse()
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	if err := run(*listen, *upstream, *relayFd, *tlsCert, *tlsKey, *tlsClientCA, *maxRecv, *maxSend, *bindRetry); err != nil {
		fmt.Fprintf(os.Stderr, "waitgraph-front: %v\n", err)
		os.Exit(1)
	}
}

func run(listen, upstream string, relayFd int, tlsCert, tlsKey, tlsClientCA string, maxRecv, maxSend int, bindRetry time.Duration) error {
	if listen == "" || upstream == "" {
		return errors.New("-listen and -upstream are required")
	}
	file := os.NewFile(uintptr(relayFd), "relay")
	if file == nil {
		return fmt.Errorf("no relay socket at fd %d", relayFd)
	}
	conn, err := net.FileConn(file)
	file.Close()
	if err != nil {
		return fmt.Errorf("the relay socket at fd %d: %v", relayFd, err)
	}
	br := bufio.NewReaderSize(conn, 256<<10)
	kind, p, err := readFrame(br)
	if err != nil {
		return fmt.Errorf("reading the node's HELLO: %v", err)
	}
	if kind != kindHello {
		return fmt.Errorf("the node's first frame is of kind %d, not HELLO", kind)
	}
	h, err := parseHello(p)
	if err != nil {
		return fmt.Errorf("the node's HELLO: %v", err)
	}
	if h.version != protocolVersion {
		return fmt.Errorf("the node speaks relay protocol %d, this front %d: build the front from the same checkout (scripts/build_front)", h.version, protocolVersion)
	}
	f := &front{relay: newRelay(conn, br), relayed: make(map[string]int, len(h.methods))}
	for i, m := range h.methods {
		f.relayed[m] = i
	}

	encoding.RegisterCodec(rawCodec{})
	f.upstream, err = grpc.Dial("node",
		grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", upstream)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxSend), grpc.MaxCallSendMsgSize(maxRecv)),
	)
	if err != nil {
		return fmt.Errorf("the node's gRPC server at %s: %v", upstream, err)
	}
	opts := []grpc.ServerOption{
		grpc.UnknownServiceHandler(f.handle),
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.MaxSendMsgSize(maxSend),
	}
	if tlsCert != "" {
		creds, err := serverTLS(tlsCert, tlsKey, tlsClientCA)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(creds))
	}
	lis, err := listenRetrying(listen, bindRetry)
	if err != nil {
		return err
	}
	server := grpc.NewServer(opts...)
	served := make(chan error, 1)
	go func() { served <- server.Serve(lis) }()

	stopped := make(chan struct{})
	var stopping int32
	var stopOnce sync.Once
	onStop := func(graceMs int) {
		atomic.StoreInt32(&stopping, 1)
		stopOnce.Do(func() { // a second STOP changes nothing
			go func() {
				drained := make(chan struct{})
				go func() { server.GracefulStop(); close(drained) }()
				select {
				case <-drained:
				case <-time.After(time.Duration(graceMs) * time.Millisecond):
					server.Stop()
				}
				close(stopped)
			}()
		})
	}
	if err := f.relay.send(listeningFrame(lis.Addr().String())); err != nil {
		return err
	}
	go f.relay.readLoop(onStop)

	select {
	case <-stopped:
		return nil
	case <-f.relay.closed:
		server.Stop()
		err, _ := f.relay.err.Load().(error)
		if err == errRelayClosed {
			return errors.New("the node closed the relay without a STOP (it exited): stopping at once")
		}
		return fmt.Errorf("the relay failed: %v", err)
	case err := <-served:
		if atomic.LoadInt32(&stopping) == 1 { // a graceful stop ends Serve before it is done
			<-stopped
			return nil
		}
		return fmt.Errorf("serving %s: %v", listen, err)
	}
}

func listenRetrying(address string, retry time.Duration) (net.Listener, error) {
	deadline := time.Now().Add(retry)
	for {
		lis, err := net.Listen("tcp", address)
		if err == nil {
			return lis, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return nil, fmt.Errorf("binding %s: %v", address, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func serverTLS(certFile, keyFile, clientCA string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("tls client CA: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls client CA %s: no PEM certificate in it", clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// handle serves every call: the relayed methods through the node's handlers, the rest proxied.
func (f *front) handle(_ interface{}, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "no method name on the stream")
	}
	if index, ok := f.relayed[method]; ok {
		return f.relayCall(ss, index)
	}
	return f.proxy(ss, method)
}

func (f *front) relayCall(ss grpc.ServerStream, method int) error {
	var request []byte
	if err := ss.RecvMsg(&request); err != nil {
		if err == io.EOF {
			return status.Error(codes.Internal, "a unary call ended without its request")
		}
		return err
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	id, done, err := f.relay.call(method, forwarded(md), request)
	if err != nil {
		return stopping()
	}
	select {
	case a := <-done:
		if len(a.trailers) > 0 {
			ss.SetTrailer(toMD(a.trailers))
		}
		if a.code == uint32(codes.OK) {
			return ss.SendMsg(&a.body)
		}
		return status.Error(codes.Code(a.code), a.details)
	case <-ss.Context().Done():
		f.relay.cancel(id)
		return contextStatus(ss.Context().Err())
	case <-f.relay.closed:
		return stopping()
	}
}

func stopping() error {
	return status.Error(codes.Unavailable, "the node is stopping; call another node")
}

func contextStatus(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Canceled, err.Error())
}

// forwarded is the caller's metadata less what HTTP/2 and gRPC themselves carry, keys sorted.
func forwarded(md metadata.MD) []pair {
	keys := make([]string, 0, len(md))
	for k := range md {
		if !transportKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []pair
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, pair{k, v})
		}
	}
	return out
}

func transportKey(k string) bool {
	return strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") ||
		k == "content-type" || k == "user-agent" || k == "te"
}

func toMD(pairs []pair) metadata.MD {
	md := metadata.MD{}
	for _, p := range pairs {
		md.Append(p.key, p.value)
	}
	return md
}
