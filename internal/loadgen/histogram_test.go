package loadgen

import "testing"

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	var h Histogram
	for v := int64(1); v <= 100000; v++ {
		h.Record(v * 1000) // 1 us .. 100 ms
	}
	for q, want := range map[float64]float64{0.5: 50e6, 0.99: 99e6} {
		got := float64(h.Quantile(q))
		if got < want*0.97 || got > want*1.03 {
			t.Errorf("q%.2f = %.0f, want about %.0f", q, got, want)
		}
	}
	if h.Max != 100e6 || h.N != 100000 {
		t.Errorf("max %d n %d", h.Max, h.N)
	}
	var m Histogram
	m.Merge(&h)
	m.Merge(&h)
	if m.N != 200000 || m.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("merge: n %d q50 %d vs %d", m.N, m.Quantile(0.5), h.Quantile(0.5))
	}
	for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 1000, 123456789} {
		if got := bucketValue(bucketOf(v)); float64(got) < float64(v)*0.98 || float64(got) > float64(v)*1.02+1 {
			t.Errorf("bucket of %d holds %d", v, got)
		}
	}
}
