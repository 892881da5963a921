package main

// The proxy: a call the front does not relay goes to the node's own gRPC server as it came, one
// stream for one stream, messages as bytes both ways, the caller's metadata and deadline with it,
// the node's headers, trailers and status back.

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

var anyStream = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

func (f *front) proxy(ss grpc.ServerStream, method string) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	in, _ := metadata.FromIncomingContext(ss.Context())
	out := metadata.MD{}
	for _, p := range forwarded(in) {
		out.Append(p.key, p.value)
	}
	cs, err := grpc.NewClientStream(metadata.NewOutgoingContext(ctx, out), anyStream, f.upstream, method)
	if err != nil {
		return err
	}
	up := make(chan error, 1)
	go func() { // the caller's messages to the node; the caller's half-close, then nothing more
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if err == io.EOF {
					err = cs.CloseSend()
				}
				up <- err
				return
			}
			if err := cs.SendMsg(&m); err != nil {
				up <- err
				return
			}
		}
	}()
	headerSent := false
	for {
		var m []byte
		err := cs.RecvMsg(&m)
		if !headerSent {
			headerSent = true
			if h, herr := cs.Header(); herr == nil && len(h) > 0 {
				if err := ss.SendHeader(h); err != nil {
					return err
				}
			}
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				return nil
			}
			return err // the node's status, code and message as it sent them
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}
