package broker

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/wire"
)

// BrokerSecurity configures who may connect to the embedded broker and
// what each device may do there. The zero value is the quick start: every
// client is accepted and unrestricted.
//
// A client that presents credentials (a username, or a TLS client
// certificate when ClientCAFile is set) is verified and gets an identity,
// its device id: the certificate's CN, or the username. A verified device
// may publish only to edge/v1/{id}/batch, .../status and .../time/req, set
// its last will only on .../status, and subscribe only to edge/v1/{id}/ack
// and .../time/resp. A client without credentials is refused when
// DenyAnonymous is set, and otherwise accepted without restrictions (set
// DenyAnonymous in production). The hub's own inline client is exempt.
//
// In every mode, only the hub publishes on a device's ack and time
// response topics (a client's will may not name them either), only a
// device's status is retained, within MaxRetainedBytes (retainGuard), and
// failed password checks are throttled (Throttle).
type BrokerSecurity struct {
	// Credentials verify usernames and passwords. Nil: a client that sends
	// a username is refused.
	Credentials *Credentials
	// TLS, when set, makes the listener TLS. Build it with BrokerTLSConfig.
	TLS *tls.Config
	// DenyAnonymous refuses clients that present no credentials.
	DenyAnonymous bool
	// MaxConnsPerDevice bounds the connections (distinct client ids) of one
	// verified device; a reconnect with the same client id takes over its
	// old session and is always allowed. 0: unlimited.
	MaxConnsPerDevice int
	// MaxRetainedBytes bounds the payload of a retained message (a
	// device's status). 0: DefaultMaxRetainedBytes.
	MaxRetainedBytes int
	// Throttle slows down clients that fail the password check.
	Throttle AuthThrottle
}

// enabled reports whether clients are verified (the connection bound
// applies to verified devices only).
func (b BrokerSecurity) enabled() bool {
	return b.Credentials != nil || b.TLS != nil || b.DenyAnonymous
}

