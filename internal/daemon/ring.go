package daemon

// ring keeps the most recent bytes of an output stream, up to max, addressed by absolute offset.
// It allocates only as much as it holds (growing up to max). It is not safe for concurrent use.
type ring struct {
	max   int
	buf   []byte // len(buf) < max: linear, data is buf[:size]; len(buf) == max: circular
	start int    // index in buf of the oldest byte (0 while linear)
	size  int    // bytes held
	end   int64  // absolute offset just after the newest byte
}

// first reports the absolute offset of the oldest byte held.
func (r *ring) first() int64 { return r.end - int64(r.size) }

// write appends p, dropping the oldest bytes beyond max.
func (r *ring) write(p []byte) {
	r.end += int64(len(p))
	if len(p) >= r.max {
		if len(r.buf) < r.max {
			r.buf = make([]byte, r.max)
		}
		copy(r.buf, p[len(p)-r.max:])
		r.start, r.size = 0, r.max
		return
	}
	if len(r.buf) < r.max {
		if r.size+len(p) <= r.max {
			r.buf = append(r.buf, p...)
			r.size += len(p)
			return
		}
		nb := make([]byte, r.max)
		copy(nb, r.buf[:r.size])
		r.buf = nb
	}
	for len(p) > 0 {
		w := (r.start + r.size) % r.max
		n := copy(r.buf[w:], p)
		p = p[n:]
		if r.size+n > r.max {
			drop := r.size + n - r.max
			r.start = (r.start + drop) % r.max
			r.size = r.max
		} else {
			r.size += n
		}
	}
}

// readAt copies bytes starting at absolute offset off (first() <= off <= end) into dst and reports how
// many it copied.
func (r *ring) readAt(dst []byte, off int64) int {
	idx := off - r.first()
	if idx < 0 || idx >= int64(r.size) {
		return 0
	}
	n := min(len(dst), r.size-int(idx))
	pos := (r.start + int(idx)) % len(r.buf)
	c := copy(dst[:n], r.buf[pos:])
	if c < n {
		copy(dst[c:n], r.buf)
	}
	return n
}
