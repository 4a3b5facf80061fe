package dnsserver

import (
	"net/netip"
	"time"
)

func (s *Server) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// clientLocked returns client's state, creating it with a full bucket; nil when too many clients are
// tracked already.
func (s *Server) clientLocked(client netip.Addr, now time.Time) *clientState {
	if st, ok := s.clients[client]; ok {
		return st
	}
	if s.clients == nil {
		s.clients = make(map[netip.Addr]*clientState)
	}
	if len(s.clients) >= sweepAtLeast {
		s.sweepLocked(now)
		if len(s.clients) >= maxClients {
			return nil
		}
	}
	st := &clientState{tokens: float64(s.burst()), last: now}
	s.clients[client] = st
	return st
}

// sweepLocked forgets the clients with nothing in flight whose bucket has refilled: a new state for
// them would be the same.
func (s *Server) sweepLocked(now time.Time) {
	rate, burst := s.rate(), float64(s.burst())
	for c, st := range s.clients {
		if st.inFlight == 0 && st.tcpConns == 0 && (rate < 0 || st.tokens+now.Sub(st.last).Seconds()*rate >= burst) {
			delete(s.clients, c)
		}
	}
}

func (s *Server) rate() float64 {
	if s.QueriesPerSecond == 0 {
		return DefaultQueriesPerSecond
	}
	return s.QueriesPerSecond
}

func (s *Server) burst() int { return intOr(s.Burst, DefaultBurst) }

// takeTokenLocked refills st's bucket and takes one token if there is one.
func (s *Server) takeTokenLocked(st *clientState, now time.Time) bool {
	rate := s.rate()
	if rate < 0 {
		return true
	}
	if el := now.Sub(st.last).Seconds(); el > 0 {
		st.tokens = min(float64(s.burst()), st.tokens+el*rate)
	}
	st.last = now
	if st.tokens < 1 {
		return false
	}
	st.tokens--
	return true
}

// takeToken reports whether client may send one more query now, and counts it.
func (s *Server) takeToken(client netip.Addr) bool {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.clientLocked(client, now)
	return st != nil && s.takeTokenLocked(st, now)
}

// admitUDP reports whether a UDP query from client may be handled now and, if so, counts it in
// flight; the caller must then call releaseUDP. A query that finds no room is dropped without
// taking a token.
func (s *Server) admitUDP(client netip.Addr) bool {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.clientLocked(client, now)
	if st == nil || st.inFlight >= intOr(s.MaxInFlightPerClient, DefaultMaxInFlightPerClient) ||
		s.inFlight >= intOr(s.MaxInFlight, DefaultMaxInFlight) {
		return false
	}
	if !s.takeTokenLocked(st, now) {
		return false
	}
	st.inFlight++
	s.inFlight++
	return true
}

func (s *Server) releaseUDP(client netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.clients[client]; ok {
		st.inFlight--
	}
	s.inFlight--
}

// admitTCPConn reports whether client may open one more TCP connection and, if so, counts it; the
// caller must then call releaseTCPConn.
func (s *Server) admitTCPConn(client netip.Addr) bool {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.clientLocked(client, now)
	if st == nil || st.tcpConns >= intOr(s.MaxTCPConnsPerClient, DefaultMaxTCPConnsPerClient) ||
		s.tcpConns >= intOr(s.MaxTCPConns, DefaultMaxTCPConns) {
		return false
	}
	st.tcpConns++
	s.tcpConns++
	return true
}

func (s *Server) releaseTCPConn(client netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.clients[client]; ok {
		st.tcpConns--
	}
	s.tcpConns--
}
