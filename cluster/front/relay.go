package main

// The relay: unary calls handed to the node over the socket it gave this process, and their
// answers handed back. Each caller's goroutine writes its own CALL; one goroutine reads ANSWERs
// and wakes the call each one belongs to.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// errRelayClosed answers every call still waiting when the node closes the relay (it stopped
// or died): nothing more can be answered.
var errRelayClosed = errors.New("the node closed the relay")

type relay struct {
	conn   net.Conn
	reader *bufio.Reader

	mu      sync.Mutex
	pending map[uint64]chan *answer
	nextID  uint64

	closed    chan struct{}
	closeOnce sync.Once
	err       atomic.Value // error: why the relay closed
}

// newRelay takes the reader that read the HELLO: it may hold what followed it.
func newRelay(conn net.Conn, reader *bufio.Reader) *relay {
	return &relay{
		conn:    conn,
		reader:  reader,
		pending: make(map[uint64]chan *answer),
		closed:  make(chan struct{}),
	}
}

// call sends one request and returns the channel its answer arrives on, and its id.
func (r *relay) call(method int, md []pair, request []byte) (uint64, chan *answer, error) {
	done := make(chan *answer, 1)
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.pending[id] = done
	r.mu.Unlock()
	if err := r.send(callFrame(id, method, md, request)); err != nil {
		r.forget(id)
		return 0, nil, err
	}
	return id, done, nil
}

// cancel tells the node the caller went away, so it can stop the handler as gRPC would.
func (r *relay) cancel(id uint64) {
	if r.forget(id) {
		_ = r.send(cancelFrame(id))
	}
}

func (r *relay) forget(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pending[id]
	delete(r.pending, id)
	return ok
}

// send writes one frame from the caller's goroutine: a net.Conn holds its write lock for a whole
// Write, so frames never interleave, and no hand-off to another goroutine delays a lone call
// (the node reads what a burst wrote in one read all the same).
func (r *relay) send(frame []byte) error {
	select {
	case <-r.closed:
		return errRelayClosed
	default:
	}
	if _, err := r.conn.Write(frame); err != nil {
		r.close(err)
		return errRelayClosed
	}
	return nil
}

func (r *relay) close(err error) {
	r.closeOnce.Do(func() {
		r.err.Store(err)
		close(r.closed)
		_ = r.conn.Close()
	})
}

// readLoop delivers answers until the node closes the relay; onStop gets a STOP's grace.
func (r *relay) readLoop(onStop func(graceMs int)) {
	for {
		kind, p, err := readFrame(r.reader)
		if err != nil {
			// A node that exits closes its end; one killed with our frames unread resets it.
			if err == io.EOF || err == io.ErrUnexpectedEOF || errors.Is(err, syscall.ECONNRESET) {
				err = errRelayClosed
			}
			r.close(err)
			return
		}
		switch kind {
		case kindAnswer:
			id, a, err := parseAnswer(p)
			if err != nil {
				r.close(err)
				return
			}
			r.mu.Lock()
			done, ok := r.pending[id]
			delete(r.pending, id)
			r.mu.Unlock()
			if ok { // else the caller went away first
				done <- a
			}
		case kindStop:
			f := fields{p: p}
			grace := f.u32()
			if f.err != nil {
				r.close(f.err)
				return
			}
			onStop(grace)
		default:
			r.close(errors.New("the node sent a frame of an unknown kind"))
			return
		}
	}
}
