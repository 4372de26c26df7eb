package rdq

import (
	"testing"
	"time"
)

func TestAdaptivePrefetchHoldsTheWindowOfWorkAtTheStartRate(t *testing.T) {
	t0 := time.Now()
	p := pace{since: t0}
	if got := p.ahead(0, t0); got != 0 {
		t.Fatalf("nothing measured: %d ahead", got)
	}
	// 10,000 starts a second, held for a while: 50 ms of it is 500.
	var started uint64
	at := t0
	for i := 0; i < 20; i++ {
		at = at.Add(prefetchSample)
		started += 200
		p.ahead(started, at)
	}
	if got := p.ahead(started, at); got < 495 || got > 500 {
		t.Fatalf("10,000 starts a second: %d ahead", got)
	}
	// Far quicker handlers are capped.
	for i := 0; i < 20; i++ {
		at = at.Add(prefetchSample)
		started += 1_000_000
		p.ahead(started, at)
	}
	if got := p.ahead(started, at); got != prefetchMax {
		t.Fatalf("capped at %d: %d", prefetchMax, got)
	}
	// 64 starts a second: three ahead; stopped: none.
	for i := 0; i < 40; i++ {
		at = at.Add(time.Second)
		started += 64
		p.ahead(started, at)
	}
	if got := p.ahead(started, at); got != 3 {
		t.Fatalf("64 a second: %d ahead", got)
	}
	for i := 0; i < 10; i++ {
		at = at.Add(time.Second)
		p.ahead(started, at)
	}
	if got := p.ahead(started, at); got != 0 {
		t.Fatalf("stopped: %d ahead", got)
	}
	// A burst within one sample is not a rate until the sample ends.
	q := pace{since: t0}
	if got := q.ahead(400, t0.Add(5*time.Microsecond)); got != 0 {
		t.Fatalf("mid-sample: %d", got)
	}
	if got := q.ahead(400, t0.Add(prefetchSample)); got != 500 {
		t.Fatalf("400 in 20 ms, half of it history: %d, want 500", got)
	}
}

func TestPrefetchSettingsSizeTheWorker(t *testing.T) {
	c := &Client{}
	reg := NewRegistry()
	for _, tc := range []struct {
		prefetch, most, ahead int
	}{
		{0, prefetchMax, 0}, // adaptive: nothing ahead until measured
		{NoPrefetch, 0, 0},
		{-7, 0, 0},
		{30, 30, 30},
	} {
		w, err := NewWorker(c, WorkerConfig{Queues: []string{"q"}, Registry: reg, Concurrency: 4, Prefetch: tc.prefetch})
		if err != nil {
			t.Fatal(err)
		}
		if w.mostAhead() != tc.most || w.capacity() != 4+tc.ahead {
			t.Fatalf("Prefetch %d: most ahead %d, capacity %d", tc.prefetch, w.mostAhead(), w.capacity())
		}
	}
}