// BrokerTLSConfig loads the broker's certificate and key and, when
// clientCAFile is set, the CAs that sign device certificates; a client
// that presents a certificate must then present a valid one, and its CN is
// its device id.
func BrokerTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("broker tls cert/key: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("broker tls client ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker tls client ca %s: no PEM certificate in it", clientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// disconnectRevoked labels clients disconnected because their device's
// credentials were removed or changed by a reload.
const disconnectRevoked = "credentials_revoked"

// brokerMetrics count what the embedded broker refused.
type brokerMetrics struct {
	refused     *prometheus.CounterVec // connections refused, by why
	denied      *prometheus.CounterVec // publishes and subscriptions denied, by action
	disconnects *prometheus.CounterVec // clients dropped for a protocol error, by why
	dropped     prometheus.Counter     // messages dropped on a full client queue
	conns       prometheus.GaugeFunc
	handedOff   prometheus.CounterFunc // device messages handed to the hub (handoff)
	routed      prometheus.CounterFunc // device messages routed through the topic index

	retained  *prometheus.CounterVec  // retained messages not kept, by why (retainGuard)
	bcrypt    *prometheus.CounterVec  // bcrypt comparisons run, by result
	cacheHits prometheus.Counter      // passwords verified from the cache, without bcrypt
	tracked   [2]prometheus.GaugeFunc // client ids and sources the throttle remembers
}

// Why a connection was refused.
const (
	refusedBadCredentials = "bad_credentials"
	refusedNoCredentials  = "no_credentials"
	refusedBadIdentity    = "bad_identity"
	refusedTooMany        = "too_many_connections"
	refusedClientID       = "client_id_in_use"
	refusedWill           = "will_not_allowed"
	refusedThrottled      = "throttled" // too many failed checks from this client id or source
	refusedBusy           = "auth_busy" // the queue of password checks is full
)

func newBrokerMetrics(reg prometheus.Registerer, conns func() float64, direct *handoff, thr *authThrottle) (*brokerMetrics, error) {
	f := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "edgeflow", Subsystem: "hub_broker", Name: name, Help: help}
	}
	deviceMessages := func(path string, n *atomic.Uint64) prometheus.CounterFunc {
		o := f("device_messages_total", "Device batches and time requests the embedded broker handed to the hub directly (handed_off) "+
			"or routed through its topic index (routed: another client subscribes to them, or they were retained).")
		o.ConstLabels = prometheus.Labels{"path": path}
		return prometheus.NewCounterFunc(o, func() float64 { return float64(n.Load()) })
	}
	m := &brokerMetrics{
		refused:     prometheus.NewCounterVec(f("refused_connections_total", "Connections the embedded broker refused, by why."), []string{"why"}),
		denied:      prometheus.NewCounterVec(f("acl_denied_total", "Publishes and subscriptions outside the client's device topics, by action."), []string{"action"}),
		disconnects: prometheus.NewCounterVec(f("protocol_disconnects_total", "Clients disconnected for a protocol violation, by why."), []string{"why"}),
		dropped: prometheus.NewCounter(f("dropped_messages_total", "Messages to a client dropped because its queue (mqtt-client-queue) was full: "+
			"the client had stopped reading. A dropped ack makes its agent resend the batch.")),
		conns: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub_broker", Name: "device_connections",
			Help: "Open connections of verified devices."}, conns),
		handedOff: deviceMessages("handed_off", &direct.handed),
		routed:    deviceMessages("routed", &direct.routed),
		retained: prometheus.NewCounterVec(f("retained_refused_total", "Retained publishes and last wills the embedded broker did not retain "+
			"(delivered as plain messages), by why: not_status_topic or too_large (mqtt-max-retained-bytes)."), []string{"why"}),
		bcrypt: prometheus.NewCounterVec(f("bcrypt_checks_total", "Password checks that ran a bcrypt comparison, by result. "+
			"CONNECTs refused by the throttle (refused_connections_total{why=\"throttled\"}) run none."), []string{"result"}),
		cacheHits: prometheus.NewCounter(f("password_cache_hits_total", "Passwords verified as the last one that verified for their device, without bcrypt.")),
	}
	for i, table := range []string{"client", "source"} {
		m.tracked[i] = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "edgeflow", Subsystem: "hub_broker", Name: "auth_throttle_tracked",
			Help:        "Client ids (per source) and sources whose failed password checks the embedded broker remembers (a bounded table each).",
			ConstLabels: prometheus.Labels{"table": table}}, func() float64 {
			c, s := thr.tracked()
			return float64([2]int{c, s}[i])
		})
	}
	for _, w := range []string{refusedBadCredentials, refusedNoCredentials, refusedBadIdentity, refusedTooMany, refusedClientID, refusedWill,
		refusedThrottled, refusedBusy} {
		m.refused.WithLabelValues(w)
	}
	m.retained.WithLabelValues(retainNotStatus)
	m.retained.WithLabelValues(retainTooLarge)
	m.bcrypt.WithLabelValues("ok")
	m.bcrypt.WithLabelValues("failed")
	m.denied.WithLabelValues("publish")
	m.denied.WithLabelValues("subscribe")
	m.disconnects.WithLabelValues("packet_too_large")
	m.disconnects.WithLabelValues("not_authorized")
	m.disconnects.WithLabelValues(disconnectRevoked)
	for _, c := range []prometheus.Collector{m.refused, m.denied, m.disconnects, m.dropped, m.conns, m.handedOff, m.routed,
		m.retained, m.bcrypt, m.cacheHits, m.tracked[0], m.tracked[1]} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// deviceAuth is the embedded broker's authentication and ACL hook.
