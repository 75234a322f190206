// Package ratelimit bounds each device's sustained event rate for the
// hub: a token bucket of events per device (Limiter). A batch that
// arrives while its device's bucket is in debt is not applied and is
// answered RETRY_LATER with the time until the bucket is out of debt, so
// the agent keeps it and sends it again; nothing is lost. The buckets are
// bounded in number: beyond a limit, full ones are forgotten.
package ratelimit
