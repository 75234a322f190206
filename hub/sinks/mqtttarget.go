package sinks

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// mqttTimeout bounds one connect, subscribe or the wait for a step's
// acknowledgements.
const mqttTimeout = 10 * time.Second

// mqttTarget publishes window updates on Topic/<metric> and (with
// Config.Events) events on Topic/events to an MQTT broker at QoS 1, each
// payload the row as JSON with an "id" a consumer drops duplicates by
// (MQTT 3.1.1 has no message properties). The sink's position is a
// retained QoS 1 message on PositionsTable/<name>, published after the
// broker acknowledged every message of the step: it lives where the
// messages do, so a broker that loses its state (restarted without
// persistence) loses the position with it and the sink publishes again
// from the start, rather than skip what subscribers may not have had.
// A crash between the messages and the position republishes the step
// under the same ids: at least once.
type mqttTarget struct {
	cfg      Config
	prod     producer
	log      *slog.Logger
	c        paho.Client
	names    []string
	posTopic string
}

func newMQTTTarget(cfg Config, prod producer, log *slog.Logger) *mqttTarget {
	return &mqttTarget{cfg: cfg, prod: prod, log: log, names: prod.schema().names(),
		posTopic: cfg.PositionsTable + "/" + cfg.Name}
}

func (t *mqttTarget) connected() bool { return t.c != nil && t.c.IsConnectionOpen() }

func (t *mqttTarget) close() {
	if t.c != nil {
		t.c.Disconnect(100)
		t.c = nil
	}
}

// open connects (clean session, no automatic reconnect: a lost connection
// fails the step and the sink reopens from its position) and reads the
// retained position.
func (t *mqttTarget) open(ctx context.Context) (state, error) {
	u, err := url.Parse(t.cfg.URL)
	if err != nil {
		return state{}, fmt.Errorf("broker url: %w", err)
	}
	o := paho.NewClientOptions().SetClientID("edgeflow-sink-" + t.cfg.Name).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(mqttTimeout).SetWriteTimeout(mqttTimeout).
		SetOrderMatters(true).SetKeepAlive(30 * time.Second)
	if u.User != nil {
		p, _ := u.User.Password()
		o.SetUsername(u.User.Username()).SetPassword(p)
		u.User = nil
	}
	o.AddBroker(u.String())
	c := paho.NewClient(o)
	if err := wait(ctx, c.Connect()); err != nil {
		return state{}, fmt.Errorf("connect %s: %w", u.Redacted(), err)
	}
	st, err := t.readPosition(ctx, c)
	if err != nil {
		c.Disconnect(100)
		return state{}, err
	}
	t.c = c
	return st, nil
}

// readPosition subscribes to the position topic and to a probe topic
// beside it, then publishes a probe: the broker sends a retained message
// on subscribing, before it handles the probe, so once the probe is back
// the position has arrived if the broker holds one.
func (t *mqttTarget) readPosition(ctx context.Context, c paho.Client) (state, error) {
	probeTopic := t.posTopic + "/probe"
	nonce := []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
	var (
		pos    []byte
		gotPos bool
	)
	probed := make(chan struct{})
	var once bool
	handler := func(_ paho.Client, m paho.Message) {
		switch {
		case m.Topic() == t.posTopic:
			pos, gotPos = append([]byte(nil), m.Payload()...), true
		case m.Topic() == probeTopic && string(m.Payload()) == string(nonce) && !once:
			once = true
			close(probed)
		}
	}
	if err := wait(ctx, c.SubscribeMultiple(map[string]byte{t.posTopic: 1, probeTopic: 1}, handler)); err != nil {
		return state{}, fmt.Errorf("subscribe to position topic %s: %w", t.posTopic, err)
	}
	if err := wait(ctx, c.Publish(probeTopic, 1, false, nonce)); err != nil {
		return state{}, fmt.Errorf("publish probe to %s: %w", probeTopic, err)
	}
	select {
	case <-probed:
	case <-ctx.Done():
		return state{}, ctx.Err()
	case <-time.After(mqttTimeout):
		return state{}, fmt.Errorf("read position topic %s: the probe did not come back within %v (does the broker let the sink subscribe to %s/#?)",
			t.posTopic, mqttTimeout, t.cfg.PositionsTable)
	}
	if err := wait(ctx, c.Unsubscribe(t.posTopic, probeTopic)); err != nil {
		return state{}, fmt.Errorf("unsubscribe from %s: %w", t.posTopic, err)
	}
	// The handler ran on paho's goroutine before probed was closed.
	if !gotPos || len(pos) == 0 {
		return state{}, nil
	}
	st, err := decodeNATSState(pos)
	if err != nil {
		return state{}, fmt.Errorf("position topic %s: %w", t.posTopic, err)
	}
	return st, nil
}

// commit publishes every window update and event at QoS 1, waits for the
// broker's acknowledgements, then publishes the position (retained).
func (t *mqttTarget) commit(ctx context.Context, out output, _, next state) (int64, error) {
	toks := make([]paho.Token, 0, len(out.rows)+len(out.events))
	topics := make([]string, 0, cap(toks))
	for _, r := range out.rows {
		metric, body, _, err := updateMessage(t.cfg.Name, t.names, r)
		if err != nil {
			return 0, err
		}
		topic := t.cfg.Topic + "/" + metric
		toks, topics = append(toks, t.c.Publish(topic, 1, false, body)), append(topics, topic)
	}
	for _, r := range out.events {
		body, _, err := eventMessage(r)
		if err != nil {
			return 0, err
		}
		topic := t.cfg.Topic + "/" + eventsToken
		toks, topics = append(toks, t.c.Publish(topic, 1, false, body)), append(topics, topic)
	}
	for i, tok := range toks {
		if err := wait(ctx, tok); err != nil {
			return 0, fmt.Errorf("publish to %s: %w", topics[i], err)
		}
	}
	if err := wait(ctx, t.c.Publish(t.posTopic, 1, true, encodeNATSState(next))); err != nil {
		return 0, fmt.Errorf("publish position to %s: %w", t.posTopic, err)
	}
	return int64(len(toks)), nil
}

// wait waits for tok up to mqttTimeout or the end of ctx.
func wait(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(mqttTimeout):
		return fmt.Errorf("no answer from the broker within %v", mqttTimeout)
	}
}
