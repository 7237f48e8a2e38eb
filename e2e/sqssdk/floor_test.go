package sqssdk

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The "floor" of BenchmarkSQS: a server in another process that answers
// the benchmark's Query requests with fixed, valid responses and does no
// work at all (no queue, no store). Its rows are what the client code, the
// HTTP round trip on loopback and a Go net/http server cost by themselves:
// no SQS server, in memory or on disk, answers this client faster.

// floorBody is a ReceiveMessage body of the floor: 100 bytes, as bodies(10).
var floorBody = fmt.Sprintf("%-100d", 0)

// floorResponse is the floor's answer to one request.
func floorResponse(r *http.Request) string {
	const ns = ` xmlns="http://queue.amazonaws.com/doc/2012-11-05/"`
	meta := "<ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ResponseMetadata>"
	var sb strings.Builder
	switch action := r.PostFormValue("Action"); action {
	case "GetQueueUrl":
		sb.WriteString("<GetQueueUrlResponse" + ns + "><GetQueueUrlResult><QueueUrl>http://" + r.Host + "/000000000000/" +
			r.PostFormValue("QueueName") + "</QueueUrl></GetQueueUrlResult>" + meta + "</GetQueueUrlResponse>")
	case "SendMessage":
		sb.WriteString("<SendMessageResponse" + ns + "><SendMessageResult><MD5OfMessageBody>00000000000000000000000000000000</MD5OfMessageBody>" +
			"<MessageId>00000000-0000-0000-0000-000000000000</MessageId></SendMessageResult>" + meta + "</SendMessageResponse>")
	case "SendMessageBatch", "DeleteMessageBatch":
		prefix := strings.TrimSuffix(action, "Batch") + "BatchRequestEntry."
		sb.WriteString("<" + action + "Response" + ns + "><" + action + "Result>")
		for i := 1; ; i++ {
			id := r.PostFormValue(prefix + strconv.Itoa(i) + ".Id")
			if id == "" {
				break
			}
			sb.WriteString("<" + strings.TrimSuffix(action, "Batch") + "BatchResultEntry><Id>" + id + "</Id>")
			if action == "SendMessageBatch" {
				sb.WriteString("<MD5OfMessageBody>00000000000000000000000000000000</MD5OfMessageBody><MessageId>00000000-0000-0000-0000-000000000000</MessageId>")
			}
			sb.WriteString("</" + strings.TrimSuffix(action, "Batch") + "BatchResultEntry>")
		}
		sb.WriteString("</" + action + "Result>" + meta + "</" + action + "Response>")
	case "ReceiveMessage":
		n, _ := strconv.Atoi(r.PostFormValue("MaxNumberOfMessages"))
		sb.WriteString("<ReceiveMessageResponse" + ns + "><ReceiveMessageResult>")
		for i := range max(n, 1) {
			sb.WriteString("<Message><MessageId>00000000-0000-0000-0000-00000000000" + strconv.Itoa(i) + "</MessageId><ReceiptHandle>r" +
				strconv.Itoa(i) + "</ReceiptHandle><MD5OfBody>00000000000000000000000000000000</MD5OfBody><Body>" + floorBody + "</Body></Message>")
		}
		sb.WriteString("</ReceiveMessageResult>" + meta + "</ReceiveMessageResponse>")
	default:
		return ""
	}
	return sb.String()
}

// runFloor is the "floor" helper: it serves floorResponse on a free
// loopback port, prints "listening <addr>" and exits when stdin is closed.
func runFloor() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := floorResponse(r)
		if body == "" {
			http.Error(w, "floor: unknown action", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		_, _ = io.WriteString(w, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return 0
}

// startFloor runs the floor helper and returns its target.
func startFloor(b *testing.B) *target {
	h := startHelper(b, "floor")
	for {
		h.mu.Lock()
		if len(h.lines) > 0 {
			line := h.lines[0]
			h.mu.Unlock()
			addr, ok := strings.CutPrefix(line, "listening ")
			if !ok {
				b.Fatalf("floor helper said %q", line)
			}
			return &target{name: "floor", c: newQClient("http://" + addr), q: "http://" + addr + "/000000000000/bench", pid: h.cmd.Process.Pid}
		}
		h.mu.Unlock()
		select {
		case <-h.done:
			b.Fatalf("floor helper exited: %v", h.err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
}
