package aggregate

import (
	"errors"
	"fmt"
	"time"
)

// Options configure an Engine. The zero value of every field means its
// default; EnsureDefaults fills them in and Validate reports the first bad
// field by its YAML name.
type Options struct {
	// Resolution is the base bucket width of partials; every window size,
	// slide and session gap is a multiple of it. Default 10s.
	Resolution time.Duration `yaml:"resolution" mapstructure:"resolution"`
	// AllowedLateness is how far the hub watermark must pass a window's end
	// before the window is final. Default 0.
	AllowedLateness time.Duration `yaml:"allowed_lateness" mapstructure:"allowed_lateness"`
	// LateHorizon is how long after becoming final a window still accepts
	// late events (bumping its revision); older events go to the late log.
	// Default 72h.
	LateHorizon time.Duration `yaml:"late_horizon" mapstructure:"late_horizon"`
	// IdleTimeout is the processing time without events after which a
	// stream stops holding the hub watermark back. Default 1m.
	IdleTimeout time.Duration `yaml:"idle_timeout" mapstructure:"idle_timeout"`
	// MaxFutureSkew caps a stream's watermark at its batch's server time
	// plus this much; events beyond it are counted as future-stamped but
	// still aggregated. Default 1m.
	MaxFutureSkew time.Duration `yaml:"max_future_skew" mapstructure:"max_future_skew"`
	// FutureHorizon is how far ahead of the hub's processing time an event
	// may be and still enter its window: an event whose time minus its
	// uncertainty (credited up to FutureHorizon) is later than processing
	// time plus FutureHorizon goes to the quarantine instead, and enters
	// its window once processing time reaches it. It bounds the windows a
	// device with a wrong clock can open ahead of the present. At least
	// max_future_skew. Default 1h (or max_future_skew, when longer).
	FutureHorizon time.Duration `yaml:"future_horizon" mapstructure:"future_horizon"`
	// QuarantineSize is how many events the quarantine holds (events beyond
	// future_horizon, and events held back by max_live_partials); when it
	// is full, the event furthest ahead is dropped and counted. Default
	// 100,000.
	QuarantineSize int `yaml:"quarantine_size" mapstructure:"quarantine_size"`
	// WatermarkInterval is the processing time between hub watermark
	// recomputations (each costs one pass over the streams); 1ns means
	// every Apply. Default 100ms.
	WatermarkInterval time.Duration `yaml:"watermark_interval" mapstructure:"watermark_interval"`
	// EvictAfter is how long after becoming final a partial stays live in
	// memory before it is encoded into Store. Default 1h.
	EvictAfter time.Duration `yaml:"evict_after" mapstructure:"evict_after"`
	// Downsample lists the tiers stored partials move through as they age
	// (by the hub watermark): partials older than a tier's After are merged
	// into partials of its Resolution, which replace them. Resolutions are
	// multiples of Resolution and of the previous tier's; Afters increase
	// and exceed allowed_lateness + late_horizon + evict_after, so
	// downsampled partials can no longer change. Queries over downsampled
	// data need windows that are multiples of the resolution kept there.
	// Empty (the default) keeps every partial at the base resolution.
	Downsample []DownsampleTier `yaml:"downsample" mapstructure:"downsample"`
	// PartialsRetention deletes stored partials of every tier older than
	// this (by the hub watermark); it must exceed the last downsample
	// tier's After. 0 (the default) keeps them forever.
	PartialsRetention time.Duration `yaml:"partials_retention" mapstructure:"partials_retention"`
	// MaxSessionSpan bounds how far a query scans past its range to close
	// a session; longer sessions are cut. Default 24h.
	MaxSessionSpan time.Duration `yaml:"max_session_span" mapstructure:"max_session_span"`
	// Windows are the configured windows: queryable by name and announced
	// to subscribers when final or revised.
	Windows []WindowConfig `yaml:"windows" mapstructure:"windows"`
	// TagKeys are the tag keys that identify a series and may be grouped
	// by; other tags are ignored. Empty keeps every tag.
	TagKeys []string `yaml:"tag_keys" mapstructure:"tag_keys"`
	// MaxSeries caps the distinct series (metric, device, tag set); events
	// of new series beyond it are dropped and counted. Default 1,000,000.
	MaxSeries int `yaml:"max_series" mapstructure:"max_series"`
	// MaxSeriesPerDevice caps the distinct series of one device, so that
	// one device cannot take every series of max_series; events of its new
	// series beyond it are dropped and counted. Default 100,000.
	MaxSeriesPerDevice int `yaml:"max_series_per_device" mapstructure:"max_series_per_device"`
	// MaxLivePartials caps the partials held in memory: past it, final
	// partials are evicted to Store before evict_after, oldest buckets
	// first (answers stay the same; late events for them reload them).
	// Partials of windows that are not final are never evicted: when they
	// alone fill the cap, an event that needs one more partial waits in
	// the quarantine (counted) until final partials can make room. A
	// partial takes about 0.5 KB with a few distinct values. Default
	// 4,000,000.
	MaxLivePartials int `yaml:"max_live_partials" mapstructure:"max_live_partials"`
	// MaxTagsPerEvent caps the tags kept per series. Default 32.
	MaxTagsPerEvent int `yaml:"max_tags_per_event" mapstructure:"max_tags_per_event"`
	// SketchAccuracy is the quantile sketches' relative accuracy: a
	// reported quantile q is within SketchAccuracy*|x| of a true value x
	// at that rank. Default 0.01.
	SketchAccuracy float64 `yaml:"sketch_accuracy" mapstructure:"sketch_accuracy"`
	// SketchMaxBins bounds a sketch's bins (per sign); beyond it the
	// lowest bins collapse. Default 2048.
	SketchMaxBins int `yaml:"sketch_max_bins" mapstructure:"sketch_max_bins"`
	// MaxQueryResults caps the windows one query returns. Default 100,000.
	MaxQueryResults int `yaml:"max_query_results" mapstructure:"max_query_results"`
	// MaxQueryPartials caps the partials one query reads. Default 20,000,000.
	MaxQueryPartials int `yaml:"max_query_partials" mapstructure:"max_query_partials"`
	// QueryCachePartials bounds the decoded stored partials kept for
	// queries (least recently used blocks of 360 buckets leave first), so
	// repeated queries over evicted ranges read and decode them once. A
	// partial with its sketch takes about 0.2 to 16 KB. Default 20,000.
	QueryCachePartials int `yaml:"query_cache_partials" mapstructure:"query_cache_partials"`
	// DisableMergedStream turns the merged event stream off (it costs
	// about 40 bytes per pending event and a merge of per-stream runs per
	// release).
	DisableMergedStream bool `yaml:"disable_merged_stream" mapstructure:"disable_merged_stream"`
	// StreamBuffer is how many released events of the merged stream are
	// kept for consumers to read or resume from. Default 65,536.
	StreamBuffer int `yaml:"stream_buffer" mapstructure:"stream_buffer"`
	// MaxPending caps events waiting for the watermark; past it the oldest
	// are released early and counted. Default 1,048,576.
	MaxPending int `yaml:"max_pending" mapstructure:"max_pending"`
	// LateLogSize is how many beyond-horizon events the late log keeps.
	// Default 10,000.
	LateLogSize int `yaml:"late_log_size" mapstructure:"late_log_size"`
	// Clock is processing time for Tick; default time.Now.
	Clock func() time.Time `yaml:"-" mapstructure:"-"`
	// Store receives evicted final partials; default a MemStore.
	Store PartialStore `yaml:"-" mapstructure:"-"`
}

