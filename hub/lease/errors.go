package lease

import "errors"

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalidOption: an Options field is invalid; the message names it.
	ErrInvalidOption = errors.New("lease: invalid option")
	// ErrDuplicateHub: another live hub announces the same HubID; the
	// hub refuses to start (or stops) rather than share partitions
	// under one name.
	ErrDuplicateHub = errors.New("lease: another live hub has this hub id")
	// ErrBucketMismatch: the lease bucket exists with another TTL or
	// history than Options ask for; every hub must use the same TTL.
	ErrBucketMismatch = errors.New("lease: lease bucket exists with other settings")
	// ErrStopped: the manager was stopped; Run returns it after Stop.
	ErrStopped = errors.New("lease: stopped")
)
