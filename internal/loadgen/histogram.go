package loadgen

import (
	"math/bits"
	"slices"
)

// Histogram records latencies in nanoseconds with about 1.6% precision:
// values below 64 exactly, above in 64 steps per power of two.
type Histogram struct {
	Counts map[int]uint64 `json:"counts"`
	N      uint64         `json:"n"`
	Max    int64          `json:"max"`
	Errors uint64         `json:"errors"`
}

func bucketOf(v int64) int {
	if v < 64 {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 7
	return (e+1)*64 + int(v>>e) - 64
}

// bucketValue is the middle of bucket i.
func bucketValue(i int) int64 {
	if i < 64 {
		return int64(i)
	}
	e := i/64 - 1
	m := int64(i%64 + 64)
	return m<<e + (int64(1)<<e)/2
}

func (h *Histogram) Record(v int64) {
	if h.Counts == nil {
		h.Counts = map[int]uint64{}
	}
	h.Counts[bucketOf(v)]++
	h.N++
	h.Max = max(h.Max, v)
}

func (h *Histogram) Merge(o *Histogram) {
	if o == nil {
		return
	}
	if h.Counts == nil {
		h.Counts = map[int]uint64{}
	}
	for b, n := range o.Counts {
		h.Counts[b] += n
	}
	h.N += o.N
	h.Errors += o.Errors
	h.Max = max(h.Max, o.Max)
}

// Quantile returns the value below which a fraction q of the records lie.
func (h *Histogram) Quantile(q float64) int64 {
	if h.N == 0 {
		return 0
	}
	idx := make([]int, 0, len(h.Counts))
	for b := range h.Counts {
		idx = append(idx, b)
	}
	slices.Sort(idx)
	rank := uint64(q*float64(h.N-1)) + 1
	var seen uint64
	for _, b := range idx {
		seen += h.Counts[b]
		if seen >= rank {
			return min(bucketValue(b), h.Max)
		}
	}
	return h.Max
}