// DownsampleTier is one downsampling step: stored partials older than
// After are kept at Resolution.
type DownsampleTier struct {
	// After is the age (hub watermark minus the partial's end) beyond
	// which partials move to this tier.
	After time.Duration `yaml:"after" mapstructure:"after"`
	// Resolution is the bucket width kept in this tier.
	Resolution time.Duration `yaml:"resolution" mapstructure:"resolution"`
}

// WindowConfig is one configured window.
type WindowConfig struct {
	// Name is how queries and updates refer to the window.
	Name string `yaml:"name" mapstructure:"name"`
	// Kind is tumbling, hopping, sliding or session.
	Kind string `yaml:"kind" mapstructure:"kind"`
	// Size is the window length (tumbling, hopping, sliding).
	Size time.Duration `yaml:"size" mapstructure:"size"`
	// Slide is the hop of a hopping window.
	Slide time.Duration `yaml:"slide" mapstructure:"slide"`
	// Gap closes a session after this long without events.
	Gap time.Duration `yaml:"gap" mapstructure:"gap"`
}

// Spec returns the window as a query spec.
func (w WindowConfig) Spec() (WindowSpec, error) {
	k, err := ParseWindowKind(w.Kind)
	if err != nil {
		return WindowSpec{}, err
	}
	return WindowSpec{Kind: k, Size: w.Size, Slide: w.Slide, Gap: w.Gap}, nil
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Resolution, 10*time.Second)
	def(&o.LateHorizon, 72*time.Hour)
	def(&o.IdleTimeout, time.Minute)
	def(&o.MaxFutureSkew, time.Minute)
	def(&o.FutureHorizon, max(time.Hour, o.MaxFutureSkew))
	def(&o.WatermarkInterval, 100*time.Millisecond)
	def(&o.EvictAfter, time.Hour)
	def(&o.MaxSessionSpan, 24*time.Hour)
	defInt(&o.MaxSeries, 1_000_000)
	defInt(&o.MaxLivePartials, 4_000_000)
	defInt(&o.MaxTagsPerEvent, 32)
	defInt(&o.SketchMaxBins, 2048)
	defInt(&o.MaxQueryResults, 100_000)
	defInt(&o.MaxQueryPartials, 20_000_000)
	defInt(&o.QueryCachePartials, 20_000)
	defInt(&o.StreamBuffer, 1<<16)
	defInt(&o.MaxPending, 1<<20)
	defInt(&o.LateLogSize, 10_000)
	defInt(&o.QuarantineSize, 100_000)
	defInt(&o.MaxSeriesPerDevice, 100_000)
	if o.SketchAccuracy == 0 {
		o.SketchAccuracy = 0.01
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Store == nil {
		o.Store = NewMemStore()
	}
}

