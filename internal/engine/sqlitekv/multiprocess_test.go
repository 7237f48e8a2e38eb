package sqlitekv_test

// The identifiers of this file start with "mp" so they cannot collide with
// the package's other test files.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/testutil"
)

// mpRacerDirEnv switches the test binary into a racer process; it holds the
// store directory. mpRacerIDEnv numbers the process.
const (
	mpRacerDirEnv = "LOCALCLOUD_KV_RACER_DIR"
	mpRacerIDEnv  = "LOCALCLOUD_KV_RACER_ID"
)

const (
	mpProcesses  = 2
	mpRacers     = 8 // goroutines per process: 16 racers in all
	mpRounds     = 5
	mpLineWaitKV = 30 * time.Second
)

// TestMultiProcessPutIfNotExists: 16 racers in 2 OS processes (8 goroutines
// each, over 2 handles per process) put-if-not-exists one key at the same
// moment. Exactly one wins across both processes, and every process then
// reads the winner's value. Several rounds, one fresh key each.
func TestMultiProcessPutIfNotExists(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 processes")
	}
	t.Parallel()
	dir := t.TempDir()
	s, err := openKV(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	var racers []*testutil.Child
	for p := range mpProcesses {
		racers = append(racers, testutil.StartChild(t, fmt.Sprintf("racer process %d", p), "TestKVRacerProcess", mpRacerDirEnv+"="+dir, mpRacerIDEnv+"="+strconv.Itoa(p)))
	}
	for _, c := range racers {
		c.Expect(t, "ready", mpLineWaitKV)
	}
	winsPerProcess := make([]int, mpProcesses)
	for round := range mpRounds {
		key := fmt.Sprintf("race:round-%d", round)
		// The barrier: both processes hold 8 goroutines parked on a
		// channel, released by this line.
		for _, c := range racers {
			c.Send(t, "race "+key)
		}
		wins, winner := 0, ""
		for p, c := range racers {
			f := strings.Fields(c.Expect(t, "raced "+key+" ", mpLineWaitKV))
			// raced <key> <wins> <losses> <value won or ->
			if len(f) != 5 {
				t.Fatalf("%s: malformed %q", c.Name, strings.Join(f, " "))
			}
			w, _ := strconv.Atoi(f[2])
			l, _ := strconv.Atoi(f[3])
			if w+l != mpRacers {
				t.Fatalf("%s round %d: %d wins + %d losses; want %d racers", c.Name, round, w, l, mpRacers)
			}
			wins += w
			winsPerProcess[p] += w
			if w > 0 {
				winner = f[4]
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners across %d processes; want exactly 1", round, wins, mpProcesses)
		}
		for _, c := range racers {
			c.Send(t, "read "+key)
		}
		for _, c := range racers {
			f := strings.Fields(c.Expect(t, "read "+key+" ", mpLineWaitKV))
			// read <key> <value via handle 0> <value via handle 1>
			if len(f) != 4 || f[2] != winner || f[3] != winner {
				t.Errorf("round %d: %s read %q; want the winner's value %q on both handles", round, c.Name, strings.Join(f, " "), winner)
			}
		}
		got, ok, err := s.Get(context.Background(), key)
		if err != nil || !ok || string(got) != winner {
			t.Errorf("round %d: parent read %q, %v, %v; want %q", round, got, ok, err, winner)
		}
	}
	for _, c := range racers {
		c.Send(t, "exit")
	}
	for _, c := range racers {
		c.WantSuccess(t, mpLineWaitKV)
	}
	var res string
	if err := dbOf(s).R.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, %v; want ok", res, err)
	}
	t.Logf("wins per process over %d rounds: %v", mpRounds, winsPerProcess)
}

// TestKVRacerProcess is not a test: re-executed by
// TestMultiProcessPutIfNotExists with mpRacerDirEnv set, it is one racer
// process. Protocol on stdin/stdout, one line each:
//
//	-> ready
//	<- race <key>   -> raced <key> <wins> <losses> <value won or ->
//	<- read <key>   -> read <key> <value via handle 0> <value via handle 1>
//	<- exit         (exit status 0)
//
// Any error exits 1 with the error on stderr.
func TestKVRacerProcess(t *testing.T) {
	dir := os.Getenv(mpRacerDirEnv)
	if dir == "" {
		t.Skip("helper process of TestMultiProcessPutIfNotExists; runs only when re-executed")
	}
	os.Exit(mpRace(dir, os.Getenv(mpRacerIDEnv), os.Stdin, os.Stdout, os.Stderr))
}

func mpRace(dir, id string, in io.Reader, out, errOut io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(errOut, "racer process %s: "+format+"\n", append([]any{id}, args...)...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var handles [2]*kv.Store
	for i := range handles {
		s, err := openKV(ctx, dir)
		if err != nil {
			return fail("open: %v", err)
		}
		defer s.Close()
		handles[i] = s
	}
	say := func(format string, args ...any) error {
		_, err := fmt.Fprintf(out, format+"\n", args...)
		return err
	}
	if err := say("ready"); err != nil {
		return fail("write: %v", err)
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, key, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "race":
			var (
				wg     sync.WaitGroup
				parked sync.WaitGroup
				gun    = make(chan struct{})
				mu     sync.Mutex
				wins   int
				won    = "-"
				errs   []string
			)
			parked.Add(mpRacers)
			for g := range mpRacers {
				wg.Go(func() {
					value := fmt.Sprintf("process%s-goroutine%d-%s", id, g, key)
					parked.Done()
					<-gun
					ok, err := handles[g%2].Put(ctx, key, []byte(value), kv.IfNotExists())
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						errs = append(errs, err.Error())
					case ok:
						wins++
						won = value
					}
				})
			}
			parked.Wait()
			close(gun)
			wg.Wait()
			if len(errs) > 0 {
				return fail("race %s: %s", key, strings.Join(errs, "; "))
			}
			if err := say("raced %s %d %d %s", key, wins, mpRacers-wins, won); err != nil {
				return fail("write: %v", err)
			}
		case "read":
			var vals []string
			for _, s := range handles {
				v, ok, err := s.Get(ctx, key)
				if err != nil {
					return fail("get %s: %v", key, err)
				}
				if !ok {
					v = []byte("-")
				}
				vals = append(vals, string(v))
			}
			if err := say("read %s %s", key, strings.Join(vals, " ")); err != nil {
				return fail("write: %v", err)
			}
		case "exit":
			for _, s := range handles {
				if err := s.Close(); err != nil {
					return fail("close: %v", err)
				}
			}
			return 0
		default:
			return fail("unknown command %q", sc.Text())
		}
	}
	return fail("stdin ended without exit: %v", sc.Err())
}
