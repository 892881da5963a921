package main

// The relay's frames, the one protocol between the front and its node (cluster/node/front.py
// reads and writes the same layout; tests/cluster/test_front.py holds both to it).
//
// Every frame: u32 length of what follows, u8 kind, then the kind's fields. Integers are
// little-endian; a string or byte field is its u16 or u32 length, then its bytes.
//
//	HELLO     node -> front  u16 version, u16 count, count x (u16 len, method)   the relayed methods, by index
//	LISTENING front -> node  u16 len, address                                    the public port is bound
//	CALL      front -> node  u64 id, u16 method index, metadata, rest: request bytes
//	ANSWER    node -> front  u64 id, u16 status code, u32 len, details, metadata, rest: response bytes
//	CANCEL    front -> node  u64 id                                              the caller went away
//	STOP      node -> front  u32 grace in ms                                     drain, then exit
//
// metadata: u16 count, count x (u16 len, key, u32 len, value).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	protocolVersion = 1

	kindHello     = 1
	kindListening = 2
	kindCall      = 3
	kindAnswer    = 4
	kindCancel    = 5
	kindStop      = 6

	// maxFrameBytes bounds what either side reads as one frame: an answer carries a response of at
	// most the node's 64 MiB send limit, plus its details and trailers.
	maxFrameBytes = 80 << 20
)

var le = binary.LittleEndian

// pair is one metadata entry: gRPC metadata keeps order and allows a key more than once.
type pair struct {
	key, value string
}

// frameBuilder appends one frame's fields; finish writes its length in front.
type frameBuilder struct {
	buf []byte
}

func newFrame(kind byte, sizeHint int) *frameBuilder {
	b := &frameBuilder{buf: make([]byte, 5, 5+sizeHint)}
	b.buf[4] = kind
	return b
}

func (b *frameBuilder) u16(v int) { b.buf = le.AppendUint16(b.buf, uint16(v)) }
func (b *frameBuilder) u32(v int) { b.buf = le.AppendUint32(b.buf, uint32(v)) }
func (b *frameBuilder) u64(v uint64) {
	b.buf = le.AppendUint64(b.buf, v)
}
func (b *frameBuilder) str16(s string) { b.u16(len(s)); b.buf = append(b.buf, s...) }
func (b *frameBuilder) str32(s string) { b.u32(len(s)); b.buf = append(b.buf, s...) }
func (b *frameBuilder) raw(p []byte)   { b.buf = append(b.buf, p...) }

func (b *frameBuilder) metadata(md []pair) {
	b.u16(len(md))
	for _, p := range md {
		b.str16(p.key)
		b.str32(p.value)
	}
}

func (b *frameBuilder) finish() []byte {
	le.PutUint32(b.buf[:4], uint32(len(b.buf)-4))
	return b.buf
}

func callFrame(id uint64, method int, md []pair, request []byte) []byte {
	size := 8 + 2 + 2 + len(request)
	for _, p := range md {
		size += 6 + len(p.key) + len(p.value)
	}
	b := newFrame(kindCall, size)
	b.u64(id)
	b.u16(method)
	b.metadata(md)
	b.raw(request)
	return b.finish()
}

func cancelFrame(id uint64) []byte {
	b := newFrame(kindCancel, 8)
	b.u64(id)
	return b.finish()
}

func listeningFrame(address string) []byte {
	b := newFrame(kindListening, 2+len(address))
	b.str16(address)
	return b.finish()
}

// readFrame reads one whole frame: its kind and the fields after it.
func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := le.Uint32(head[:4])
	if n < 1 || n > maxFrameBytes {
		return 0, nil, fmt.Errorf("a relay frame of %d bytes (the limit is %d)", n, maxFrameBytes)
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return head[4], body, nil
}

var errShort = errors.New("a relay frame ends inside a field")

// fields reads a frame's fields in order; the first read past the end sets err and every later
// read returns zero values, so a caller checks err once at the end.
type fields struct {
	p   []byte
	err error
}

func (f *fields) take(n int) []byte {
	if f.err != nil {
		return nil
	}
	if n > len(f.p) {
		f.err = errShort
		return nil
	}
	out := f.p[:n]
	f.p = f.p[n:]
	return out
}

func (f *fields) u16() int {
	b := f.take(2)
	if b == nil {
		return 0
	}
	return int(le.Uint16(b))
}

func (f *fields) u32() int {
	b := f.take(4)
	if b == nil {
		return 0
	}
	return int(le.Uint32(b))
}

func (f *fields) u64() uint64 {
	b := f.take(8)
	if b == nil {
		return 0
	}
	return le.Uint64(b)
}

func (f *fields) str16() string { return string(f.take(f.u16())) }
func (f *fields) str32() string { return string(f.take(f.u32())) }

func (f *fields) metadata() []pair {
	n := f.u16()
	if f.err != nil || n == 0 {
		return nil
	}
	md := make([]pair, 0, n)
	for i := 0; i < n && f.err == nil; i++ {
		key := f.str16()
		md = append(md, pair{key, f.str32()})
	}
	return md
}

// rest is what is left of the frame: the request or response bytes.
func (f *fields) rest() []byte {
	out := f.p
	f.p = nil
	return out
}

// answer is a relayed call's outcome as the node sends it.
type answer struct {
	code     uint32
	details  string
	trailers []pair
	body     []byte
}

func parseAnswer(p []byte) (uint64, *answer, error) {
	f := fields{p: p}
	id := f.u64()
	a := &answer{code: uint32(f.u16())}
	a.details = f.str32()
	a.trailers = f.metadata()
	a.body = f.rest()
	return id, a, f.err
}

type hello struct {
	version int
	methods []string
}

func parseHello(p []byte) (*hello, error) {
	f := fields{p: p}
	h := &hello{version: f.u16()}
	n := f.u16()
	for i := 0; i < n && f.err == nil; i++ {
		h.methods = append(h.methods, f.str16())
	}
	return h, f.err
}
