package sqlitequeue_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/clock"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// dlState is what a source queue and its dead-letter queue hold, by the
// source message id.
type dlState struct {
	source  map[int64]string // id -> "type\tdata"
	dead    map[int64]string // origin id -> payload of its DLQ message
	records int              // lc_arrivals (dead-letter) rows whose message is still in the DLQ
	dlqMsgs int              // every message of the DLQ
	intents int              // lc_moves rows left in the source
	// dlqErr is why the DLQ could not be read read-only (readDLStateBefore):
	// a process killed while creating it leaves a hot journal that only a
	// read-write open rolls back.
	dlqErr error
}

// readDLState reads both stores through read-only handles (no recovery).
// A DLQ that was never created reads as empty.
func readDLState(t *testing.T, src, dlq string) dlState {
	t.Helper()
	st := readDLStateBefore(t, src, dlq)
	if st.dlqErr != nil {
		t.Fatal(st.dlqErr)
	}
	return st
}

// readDLStateBefore is readDLState that reports a DLQ it cannot read
// read-only in dlqErr.
func readDLStateBefore(t *testing.T, src, dlq string) dlState {
	t.Helper()
	st := dlState{source: map[int64]string{}, dead: map[int64]string{}}
	q, err := openQueue(ctx, src, queue.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	scanPayloads(t, dbOf(q).R, "SELECT id, payload_type, payload_data FROM messages", func(id int64, p string) { st.source[id] = p })
	if err := dbOf(q).R.QueryRowContext(ctx, "SELECT COUNT(*) FROM lc_moves").Scan(&st.intents); err != nil {
		t.Fatal(err)
	}
	checkIntegrity(t, dbOf(q).R)
	// Never created, or created empty by a process killed before its first
	// transaction (stat opens no descriptor on the database file).
	if fi, err := os.Stat(filepath.Join(dlq, sqlitequeue.FileName)); errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
		return st
	}
	d, err := openQueue(ctx, dlq, queue.WithReadOnly())
	if err != nil {
		st.dlqErr = err
		return st
	}
	defer d.Close()
	scanPayloads(t, dbOf(d).R, `SELECT r.origin_id, m.payload_type, m.payload_data
FROM lc_arrivals r JOIN messages m ON m.id = r.message_id AND r.kind = 'dead-letter'`, func(id int64, p string) {
		if _, dup := st.dead[id]; dup {
			t.Errorf("origin id %d has two dead letters", id)
		}
		st.dead[id] = p
		st.records++
	})
	if err := dbOf(d).R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages").Scan(&st.dlqMsgs); err != nil {
		t.Fatal(err)
	}
	checkIntegrity(t, dbOf(d).R)
	return st
}

// scanPayloads runs query, whose rows are an id, a payload type and the
// payload's data, and calls row with each id and "type\tdata".
func scanPayloads(t *testing.T, db *sql.DB, query string, row func(id int64, payload string)) {
	t.Helper()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var typ, data string
		if err := rows.Scan(&id, &typ, &data); err != nil {
			t.Fatal(err)
		}
		row(id, typ+"\t"+data)
	}
}

// wantExactlyOnce fails unless every message of want is in exactly one of
// the two queues, byte for byte, and nothing else is in either.
func (st dlState) wantExactlyOnce(t *testing.T, want map[int64]string) {
	t.Helper()
	var problems []string
	for id, p := range want {
		s, inSrc := st.source[id]
		d, inDLQ := st.dead[id]
		switch {
		case inSrc && inDLQ:
			problems = append(problems, fmt.Sprintf("message %d is in both queues", id))
		case !inSrc && !inDLQ:
			problems = append(problems, fmt.Sprintf("message %d is lost", id))
		case inSrc && s != p:
			problems = append(problems, fmt.Sprintf("message %d changed in the source: %.40q", id, s))
		case inDLQ && d != p:
			problems = append(problems, fmt.Sprintf("message %d changed in the DLQ: %.40q, want %.40q", id, d, p))
		}
	}
	if len(st.source)+len(st.dead) != len(want) {
		problems = append(problems, fmt.Sprintf("%d in the source + %d dead letters; want %d in all", len(st.source), len(st.dead), len(want)))
	}
	if st.dlqMsgs != st.records {
		problems = append(problems, fmt.Sprintf("the DLQ holds %d messages but %d dead-letter records", st.dlqMsgs, st.records))
	}
	if st.intents != 0 {
		problems = append(problems, fmt.Sprintf("%d unfinished moves left after recovery", st.intents))
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d problems in all", len(problems)))
		}
		t.Fatal(strings.Join(problems, "\n"))
	}
}