// Validate reports the first invalid field, by its YAML name.
func (o *Options) Validate() error {
	pos := []struct {
		name string
		v    time.Duration
	}{
		{"resolution", o.Resolution}, {"late_horizon", o.LateHorizon},
		{"idle_timeout", o.IdleTimeout}, {"max_future_skew", o.MaxFutureSkew},
		{"watermark_interval", o.WatermarkInterval}, {"evict_after", o.EvictAfter},
		{"max_session_span", o.MaxSessionSpan}, {"future_horizon", o.FutureHorizon},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return optErr(p.name, "must be positive, got %v", p.v)
		}
	}
	if o.AllowedLateness < 0 {
		return optErr("allowed_lateness", "must not be negative, got %v", o.AllowedLateness)
	}
	if o.FutureHorizon < o.MaxFutureSkew {
		return optErr("future_horizon", "must be at least max_future_skew %v (events between them enter their windows), got %v", o.MaxFutureSkew, o.FutureHorizon)
	}
	if o.Resolution%time.Millisecond != 0 {
		return optErr("resolution", "must be a whole number of milliseconds, got %v", o.Resolution)
	}
	if err := o.validateLimits(); err != nil {
		return err
	}
	if err := o.validateDownsample(); err != nil {
		return err
	}
	return o.validateWindows()
}

