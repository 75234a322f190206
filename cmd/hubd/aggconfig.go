package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/viper"

	"edgeflow/aggregate"
	"edgeflow/internal/confval"
)

// The aggregate: section of the YAML configures the event-time engine;
// its keys are aggregate.Options' YAML names, also settable as
// HUBD_AGGREGATE_<KEY> (e.g. HUBD_AGGREGATE_RESOLUTION=5s). Zero values
// take the engine's defaults.
var (
	aggDurationKeys = []string{"resolution", "allowed_lateness", "late_horizon", "idle_timeout", "max_future_skew",
		"watermark_interval", "evict_after", "max_session_span", "partials_retention", "future_horizon"}
	aggIntKeys = []string{"max_series", "max_live_partials", "max_tags_per_event", "sketch_max_bins", "max_query_results",
		"max_query_partials", "stream_buffer", "max_pending", "late_log_size", "query_cache_partials",
		"quarantine_size", "max_series_per_device"}
	aggOtherKeys      = []string{"enabled", "windows", "tag_keys", "sketch_accuracy", "disable_merged_stream", "downsample"}
	aggWindowKeys     = []string{"name", "kind", "size", "slide", "gap"}
	aggDownsampleKeys = []string{"after", "resolution"}
)

// setAggregateDefaults declares the aggregate keys so that the environment
// can set them (viper only looks up the environment for known keys).
func setAggregateDefaults(v *viper.Viper) {
	v.SetDefault("aggregate.enabled", true)
	for _, k := range slices.Concat(aggDurationKeys, aggIntKeys) {
		v.SetDefault("aggregate."+k, 0)
	}
	v.SetDefault("aggregate.sketch_accuracy", 0)
	v.SetDefault("aggregate.disable_merged_stream", false)
	v.SetDefault("aggregate.tag_keys", []string{})
	v.SetDefault("aggregate.windows", []any{})
	v.SetDefault("aggregate.downsample", []any{})
}

// isAggregateKey reports whether a config file key is a known aggregate key.
func isAggregateKey(k string) bool {
	name, ok := strings.CutPrefix(k, "aggregate.")
	return ok && slices.Contains(slices.Concat(aggDurationKeys, aggIntKeys, aggOtherKeys), name)
}

// aggregateFromViper reads the aggregate section; nil when disabled.
func aggregateFromViper(v *viper.Viper) (*aggregate.Options, error) {
	k := &confval.Keys{Get: v.Get}
	if !k.Bool("aggregate.enabled") { // false, or not a boolean (k.Err says so)
		return nil, k.Err()
	}
	o := &aggregate.Options{}
	durs := []*time.Duration{&o.Resolution, &o.AllowedLateness, &o.LateHorizon, &o.IdleTimeout, &o.MaxFutureSkew,
		&o.WatermarkInterval, &o.EvictAfter, &o.MaxSessionSpan, &o.PartialsRetention, &o.FutureHorizon}
	for i, key := range aggDurationKeys {
		*durs[i] = k.Duration("aggregate."+key, true) // 0: the engine's default
	}
	ints := []*int{&o.MaxSeries, &o.MaxLivePartials, &o.MaxTagsPerEvent, &o.SketchMaxBins, &o.MaxQueryResults, &o.MaxQueryPartials,
		&o.StreamBuffer, &o.MaxPending, &o.LateLogSize, &o.QueryCachePartials, &o.QuarantineSize, &o.MaxSeriesPerDevice}
	for i, key := range aggIntKeys {
		*ints[i] = k.Int("aggregate."+key, 0)
	}
	var err error
	if o.SketchAccuracy, err = cast.ToFloat64E(v.Get("aggregate.sketch_accuracy")); err != nil {
		k.Fail("aggregate.sketch_accuracy", "%q is not a number", k.String("aggregate.sketch_accuracy"))
	}
	o.DisableMergedStream = k.Bool("aggregate.disable_merged_stream")
	o.TagKeys, err = tagKeys(v.Get("aggregate.tag_keys"))
	k.Add(err)
	o.Windows, err = windows(v.Get("aggregate.windows"))
	k.Add(err)
	o.Downsample, err = downsample(v.Get("aggregate.downsample"))
	k.Add(err)
	return o, k.Err()
}

// downsample reads the list of downsample tiers ({after, resolution}).
func downsample(raw any) ([]aggregate.DownsampleTier, error) {
	if s, ok := raw.(string); ok && s == "" {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		if raw == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("config key %q: not a list of tiers ({after, resolution})", "aggregate.downsample")
	}
	out := make([]aggregate.DownsampleTier, 0, len(list))
	for i, item := range list {
		key := fmt.Sprintf("aggregate.downsample[%d]", i)
		m, err := cast.ToStringMapE(item)
		if err != nil {
			return nil, fmt.Errorf("config key %q: not a map of after, resolution", key)
		}
		var d aggregate.DownsampleTier
		for k, val := range m {
			var err error
			switch k {
			case "after":
				d.After, err = confval.Duration(val)
			case "resolution":
				d.Resolution, err = confval.Duration(val)
			default:
				return nil, fmt.Errorf("config key %q: unknown (keys are %s)", key+"."+k, strings.Join(aggDownsampleKeys, ", "))
			}
			if err != nil {
				return nil, fmt.Errorf("config key %q: %v", key+"."+k, err)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// tagKeys reads a list of strings, or one comma-separated string (env).
func tagKeys(raw any) ([]string, error) {
	if s, ok := raw.(string); ok {
		if s == "" {
			return nil, nil
		}
		return strings.Split(s, ","), nil
	}
	keys, err := cast.ToStringSliceE(raw)
	if err != nil {
		return nil, fmt.Errorf("config key %q: not a list of tag keys", "aggregate.tag_keys")
	}
	return keys, nil
}

// windows reads the list of configured windows.
func windows(raw any) ([]aggregate.WindowConfig, error) {
	list, ok := raw.([]any)
	if !ok {
		if raw == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("config key %q: not a list of windows ({name, kind, size, slide, gap})", "aggregate.windows")
	}
	out := make([]aggregate.WindowConfig, 0, len(list))
	for i, item := range list {
		key := fmt.Sprintf("aggregate.windows[%d]", i)
		m, err := cast.ToStringMapE(item)
		if err != nil {
			return nil, fmt.Errorf("config key %q: not a map of name, kind, size, slide, gap", key)
		}
		var w aggregate.WindowConfig
		for k, val := range m {
			var err error
			switch k {
			case "name":
				w.Name, err = cast.ToStringE(val)
			case "kind":
				w.Kind, err = cast.ToStringE(val)
			case "size":
				w.Size, err = confval.Duration(val)
			case "slide":
				w.Slide, err = confval.Duration(val)
			case "gap":
				w.Gap, err = confval.Duration(val)
			default:
				return nil, fmt.Errorf("config key %q: unknown (keys are %s)", key+"."+k, strings.Join(aggWindowKeys, ", "))
			}
			if err != nil {
				return nil, fmt.Errorf("config key %q: %v", key+"."+k, err)
			}
		}
		out = append(out, w)
	}
	return out, nil
}
