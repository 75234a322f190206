package natslog

import "context"

// HeadGeneration returns the generation the pointer names (0: no snapshot
// yet) without reading any object: what a writer names as
// Snapshot.Generation in its next Put after a conflict or an error that
// left it unknown whether its pointer move succeeded.
func (s *Snapshots) HeadGeneration(ctx context.Context) (uint64, error) {
	entries, _, err := s.readHead(ctx)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	return entries[0].gen, nil
}