func (o *Options) validateLimits() error {
	ints := []struct {
		name string
		v    int
	}{
		{"max_series", o.MaxSeries}, {"max_live_partials", o.MaxLivePartials}, {"max_tags_per_event", o.MaxTagsPerEvent},
		{"sketch_max_bins", o.SketchMaxBins}, {"max_query_results", o.MaxQueryResults},
		{"max_query_partials", o.MaxQueryPartials}, {"query_cache_partials", o.QueryCachePartials},
		{"stream_buffer", o.StreamBuffer},
		{"max_pending", o.MaxPending}, {"late_log_size", o.LateLogSize},
		{"quarantine_size", o.QuarantineSize}, {"max_series_per_device", o.MaxSeriesPerDevice},
	}
	for _, p := range ints {
		if p.v <= 0 {
			return optErr(p.name, "must be positive, got %d", p.v)
		}
	}
	if int64(o.MaxSeries) > 1<<31 {
		return optErr("max_series", "must be at most 2^31, got %d", o.MaxSeries)
	}
	if !(o.SketchAccuracy > 0 && o.SketchAccuracy < 1) {
		return optErr("sketch_accuracy", "must be in (0, 1), got %v", o.SketchAccuracy)
	}
	if o.Clock == nil {
		return optErr("clock", "must be set")
	}
	if o.Store == nil {
		return optErr("store", "must be set")
	}
	return nil
}

func (o *Options) validateWindows() error {
	seen := map[string]bool{}
	for i, w := range o.Windows {
		field := fmt.Sprintf("windows[%d]", i)
		if w.Name == "" {
			return optErr(field+".name", "must not be empty")
		}
		if seen[w.Name] {
			return optErr(field+".name", "duplicate window %q", w.Name)
		}
		seen[w.Name] = true
		spec, err := w.Spec()
		if err != nil {
			return optErr(field+".kind", "%v", err)
		}
		if err := spec.validate(o.Resolution); err != nil {
			var pe *ParamError
			if errors.As(err, &pe) {
				return optErr(field+"."+pe.Param, "%s", pe.Reason)
			}
			return optErr(field, "%v", err)
		}
	}
	return nil
}

// validateDownsample checks the tiers and the retention: every tier's
// partials must be final beyond change (older than late events can reach)
// and each resolution must hold whole buckets of the previous one.
func (o *Options) validateDownsample() error {
	if len(o.Downsample) > maxTiers {
		return optErr("downsample", "at most %d tiers, got %d", maxTiers, len(o.Downsample))
	}
	frozen := o.AllowedLateness + o.LateHorizon + o.EvictAfter
	prevRes, prevAfter := o.Resolution, time.Duration(0)
	for i, t := range o.Downsample {
		field := fmt.Sprintf("downsample[%d]", i)
		if t.Resolution <= 0 || t.Resolution%prevRes != 0 || t.Resolution == prevRes {
			return optErr(field+".resolution", "must be a multiple of %v (the base resolution and the previous tier's) and coarser, got %v", prevRes, t.Resolution)
		}
		if t.After <= frozen {
			return optErr(field+".after", "must exceed allowed_lateness + late_horizon + evict_after = %v (younger partials can still change), got %v", frozen, t.After)
		}
		if i > 0 && t.After <= prevAfter {
			return optErr(field+".after", "must exceed the previous tier's after %v, got %v", prevAfter, t.After)
		}
		prevRes, prevAfter = t.Resolution, t.After
	}
	switch {
	case o.PartialsRetention < 0:
		return optErr("partials_retention", "must not be negative, got %v", o.PartialsRetention)
	case o.PartialsRetention > 0 && o.PartialsRetention <= frozen:
		return optErr("partials_retention", "must exceed allowed_lateness + late_horizon + evict_after = %v, got %v", frozen, o.PartialsRetention)
	case o.PartialsRetention > 0 && len(o.Downsample) > 0 && o.PartialsRetention <= prevAfter:
		return optErr("partials_retention", "must exceed the last downsample tier's after %v, got %v", prevAfter, o.PartialsRetention)
	}
	return nil
}

func optErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidOption, field, fmt.Sprintf(format, args...))
}
