package confval

import "errors"

// ErrNoUnit is wrapped by the error of a duration given as a bare number
// other than zero.
var ErrNoUnit = errors.New("confval: a duration needs a unit")
