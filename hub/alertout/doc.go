// Package alertout delivers the hub's alert changes to receivers outside
// it: a webhook (an HTTP POST of the alert's JSON per change, with an
// Idempotency-Key header id:revision) or an MQTT topic on the hub's broker
// (QoS 1, not retained). Each Output reads the hub's alert-change log in
// sequence order and stores the sequence it delivered up to through Log,
// so after a restart it sends only what it had not delivered, the last
// change perhaps again (at least once). A receiver that is down or
// answers 5xx, 408 or 429 is retried with exponential backoff capped at
// max_backoff, and not before its Retry-After (seconds or a date, at most
// five minutes); a webhook's other 4xx refuses that change for good: it is
// logged, counted and skipped. Parse reads the hub's `alert_outputs:`
// configuration; docs/RULES.md describes the keys.
package alertout
