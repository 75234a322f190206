package aggregate

// RetireStream forgets a stream the hub retired after it was idle for its
// stream expiry, so one device's old buffer incarnations do not count in
// the hub watermark, in Behind, or in Streams, and the same (device, id)
// may start again as a new stream. The stream's slot keeps its identity
// (device and id), because partials, the late log and the quarantine name
// streams by slot; it no longer holds state of its own. Unknown streams
// are ignored, so a replay of the retirement is harmless.
func (e *Engine) RetireStream(device string, id StreamID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := streamKey{device, id}
	i, ok := e.streamIx[k]
	if !ok {
		return
	}
	delete(e.streamIx, k)
	st := &e.streams[i]
	*st = stream{device: st.device, id: st.id, retired: true}
}

// liveStreams counts the streams that are not retired.
func (e *Engine) liveStreams() int {
	return len(e.streamIx)
}
