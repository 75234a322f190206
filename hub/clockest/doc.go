// Package clockest is the hub's own estimate of each device's clock
// offset, taken from server_time - send_time of its batches. It needs
// nothing from the hub but those two times, so it stands alone; the hub
// uses a DeviceClocks as its default ClockEstimator.
package clockest