type deviceAuth struct {
	mqtt.HookBase
	sec     BrokerSecurity
	srv     *mqtt.Server
	metrics *brokerMetrics // nil: not counted
	thr     *authThrottle
	rl      *brokerLog // refused connections
	rlP     *brokerLog // refused publishes on hub-only topics

	mu    sync.Mutex
	ids   map[*mqtt.Client]string   // verified identity of each connected client
	pend  map[*mqtt.Client]string   // verified at CONNECT, session not yet established
	conns map[string]map[string]int // identity -> client id -> open connections
	// revokedPend holds pending clients whose credentials were revoked
	// before their session was established: they are disconnected as soon
	// as it is (the broker has sent CONNACK by then, so a reload racing a
	// connect must not let it through).
	revokedPend map[*mqtt.Client]bool
}

func newDeviceAuth(sec BrokerSecurity, m *brokerMetrics, log *slog.Logger) *deviceAuth {
	thr := newAuthThrottle(sec.Throttle)
	return &deviceAuth{sec: sec, metrics: m, thr: thr, rl: newBrokerLog(log, thr.o.Now), rlP: newBrokerLog(log, thr.o.Now), ids: map[*mqtt.Client]string{}, conns: map[string]map[string]int{},
		pend: map[*mqtt.Client]string{}, revokedPend: map[*mqtt.Client]bool{}}
}

// ID names the hook.
func (a *deviceAuth) ID() string { return "edgeflow-device-auth" }

// Provides lists the hook methods used.
func (a *deviceAuth) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnPublishDropped}, []byte{b})
}

// OnConnectAuthenticate verifies the client's certificate or password,
// its will topic, its client id and its device's connection count. In
// every mode, a will on a topic only the hub publishes to is refused.
func (a *deviceAuth) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if pk.Connect.WillFlag && hubOnlyTopic(pk.Connect.WillTopic) {
		return a.refuse(cl, refusedWill)
	}
	if !a.sec.enabled() {
		return true
	}
	id, why := a.identify(cl, pk)
	if why == "" && id != "" {
		why = a.admit(cl, pk, id)
	}
	if why != "" {
		return a.refuse(cl, why)
	}
	if id != "" {
		cl.Properties.Username = []byte(id)
		a.mu.Lock()
		a.pend[cl] = id
		a.mu.Unlock()
	}
	return true
}

// refuse counts and logs (at most once a second) a refused connection;
// it returns false, OnConnectAuthenticate's answer.
func (a *deviceAuth) refuse(cl *mqtt.Client, why string) bool {
	a.count("refused", why)
	client := cl.ID
	if len(client) > 128 {
		client = client[:128] + "..."
	}
	a.rl.warn("broker refused a connection", "why", why, "client", client, "remote", cl.Net.Remote)
	return false
}

// identify returns the client's verified identity ("" for an anonymous
// client that is allowed) or why it is refused.
func (a *deviceAuth) identify(cl *mqtt.Client, pk packets.Packet) (id, why string) {
	user := string(pk.Connect.Username)
	if cn, ok := peerCN(cl); ok {
		if err := wire.ValidateDeviceID(cn); err != nil {
			return "", refusedBadIdentity
		}
		if user != "" && user != cn {
			return "", refusedBadIdentity
		}
		return cn, ""
	}
	if user == "" && !pk.Connect.PasswordFlag {
		if a.sec.DenyAnonymous {
			return "", refusedNoCredentials
		}
		return "", ""
	}
	if why := a.checkPassword(cl, user, pk.Connect.Password); why != "" {
		return "", why
	}
	return user, ""
}

// checkPassword verifies user's password under the throttle: a client id
// or source with too many recent failures is refused without a check, a
// password that verified last time needs no bcrypt, and the comparisons
// that run are bounded at once (AuthThrottle).
func (a *deviceAuth) checkPassword(cl *mqtt.Client, user string, password []byte) string {
	k := keysOf(cl.Net.Remote, cl.ID)
	if a.thr.blocked(k) {
		return refusedThrottled
	}
	creds := a.sec.Credentials
	if creds == nil || wire.ValidateDeviceID(user) != nil {
		a.thr.failed(k)
		return refusedBadCredentials
	}
	if creds.cached(user, password) {
		if a.metrics != nil {
			a.metrics.cacheHits.Inc()
		}
		a.thr.succeeded(k)
		return ""
	}
	if err := a.thr.acquire(); err != nil {
		return refusedBusy
	}
	if cl.Closed() { // gave up while it waited: spend nothing on it
		a.thr.release()
		return refusedBadCredentials
	}
	ok := creds.compare(user, password)
	a.thr.release()
	result := "ok"
	if ok {
		a.thr.succeeded(k)
	} else {
		result = "failed"
		a.thr.failed(k)
	}
	if a.metrics != nil {
		a.metrics.bcrypt.WithLabelValues(result).Inc()
	}
	if !ok {
		return refusedBadCredentials
	}
	return ""
}