// spendAll sends n messages to the queue in dir and delivers each once (a
// receive and a nack), so that with maxAttempts 1 every next claim moves
// it. It returns what was stored, by id.
func spendAll(t *testing.T, dir string, n int) map[int64]string {
	t.Helper()
	q, err := openQueue(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ps := make([]queue.Payload, n)
	for i := range ps {
		ps[i] = mpPayload(i)
	}
	for i := 0; i < n; i += queue.MaxSendBatch {
		if err := q.SendBatch(ctx, ps[i:min(n, i+queue.MaxSendBatch)]); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int64]string{}
	var held []queue.Message
	for len(want) < n {
		msgs, err := q.Receive(ctx, queue.MaxReceiveBatch, queue.ReceiveVisibility(time.Hour))
		if err != nil || len(msgs) == 0 {
			t.Fatalf("receive: %d messages, %v (have %d of %d)", len(msgs), err, len(want), n)
		}
		for _, m := range msgs {
			want[m.ID] = string(m.Payload.Type) + "\t" + m.Payload.Data
		}
		held = append(held, msgs...)
	}
	for _, m := range held {
		if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestDeadLetterRecoveryAfterStepOne: the move stops after the claim
// committed (the DLQ cannot be opened). The message is hidden from
// consumers, and recovery moves it once the DLQ works.
func TestDeadLetterRecoveryAfterStepOne(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	src, dlq := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq")
	want := spendAll(t, src, 3)
	// A file that is not a queue store where the DLQ should be.
	if err := os.MkdirAll(dlq, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dlq, sqlitequeue.FileName), []byte("not a database, not yet"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log hwLog
	q := openFile(t, src, queue.WithDeadLetter(1, dlq), queue.WithLogger(log.logger()))
	msgs, err := q.Receive(ctx, 10)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("Receive = %d messages, %v; want none (all spent), no error", len(msgs), err)
	}
	if !strings.Contains(log.String(), "cannot move dead letters") {
		t.Errorf("no warning about the failed move; log:\n%s", log.String())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	st := readDLState(t, src, "/nonexistent")
	if st.intents != 3 || len(st.source) != 3 {
		t.Fatalf("after a failed step 2: %d intents, %d source messages; want 3, 3", st.intents, len(st.source))
	}
	// Hidden meanwhile, from localcloud (any handle) and a spec-exact reader.
	plain := openFile(t, src)
	if msgs, err := plain.Receive(ctx, 10); err != nil || len(msgs) != 0 {
		t.Fatalf("a handle without the policy received %d messages being moved (%v)", len(msgs), err)
	}
	if err := os.Remove(filepath.Join(dlq, sqlitequeue.FileName)); err != nil {
		t.Fatal(err)
	}
	plain.Close()
	// A handle without the policy does not finish the moves: their
	// destination is read from the file, and only a handle that names it
	// (its dead-letter policy) may write there. They stay, hidden.
	openFile(t, src).Close()
	if st := readDLState(t, src, dlq); st.intents != 3 || len(st.source) != 3 || len(st.dead) != 0 {
		t.Fatalf("after an open without the policy: %d intents, %d in the source, %d dead letters; want 3, 3, 0", st.intents, len(st.source), len(st.dead))
	}
	// A read-write open with the policy finishes them.
	openFile(t, src, queue.WithDeadLetter(1, dlq)).Close()
	readDLState(t, src, dlq).wantExactlyOnce(t, want)
	if st := readDLState(t, src, dlq); len(st.dead) != 3 {
		t.Fatalf("%d dead letters; want 3", len(st.dead))
	}
}

// TestDeadLetterRecoveryAfterStepTwo: the move stops after the DLQ
// committed its copy but before the source deleted the message. Recovery
// must not copy it again: it only deletes the source's.
func TestDeadLetterRecoveryAfterStepTwo(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	src, dlq := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq")
	want := spendAll(t, src, 5)
	q := openFile(t, src, queue.WithDeadLetter(1, dlq))
	// Step 3 fails on this handle's connection only.
	err := dbOf(q).Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TRIGGER fail_step3 BEFORE DELETE ON main.lc_moves BEGIN SELECT RAISE(ABORT, 'killed'); END`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Receive(ctx, 10); err != nil {
		t.Fatal(err)
	}
	q.Close()
	st := readDLState(t, src, dlq)
	if st.intents != 5 || len(st.source) != 5 || len(st.dead) != 5 {
		t.Fatalf("between steps 2 and 3: %d intents, %d in the source, %d in the DLQ; want 5 each", st.intents, len(st.source), len(st.dead))
	}
	// A consumer of the DLQ acks one before the recovery: it must not come
	// back.
	d := openFile(t, dlq)
	m, err := d.Receive(ctx, 1)
	if err != nil || len(m) != 1 {
		t.Fatal(m, err)
	}
	if err := d.Ack(ctx, m[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	d.Close()
	openFile(t, src, queue.WithDeadLetter(1, dlq)).Close()
	st = readDLState(t, src, dlq)
	if len(st.source) != 0 || len(st.dead) != 4 || st.intents != 0 || st.dlqMsgs != 4 {
		t.Fatalf("after recovery: %d in the source, %d in the DLQ, %d intents; want 0, 4, 0", len(st.source), st.dlqMsgs, st.intents)
	}
	for id, p := range st.dead {
		if want[id] != p {
			t.Errorf("dead letter of %d = %.40q; want %.40q", id, p, want[id])
		}
	}
}

// TestDeadLetterSpecReaders: a spec-exact reader of the source does not
// see a message being moved; a spec-exact reader of the DLQ reads and acks
// the dead letter like any message.
func TestDeadLetterSpecReaders(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	src, dlq := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq")
	c := clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	q := openFile(t, src, queue.WithClock(c.Now), queue.WithDeadLetter(1, dlq))
	if err := q.Send(ctx, queue.JSON(map[string]any{"order": 7})); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	// Step 3 fails, so the message stays mid-move in the source.
	err = dbOf(q).Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TRIGGER fail_step3 BEFORE DELETE ON main.lc_moves BEGIN SELECT RAISE(ABORT, 'killed'); END`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if err := q.Nack(ctx, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Receive(ctx, 1); err != nil || len(got) != 0 {
		t.Fatalf("Receive = %v, %v; want the move, no delivery", got, err)
	}
	q.Close()

	srcDB := rawDB(t, filepath.Join(src, sqlitequeue.FileName))
	if got := specReceive(t, srcDB, c.Now().Add(time.Hour), 30*time.Second, 10); len(got) != 0 {
		t.Fatalf("a spec reader received %+v from the source mid-move; want nothing", got)
	}
	closeDB(t, srcDB)
	dlqDB := rawDB(t, filepath.Join(dlq, sqlitequeue.FileName))
	execAll(t, dlqDB, specMetaDDL, specMarker, specMessagesDDL)
	got := specReceive(t, dlqDB, c.Now(), 30*time.Second, 10)
	if len(got) != 1 || got[0].typ != "json" || got[0].data != `{"order":7}` || got[0].attempt != 1 {
		t.Fatalf("spec reader of the DLQ got %+v; want the json message, attempt 1", got)
	}
	if n := specAckRows(t, dlqDB, got[0].id, got[0].uuid); n != 1 {
		t.Fatalf("spec ack deleted %d rows", n)
	}
	closeDB(t, dlqDB)
	// Recovery then deletes the source's copy and copies nothing again.
	openFile(t, src, queue.WithDeadLetter(1, dlq)).Close()
	st := readDLState(t, src, dlq)
	if len(st.source) != 0 || st.dlqMsgs != 0 || st.intents != 0 {
		t.Fatalf("after recovery: %d in the source, %d in the DLQ, %d intents; want 0, 0, 0", len(st.source), st.dlqMsgs, st.intents)
	}
}

// ---- Killed while moving ----

// Environment of the dead-letter helper process.
const (
	dlHelperSrcEnv = "LOCALCLOUD_QUEUE_DL_HELPER_SRC"
	dlHelperDLQEnv = "LOCALCLOUD_QUEUE_DL_HELPER_DLQ"
)

const (
	dlKillRounds = 100
	// dlKillRoundsRace is the count under -race, which slows every round.
	dlKillRoundsRace = 30
	dlKillMessages   = 200
	dlKillMaxDelay   = 30 * time.Millisecond
	// dlHelperMovesPerClaim is the helper's cap of moves per claim.
	dlHelperMovesPerClaim = 5
)

// TestDeadLetterMoveSurvivesSIGKILL: a consumer process whose every claim
// moves dead letters (maxAttempts 1, every message delivered once already)
// is killed with SIGKILL at a random moment, 0-30 ms after it opened the
// queue, dlKillRounds times (dlKillRoundsRace under -race). After each kill a read-write open of the
// source (which recovers) must leave every message in exactly one of the
// two queues, byte for byte, and no unfinished move.
func TestDeadLetterMoveSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dlKillRounds processes")
	}
	t.Parallel()
	rounds := dlKillRounds
	if raceEnabled() {
		rounds = dlKillRoundsRace
	}
	var pending, between, hot, moved, total int
	began := time.Now()
	for round := range rounds {
		base := t.TempDir()
		src, dlq := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq")
		want := spendAll(t, src, dlKillMessages)
		delay := time.Duration(rand.Int64N(int64(dlKillMaxDelay)))
		exited := dlKill(t, src, dlq, delay)

		before := readDLStateBefore(t, src, dlq)
		if before.intents > 0 {
			pending++
		}
		if before.dlqErr != nil {
			hot++
		}
		for id := range before.dead {
			if _, ok := before.source[id]; ok {
				between++ // killed between the DLQ's commit and the source's
				break
			}
		}
		// The app starts again: its queues open read-write (the source
		// first, with its policy, whose recovery finishes the moves).
		for i, dir := range []string{src, dlq} {
			var opts []queue.Option
			if i == 0 {
				opts = append(opts, queue.WithDeadLetter(1, dlq))
			}
			q, err := openQueue(ctx, dir, opts...)
			if err != nil {
				t.Fatalf("round %d: open %s after the kill: %v", round, dir, err)
			}
			q.Close()
		}
		after := readDLState(t, src, dlq)
		after.wantExactlyOnce(t, want)
		moved += len(after.dead)
		total += len(want)
		if exited {
			t.Logf("round %d: the helper finished before the kill (%s)", round, delay)
		}
	}
	t.Logf("%d rounds in %s: %d killed with moves unfinished, %d of them between the two commits, %d while creating the DLQ; %d of %d messages reached the DLQ",
		rounds, time.Since(began).Round(time.Millisecond), pending, between, hot, moved, total)
	if pending == 0 {
		t.Errorf("no kill landed mid-move: the test did not exercise recovery")
	}
}

// dlKill runs the helper on src and dlq, kills it delay after it said
// ready, and reports whether it had exited by itself already.
func dlKill(t *testing.T, src, dlq string, delay time.Duration) (exited bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadLetterHelperProcess$", "-test.count=1", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), dlHelperSrcEnv+"="+src, dlHelperDLQEnv+"="+dlq)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q (%v); stderr:\n%s", line, err, stderr.String())
	}
	time.Sleep(delay) // the random moment of the kill, not a synchronisation
	_ = cmd.Process.Kill()
	err = cmd.Wait()
	if err == nil {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("helper failed: %v\nstderr:\n%s", err, stderr.String())
	}
	return false
}

// TestDeadLetterHelperProcess is not a test: re-executed by
// TestDeadLetterMoveSurvivesSIGKILL, it receives from the source with
// maxAttempts 1 until nothing is due. Every message has been delivered
// once, so each claim only moves dead letters; a delivered message is an
// error (exit 1).
func TestDeadLetterHelperProcess(t *testing.T) {
	src, dlq := os.Getenv(dlHelperSrcEnv), os.Getenv(dlHelperDLQEnv)
	if src == "" {
		t.Skip("helper process of TestDeadLetterMoveSurvivesSIGKILL; runs only when re-executed")
	}
	os.Exit(dlHelper(src, dlq))
}

func dlHelper(src, dlq string) int {
	// Small claims: more commits, so more moments at which a kill lands
	// between two of them.
	sqlitequeue.SetMaxMovesPerClaim(dlHelperMovesPerClaim)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := openQueue(ctx, src, queue.WithDeadLetter(1, dlq), queue.WithBindingName("orders"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	fmt.Println("ready")
	for {
		msgs, err := q.Receive(ctx, queue.MaxReceiveBatch)
		if err != nil {
			fmt.Fprintln(os.Stderr, "receive:", err)
			return 1
		}
		if len(msgs) > 0 {
			fmt.Fprintf(os.Stderr, "message %d delivered with attempt %d past maxAttempts 1\n", msgs[0].ID, msgs[0].Attempt)
			return 1
		}
		s, err := q.Stats(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stats:", err)
			return 1
		}
		if s.Due == 0 {
			return 0
		}
	}
}

// TestConsumeMovesBacklogOfDeadLetters: 250 spent messages ahead of a
// healthy one. A claim moves at most 10 dead letters, so many claims are
// needed; Consume (polling only every 30 s) must go on claiming after
// a claim that only moved, and reach the healthy message at once.
func TestConsumeMovesBacklogOfDeadLetters(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	src, dlq := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq")
	spendAll(t, src, 250)
	q := hwOpen(t, src, queue.WithDeadLetter(1, dlq), queue.WithPollInterval(hwNoPoll))
	if err := q.Send(ctx, queue.Text("healthy")); err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 1)
	began := time.Now()
	hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		handled <- m.Payload.Data
		return nil
	})
	select {
	case p := <-handled:
		if p != "healthy" {
			t.Fatalf("handled %q; want healthy (everything else is spent)", p)
		}
		if d := time.Since(began); d > 10*time.Second {
			t.Fatalf("healthy message handled after %s", d)
		}
	case <-time.After(hwTimeout):
		t.Fatal("the healthy message behind 250 dead letters was never handled")
	}
	d := hwOpen(t, dlq)
	if n := hwCount(t, d); n != 250 {
		t.Fatalf("DLQ holds %d messages; want 250", n)
	}
}