// peerCN is the CN of the client's verified TLS certificate.
func peerCN(cl *mqtt.Client) (string, bool) {
	tc, ok := cl.Net.Conn.(*tls.Conn)
	if !ok {
		return "", false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return "", false
	}
	return st.PeerCertificates[0].Subject.CommonName, true
}

// admit checks what a verified device asks for at CONNECT.
func (a *deviceAuth) admit(cl *mqtt.Client, pk packets.Packet, id string) string {
	if pk.Connect.WillFlag && !mayPublish(id, pk.Connect.WillTopic) {
		return refusedWill
	}
	if a.srv != nil {
		if old, ok := a.srv.Clients.Get(cl.ID); ok && string(old.Properties.Username) != id {
			return refusedClientID // taking over another device's session
		}
	}
	if a.sec.MaxConnsPerDevice > 0 {
		a.mu.Lock()
		defer a.mu.Unlock()
		// Count the client ids with a session and those admitted whose
		// session is not yet established (two CONNECTs racing would both
		// see one session otherwise), and reserve this one under the same
		// lock. A pending client that closed before its session was
		// established never reaches OnDisconnect: drop it here.
		ids := make(map[string]bool, len(a.conns[id])+1)
		for cid := range a.conns[id] {
			ids[cid] = true
		}
		for c, pid := range a.pend {
			switch {
			case c.Closed():
				delete(a.pend, c)
				delete(a.revokedPend, c)
			case pid == id && c != cl:
				ids[c.ID] = true
			}
		}
		if !ids[cl.ID] && len(ids) >= a.sec.MaxConnsPerDevice {
			return refusedTooMany
		}
		a.pend[cl] = id
	}
	return ""
}

// OnSessionEstablished records a verified client's connection, or
// disconnects it when its credentials were revoked meanwhile.
func (a *deviceAuth) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	a.mu.Lock()
	if a.revokedPend[cl] {
		delete(a.revokedPend, cl)
		delete(a.pend, cl)
		a.mu.Unlock()
		a.disconnectRevoked(cl)
		return
	}
	defer a.mu.Unlock()
	id, ok := a.pend[cl]
	if !ok {
		return
	}
	delete(a.pend, cl)
	a.ids[cl] = id
	if a.conns[id] == nil {
		a.conns[id] = map[string]int{}
	}
	a.conns[id][cl.ID]++
}

// OnPublishDropped counts a message the broker dropped because the
// client's queue was full.
func (a *deviceAuth) OnPublishDropped(*mqtt.Client, packets.Packet) {
	if a.metrics != nil {
		a.metrics.dropped.Inc()
	}
}

// OnDisconnect forgets the client's connection and counts protocol
// violations.
func (a *deviceAuth) OnDisconnect(cl *mqtt.Client, err error, _ bool) {
	switch {
	case errors.Is(err, packets.ErrPacketTooLarge):
		a.count("disconnects", "packet_too_large")
	case errors.Is(err, packets.ErrNotAuthorized):
		a.count("disconnects", "not_authorized")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pend, cl)
	delete(a.revokedPend, cl)
	id, ok := a.ids[cl]
	if !ok {
		return
	}
	delete(a.ids, cl)
	if held := a.conns[id]; held != nil {
		if held[cl.ID]--; held[cl.ID] <= 0 {
			delete(held, cl.ID)
		}
		if len(held) == 0 {
			delete(a.conns, id)
		}
	}
}

// OnACLCheck allows a verified device its own topics only, and no client
// (anonymous ones included) a publish on a topic only the hub publishes
// to (the hub's inline client is not checked).
func (a *deviceAuth) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if write && hubOnlyTopic(topic) {
		a.count("denied", "publish")
		if len(topic) > 128 {
			topic = topic[:128] + "..."
		}
		a.rlP.warn("broker refused a publish on a topic only the hub publishes to", "topic", topic, "client", cl.ID, "remote", cl.Net.Remote)
		return false
	}
	id, ok := a.identity(cl)
	if !ok {
		return true // anonymous (allowed) or security off
	}
	if write && mayPublish(id, topic) || !write && maySubscribe(id, topic) {
		return true
	}
	action := "subscribe"
	if write {
		action = "publish"
	}
	a.count("denied", action)
	return false
}

// identity is the verified identity of a connected client.
func (a *deviceAuth) identity(cl *mqtt.Client) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[cl]
	return id, ok
}

// identityOf is the verified identity of the connected client with this
// client id ("" if anonymous or unknown).
func (a *deviceAuth) identityOf(clientID string) string {
	if a.srv == nil || clientID == "" {
		return ""
	}
	cl, ok := a.srv.Clients.Get(clientID)
	if !ok {
		return ""
	}
	id, _ := a.identity(cl)
	return id
}

// connections is the number of open connections of verified devices.
func (a *deviceAuth) connections() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return float64(len(a.ids))
}

// count increments one of the broker's counters (none without metrics).
func (a *deviceAuth) count(counter, label string) {
	if a.metrics == nil {
		return
	}
	c := map[string]*prometheus.CounterVec{"refused": a.metrics.refused, "denied": a.metrics.denied, "disconnects": a.metrics.disconnects}[counter]
	c.WithLabelValues(label).Inc()
}

// mayPublish reports whether device id may publish to topic.
func mayPublish(id, topic string) bool {
	return topic == wire.BatchTopic(id) || topic == wire.StatusTopic(id) || topic == wire.TimeReqTopic(id)
}

// maySubscribe reports whether device id may subscribe to filter (exactly
// its own ack or time response topic: no wildcards, no shared groups).
func maySubscribe(id, filter string) bool {
	return filter == wire.AckTopic(id) || filter == wire.TimeRespTopic(id)
}

// revoke disconnects the connected clients that proved a password of one
// of devices (clients identified by a certificate keep their connection)
// and returns how many it disconnected. They may reconnect, and are then
// verified against the current credentials.
func (a *deviceAuth) revoke(devices []string) int {
	if a.srv == nil || len(devices) == 0 {
		return 0
	}
	gone := make(map[string]bool, len(devices))
	for _, d := range devices {
		gone[d] = true
	}
	var drop []*mqtt.Client
	pending := 0
	a.mu.Lock()
	for cl, id := range a.ids {
		if _, byCert := peerCN(cl); gone[id] && !byCert {
			drop = append(drop, cl)
		}
	}
	for cl, id := range a.pend {
		if cl.Closed() { // closed before its session: never reaches OnDisconnect
			delete(a.pend, cl)
			delete(a.revokedPend, cl)
			continue
		}
		if _, byCert := peerCN(cl); gone[id] && !byCert {
			a.revokedPend[cl] = true // OnSessionEstablished disconnects it
			pending++
		}
	}
	a.mu.Unlock()
	for _, cl := range drop {
		a.disconnectRevoked(cl)
	}
	return len(drop) + pending
}

// disconnectRevoked drops a client whose credentials were revoked.
func (a *deviceAuth) disconnectRevoked(cl *mqtt.Client) {
	_ = a.srv.DisconnectClient(cl, packets.ErrNotAuthorized)
	a.count("disconnects", disconnectRevoked)
	a.Log.Warn("broker disconnected a client whose credentials were revoked", "client", cl.ID, "device", string(cl.Properties.Username))
}
